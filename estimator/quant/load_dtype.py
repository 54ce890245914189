"""The dtype of what bitsandbytes leaves unquantized: transformers' ``dtype="auto"``, or the caller's ``dtype=``.

``from_pretrained(repo, quantization_config=BitsAndBytesConfig(...))`` without ``dtype`` loads with
``dtype="auto"`` (transformers 5.23 ``modeling_utils.py``, ``from_pretrained``: ``dtype=None`` becomes
``"auto"``), and the bitsandbytes quantizers leave that dtype as it is (``HfQuantizer.update_dtype``
is a no-op). ``_get_dtype`` resolves ``"auto"`` in this order:

1. the config's ``dtype`` (a config.json with the legacy ``torch_dtype`` key fills it too,
   ``PreTrainedConfig.__init__``);
2. for a sharded checkpoint, the index's ``metadata["dtype"]``;
3. the first floating tensor (float8 excluded) of the first checkpoint file (``get_state_dict_dtype``
   on ``load_state_dict(checkpoint_files[0], map_location="meta")``: shards sorted by name, a file's
   tensors in ``safe_open(...).keys()`` order, which is sorted by name).

Embeddings, the output head, norms, biases and every other tensor bitsandbytes does not quantize are
held in that dtype, except the model's dtype plan (``_keep_in_fp32_modules`` stay float32 when it is
float16, ``_keep_in_fp32_modules_strict`` when it is float16 or bfloat16; :mod:`estimator.build.dtype_plan`).
An explicit ``dtype=`` (``bnb_compute_dtype``) skips the rule. A checkpoint whose dtype nothing
names (no config dtype, no header read) is taken as float32, transformers' default when the state
dict is empty; the note says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from estimator.options import DType
from estimator.source.stored import StoredTensor

KEPT_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)  # the dtypes a bitsandbytes load can keep modules in
ITEMSIZE = {DType.FLOAT32: 4, DType.FLOAT16: 2, DType.BFLOAT16: 2}
_SAFETENSORS = {"F32": DType.FLOAT32, "F16": DType.FLOAT16, "BF16": DType.BFLOAT16}
_CHECKPOINT_FLOATING = {"F64", "F32", "F16", "BF16"}  # get_state_dict_dtype's is_floating_point(), float8 left out
_TORCH_NAMES = {"float32": DType.FLOAT32, "float": DType.FLOAT32, "float16": DType.FLOAT16, "half": DType.FLOAT16,
                "bfloat16": DType.BFLOAT16}


@dataclass(frozen=True)
class KeptDType:
    """The dtype of the unquantized modules of an int8 / int4 load, and where it comes from."""

    dtype: DType | None  # None: a dtype bitsandbytes rows are not given for (float64, an integer checkpoint)
    source: str  # why: "the checkpoint's dtype, read by transformers' dtype='auto' from the config", "dtype=torch.float16 given", ...
    named: str  # the dtype as the source names it (for notes when dtype is None)

    @property
    def itemsize(self) -> int:
        if self.dtype is None:
            raise ValueError(f"no bitsandbytes layout for dtype {self.named}")
        return ITEMSIZE[self.dtype]


FLOAT16_GIVEN = KeptDType(DType.FLOAT16, "dtype=torch.float16 given", "float16")  # what the low-level functions default to


def _torch_name(value: object) -> str | None:
    text = str(value).strip()
    return text.removeprefix("torch.") if text and text != "None" else None


def explicit(dtype: DType) -> KeptDType:
    """``from_pretrained(..., dtype=dtype)``: the caller's choice, no ``"auto"``."""
    return KeptDType(dtype, f"dtype=torch.{dtype.value} given (bnb_compute_dtype)", dtype.value)


def config_dtype(config: dict[str, Any]) -> str | None:
    """The config's dtype as transformers reads it: ``dtype``, else the legacy ``torch_dtype``."""
    for key in ("dtype", "torch_dtype"):
        name = _torch_name(config.get(key)) if config.get(key) is not None else None
        if name is not None:
            return name
    return None


def first_floating(first_file: Iterable[StoredTensor]) -> str | None:
    """``get_state_dict_dtype`` on the first checkpoint file's header: its first floating tensor by name."""
    tensors = sorted(first_file, key=lambda tensor: tensor.name)
    for tensor in tensors:
        if tensor.dtype in _CHECKPOINT_FLOATING:
            return tensor.dtype
    return tensors[0].dtype if tensors else None


def _kept(named: str, source: str) -> KeptDType:
    dtype = _TORCH_NAMES.get(named) or _SAFETENSORS.get(named)
    label = dtype.value if dtype is not None else {"F64": "float64"}.get(named, named.lower())
    return KeptDType(dtype, source, label)


def auto_dtype(config: dict[str, Any], *, index_dtype: object = None, first_file: Iterable[StoredTensor] | None = None) -> KeptDType:
    """transformers' ``dtype="auto"`` (``_get_dtype``) from what the estimator can read without weights."""
    named = config_dtype(config)
    if named is not None:
        return _kept(named, "the checkpoint's dtype, read by transformers' dtype='auto' from the config")
    index = _torch_name(index_dtype) if index_dtype is not None else None
    if index is not None:
        return _kept(index, "the checkpoint's dtype, read by transformers' dtype='auto' from the shard index's metadata")
    stored = first_floating(first_file) if first_file is not None else None
    if stored is not None:
        return _kept(stored, "the checkpoint's dtype, read by transformers' dtype='auto' from its first floating tensor; the config names none")
    return KeptDType(DType.FLOAT32, "assumed: neither the config nor a readable safetensors header names the checkpoint's dtype, "
                                    "which transformers' dtype='auto' would read from the weights; pass bnb_compute_dtype if you load with dtype=", "float32")


def kept_dtype(config: dict[str, Any], given: DType | None, *, index_dtype: object = None,
               first_file: Iterable[StoredTensor] | None = None) -> KeptDType:
    """The caller's ``dtype=`` when given, else transformers' ``"auto"``."""
    return explicit(given) if given is not None else auto_dtype(config, index_dtype=index_dtype, first_file=first_file)
