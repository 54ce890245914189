"""Load-mode rows: from a meta build (``method: "exact"``) or from safetensors headers (``"stored"``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from estimator.options import DType, Library
from estimator.result import Method, Row
from estimator.source import hub
from estimator.source.stored import (
    FLOATING,
    StoredTensor,
    is_prequantized,
    local_checkpoint,
    stored_bytes,
    tensors_from_metadata,
    tensors_from_shapes,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

    from torch import nn

    from estimator.options import LoadSpec
    from estimator.quant.load_dtype import KeptDType
    from estimator.source.resolve import Resolved

logger = logging.getLogger(__name__)

_BNB_DTYPES = (DType.INT8, DType.INT4)  # rows in a bitsandbytes layout (estimator.quant.bnb)
ADAM_BYTES_FP32 = 4 + 8  # gradient + two fp32 moments per parameter
ADAM_BYTES_MIXED = 2 + 4 + 8  # 16-bit gradient + fp32 master + two fp32 moments


def _null_row(dtype: DType, note: str, method: Method = "exact") -> Row:
    return Row(dtype=dtype.value, total_bytes=None, largest_layer_bytes=None, training_adam_bytes=None, method=method, notes=(note,))


def build(resolved: Resolved, dtype: DType, *, trust_remote_code: bool = False) -> nn.Module:
    """The resolved model built on the meta device in ``dtype``'s torch dtype."""
    from estimator.build import build_timm, build_transformers, torch_dtype

    if resolved.library is Library.TIMM:
        return build_timm(resolved.config, torch_dtype(dtype), model=resolved.name)
    if resolved.library is Library.SENTENCE_TRANSFORMERS:
        from estimator.build.st_models import build_sentence_transformer

        return build_sentence_transformer(resolved.extra, torch_dtype(dtype), model=resolved.name)
    remote_ref = str(resolved.ref.path) if resolved.ref.path is not None else resolved.ref.repo_id
    return build_transformers(resolved.config, torch_dtype(dtype), model=resolved.name, trust_remote_code=trust_remote_code, remote_ref=remote_ref)


def built_rows(resolved: Resolved, spec: LoadSpec, load: KeptDType | None = None,
               checkpoint_names: list[str] | None = None) -> tuple[Row, ...]:
    """Exact rows: the real model built on meta in each dtype, its unique tensors counted, plus the
    fused checkpoint storage ``from_pretrained`` keeps alive (:mod:`estimator.load.fused`; its
    ``checkpoint_names``: the safetensors header names, when read).

    ``load``: the dtype of what int8 / int4 rows leave unquantized, when the caller has read it from
    the checkpoint's headers; else it is resolved here (:func:`kept_dtype_of`).
    """
    from estimator.build.weights import measure, training_adam_bytes
    from estimator.load.fused import fused_view_bytes

    if resolved.library is Library.DIFFUSERS:
        from estimator.load.pipelines import diffusers_rows

        return diffusers_rows(resolved, spec)
    if checkpoint_names is None and resolved.ref.path is not None:
        from estimator.load.fused import local_names

        checkpoint_names = local_names(Path(resolved.ref.path))
    rows = []
    builds = _KeptBuilds(resolved, spec)
    for dtype in spec.dtypes:
        if dtype in _BNB_DTYPES:
            if load is None:
                load = kept_dtype_of(resolved, spec)
            rows.append(_bnb_row(resolved, spec, dtype, builds, load))
            continue
        if dtype is DType.FLOAT8:
            rows.append(_fp8_row(resolved, spec))
            continue
        model = build(resolved, dtype, trust_remote_code=spec.trust_remote_code)
        weights = measure(model)
        fused, fused_note = fused_view_bytes(model, checkpoint_names) if resolved.library is Library.TRANSFORMERS else (0, None)
        notes = (f"largest layer: {', '.join(weights.largest_layer_names[:3])}",) if weights.largest_layer_names else ()
        held = None
        declared = resolved.config.get("quantization_config")
        if isinstance(declared, dict) and checkpoint_bits(declared)[0] != "bitsandbytes":
            method, bits = checkpoint_bits(declared)
            held = f"{dtype.value}: the unquantized build, not what this {method} checkpoint loads"
            notes = (*notes, f"{dtype.value}: the model built from its config unquantized; the config declares a pre-quantized "
                             f"checkpoint ({method}, {bits or 'non-integer'}-bit), which loads the tensors it stores instead: "
                             "those are read from its safetensors headers (Hub repos)")
        rows.append(Row(
            dtype=dtype.value,
            total_bytes=weights.total_bytes + fused,
            largest_layer_bytes=weights.largest_layer_bytes,
            training_adam_bytes=training_adam_bytes(weights, mixed_precision=dtype.is_16bit),
            method="exact",
            notes=notes + ((fused_note,) if fused_note else ()),
            # accelerate's basis: the same model in float32 (its 16-bit parameters at 4 bytes)
            float32_bytes=weights.total_bytes + fused * (2 if dtype.is_16bit else 1) + 2 * weights.low_precision_parameters,
            weights_held=held,
        ))
    return tuple(rows)


def _fp8_row(resolved: Resolved, spec: LoadSpec) -> Row:
    if resolved.library is not Library.TRANSFORMERS:
        return _null_row(DType.FLOAT8, "float8 rows follow transformers' FP8 quantization; not available for timm models.")
    from estimator.build.weights import measure
    from estimator.quant.fp8 import to_fp8

    built = build(resolved, DType.FLOAT8, trust_remote_code=spec.trust_remote_code)
    try:
        model, skipped = to_fp8(built)
    except AssertionError as refusal:  # transformers' own swap asserts what it cannot convert (FP8Experts with biases)
        return _null_row(DType.FLOAT8, f"float8: transformers' FineGrainedFP8Config cannot quantize this model ({refusal}); "
                                       "no float8 row")
    weights = measure(model)
    kept = ", ".join(skipped) if skipped else "none"
    return Row(
        dtype=DType.FLOAT8.value,
        total_bytes=weights.total_bytes,
        largest_layer_bytes=weights.largest_layer_bytes,
        training_adam_bytes=None,
        method="exact",
        notes=(
            ("float8: Linear weights in float8_e4m3fn with a float32 scale per 128x128 block (transformers FineGrainedFP8Config); "
             f"kept in bfloat16: embeddings, norms, non-Linear layers and {kept}"),
            "training_adam_bytes is null: an FP8-quantized model is not trained as is",
        ),
    )


class _KeptBuilds:
    """The meta build the int8 and int4 rows share (in the load dtype), made at most once per estimate (read only)."""

    def __init__(self, resolved: Resolved, spec: LoadSpec) -> None:
        self._resolved, self._spec = resolved, spec
        self._models: dict[DType, nn.Module] = {}

    def get(self, dtype: DType) -> nn.Module:
        if dtype not in self._models:
            self._models[dtype] = build(self._resolved, dtype, trust_remote_code=self._spec.trust_remote_code)
        return self._models[dtype]


def kept_dtype_of(resolved: Resolved, spec: LoadSpec) -> KeptDType:
    """The dtype an int8 / int4 load keeps its unquantized modules in, without the Hub's headers.

    ``bnb_compute_dtype`` when given; else transformers' ``dtype="auto"`` from the config, then, for
    a local folder, its safetensors index and first file's header (:mod:`estimator.quant.load_dtype`).
    """
    from estimator.quant.load_dtype import kept_dtype

    index, first = (None, None)
    if spec.bnb_compute_dtype is None and resolved.ref.path is not None:
        index, first = local_checkpoint(Path(resolved.ref.path))
    return kept_dtype(resolved.config, spec.bnb_compute_dtype, index_dtype=index, first_file=first)


def _unsupported_dtype_row(dtype: DType, load: KeptDType, method: Method) -> Row:
    return _null_row(dtype, f"{dtype.value}: the unquantized modules would be loaded in {load.named} ({load.source}); "
                            "bitsandbytes rows are given for float32, float16 and bfloat16 (pass bnb_compute_dtype)", method=method)


def _bnb_row(resolved: Resolved, spec: LoadSpec, dtype: DType, builds: _KeptBuilds, load: KeptDType) -> Row:
    """int8 / int4 as bitsandbytes lays the model out (:mod:`estimator.quant.bnb`), unquantized modules in ``load``."""
    if resolved.library not in (Library.TRANSFORMERS, Library.SENTENCE_TRANSFORMERS):
        return _null_row(dtype, f"{dtype.value} rows follow transformers' bitsandbytes quantization; not available for {resolved.library.value} models.")
    from estimator.quant.bnb import BnbScheme, bnb_notes, double_quant_note, quantized_bytes

    scheme = BnbScheme.for_dtype(dtype)
    declared = resolved.config.get("quantization_config")
    if isinstance(declared, dict):
        method, bits = checkpoint_bits(declared)
        if method != "bitsandbytes" or bits != scheme.bits:
            return _null_row(dtype, f"{dtype.value}: the config declares a pre-quantized checkpoint ({method}, {bits or 'non-integer'}-bit); "
                                    "what it stores is read from its safetensors headers (Hub repos), not re-quantized from a float build")
    if load.dtype is None:
        return _unsupported_dtype_row(dtype, load, "exact")
    model = builds.get(load.dtype)
    weights = quantized_bytes(model, scheme, load.dtype)
    notes = list(bnb_notes(scheme, weights, load))
    if scheme is BnbScheme.INT4:
        double = quantized_bytes(model, BnbScheme.INT4_DOUBLE, load.dtype)
        notes.append(double_quant_note(double.total_bytes))
    return Row(
        dtype=dtype.value,
        total_bytes=weights.total_bytes,
        largest_layer_bytes=weights.largest_layer_bytes,
        training_adam_bytes=None,
        method="exact",
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class _Checkpoint:
    """A Hub repo's checkpoint as its safetensors headers list it."""

    tensors: list[StoredTensor]  # every tensor the model's weights hold, named as the model's state dict names them
    metadata: Any  # the (main) model's ``SafetensorsRepoMetadata``: its index dtype and first file give the load dtype
    quantizable: list[StoredTensor] | None  # what the bnb layout table reads (checkpoint names), None: the build answers


_ST_WEIGHTED = ("Dense", "LayerNorm", "WeightedLayerPooling")  # sentence-transformers modules with weights of their own


def read_headers(resolved: Resolved, *, token: str | None, timeout: float) -> Any:
    """The safetensors metadata of the model's weights (a sentence-transformers Transformer's: in its folder), or None."""
    assert resolved.ref.repo_id is not None
    return hub.safetensors_metadata(resolved.ref.repo_id, revision=resolved.revision, token=token, timeout=timeout,
                                    files=resolved.files, folder=_transformer_folder(resolved))


def start_headers(repo_id: str, revision: str | None, files: tuple[str, ...], *, token: str | None, timeout: float) -> Future[Any] | None:
    """:func:`hub.safetensors_metadata` of the repo's top folder started in a thread (what :func:`stored_rows` reads
    first), or None when that folder holds no ``model.safetensors`` or index."""
    if not {hub.SAFETENSORS_SINGLE_FILE, hub.SAFETENSORS_INDEX_FILE} & set(files):
        return None
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="estimator-headers")
    future = pool.submit(hub.safetensors_metadata, repo_id, revision=revision, token=token, timeout=timeout, files=files)
    pool.shutdown(wait=False)
    return future


def _transformer_folder(resolved: Resolved) -> str:
    if resolved.library is not Library.SENTENCE_TRANSFORMERS:
        return ""
    return next((str(m["path"]) for m in resolved.extra.get("modules", ()) if m.get("kind") == "Transformer"), "")


def _checkpoint(resolved: Resolved, metadata: Any, *, token: str | None, timeout: float) -> _Checkpoint | None:
    tensors = tensors_from_metadata(metadata)
    if resolved.library is not Library.SENTENCE_TRANSFORMERS:
        return _Checkpoint(tensors, metadata, tensors)
    # sentence-transformers: the Transformer's checkpoint under ``<name>.auto_model.`` and each weighted module's own
    # ``<path>/model.safetensors`` under ``<name>.`` (the library's state dict names, as the meta build names them)
    assert resolved.ref.repo_id is not None
    modules = resolved.extra.get("modules", [])
    named = [replace(t, name=f"{m['name']}.auto_model.{t.name}") for m in modules if m["kind"] == "Transformer" for t in tensors]
    weighted = [m for m in modules if m["kind"] in _ST_WEIGHTED]
    for module in weighted:
        own = hub.safetensors_metadata(resolved.ref.repo_id, revision=resolved.revision, token=token, timeout=timeout,
                                       files=resolved.files, folder=module["path"])
        if own is None or getattr(own, "sharded", False):
            return None  # a pytorch_model.bin only: the model is built
        named += [replace(t, name=f"{module['name']}.{t.name}") for t in tensors_from_metadata(own)]
    return _Checkpoint(named, metadata, None if weighted else tensors)


def stored_rows(resolved: Resolved, spec: LoadSpec, *, token: str | None, timeout: float, cross_check: bool,
                headers: Any = None) -> tuple[Row, ...] | None:
    """Rows from the repo's safetensors headers, or None when it has none (then the model is built).

    ``headers``: a ``concurrent.futures.Future`` of the top folder's safetensors metadata, when the caller started
    reading it ahead (``estimator.api``, while the config was read); else the headers are read here."""
    if resolved.library not in (Library.TRANSFORMERS, Library.TIMM, Library.SENTENCE_TRANSFORMERS) or resolved.ref.repo_id is None:
        return None
    if not any(name.endswith(".safetensors") for name in resolved.files):
        return None
    if resolved.library is Library.SENTENCE_TRANSFORMERS and sum(m["kind"] == "Transformer" for m in resolved.extra.get("modules", [])) != 1:
        return None
    if headers is not None and not _transformer_folder(resolved):
        metadata = headers.result()
    else:
        metadata = read_headers(resolved, token=token, timeout=timeout)
    if metadata is None:
        return None
    checkpoint = _checkpoint(resolved, metadata, token=token, timeout=timeout)
    if checkpoint is None or not checkpoint.tensors:
        return None
    tensors = checkpoint.tensors
    load = _hub_kept_dtype(resolved, spec, metadata)
    notes: list[str] = []
    quant_method = (resolved.config.get("quantization_config") or {}).get("quant_method")
    if cross_check:
        checked = _cross_check(resolved, spec, sum(t.numel for t in tensors), load, [t.name for t in tensors])
        if checked.rows is not None and quant_method is None and not is_prequantized(tensors):
            # The build is what from_pretrained leaves in memory: checkpoint tensors the model does not
            # load (GPT-2's stored attn.bias masks) are not there, and non-persistent buffers are.
            return tuple(replace(row, notes=(*row.notes, checked.note)) for row in checked.rows)
        notes.append(checked.note)
    rows = []
    builds = _KeptBuilds(resolved, spec)
    for dtype in spec.dtypes:
        if dtype in _BNB_DTYPES:
            if is_prequantized(tensors) or quant_method is not None:
                rows.append(_prequantized_row(tensors, resolved, dtype, notes))
            else:
                rows.append(_stored_bnb_row(checkpoint.quantizable, resolved, dtype, notes, load) or _bnb_row(resolved, spec, dtype, builds, load))
            continue
        stored = stored_bytes(tensors, dtype)
        row_notes = [f"from the checkpoint's safetensors headers; largest layer: {stored.largest_layer_name}", *notes]
        training: int | None
        held = None
        if stored.quantized:
            training = None
            kinds = sorted({t.dtype for t in tensors if t.dtype not in FLOATING and t.dtype not in ("I64", "BOOL")})
            held = f"{quant_method or 'quantized'} as stored: {', '.join(kinds)}"
            row_notes.append(f"pre-quantized checkpoint ({quant_method or 'integer or float8 tensors'}): quantized tensors counted as stored; not trainable as is")
        else:
            per_param = ADAM_BYTES_MIXED if dtype.is_16bit else ADAM_BYTES_FP32
            training = stored.total_bytes + stored.floating_parameters * per_param
        rows.append(Row(
            dtype=dtype.value,
            total_bytes=stored.total_bytes,
            largest_layer_bytes=stored.largest_layer_bytes,
            training_adam_bytes=training,
            method="stored",
            notes=tuple(row_notes),
            float32_bytes=stored_bytes(tensors, DType.FLOAT32).total_bytes,
            weights_held=held,
        ))
    return tuple(rows)


def _hub_kept_dtype(resolved: Resolved, spec: LoadSpec, metadata: object) -> KeptDType:
    """``kept_dtype`` from the config and the Hub's safetensors metadata (index, first shard by name)."""
    from estimator.quant.load_dtype import kept_dtype

    files = getattr(metadata, "files_metadata", None) or {}
    first = None
    if files:
        first_file = files[sorted(files)[0]]
        first = tensors_from_shapes({name: (info.dtype, info.shape) for name, info in first_file.tensors.items()})
    index = (getattr(metadata, "metadata", None) or {}).get("dtype")
    return kept_dtype(resolved.config, spec.bnb_compute_dtype, index_dtype=index, first_file=first)


def _stored_bnb_row(tensors: list[StoredTensor] | None, resolved: Resolved, dtype: DType, notes: list[str], load: KeptDType) -> Row | None:
    """int8 / int4 from the headers and the layout table (no torch), or None: then the model is built.

    A sentence-transformers model whose only weights are its Transformer's loads them as transformers does
    (``model_kwargs={"quantization_config": ...}`` reaches its ``from_pretrained``), so the table answers it too."""
    if resolved.library not in (Library.TRANSFORMERS, Library.SENTENCE_TRANSFORMERS) or tensors is None:
        return None
    if load.dtype is None:
        return _unsupported_dtype_row(dtype, load, "stored")
    from estimator.quant.bnb import BnbScheme, double_quant_note
    from estimator.quant.bnb_stored import stored_notes, stored_quantized_bytes

    scheme = BnbScheme.for_dtype(dtype)
    answer = stored_quantized_bytes(tensors, resolved.config, scheme, load_dtype=load.dtype)
    if answer is None:
        return None
    row_notes = list(stored_notes(scheme, answer, load))
    if scheme is BnbScheme.INT4:
        double = stored_quantized_bytes(tensors, resolved.config, BnbScheme.INT4_DOUBLE, load_dtype=load.dtype)
        if double is not None:
            row_notes.insert(1, double_quant_note(double.bytes.total_bytes))
    return Row(
        dtype=dtype.value,
        total_bytes=answer.bytes.total_bytes,
        largest_layer_bytes=answer.bytes.largest_layer_bytes,
        training_adam_bytes=None,
        method="stored",
        notes=(*row_notes, *notes),
    )


def checkpoint_bits(quantization_config: dict[str, Any]) -> tuple[str, int | None]:
    """The method and weight bit width of a pre-quantized checkpoint's ``quantization_config``.

    GPTQ / AWQ / HQQ give ``bits`` (or ``w_bit``); bitsandbytes ``load_in_4bit`` / ``load_in_8bit``;
    fp8 (``quant_method: "fp8"``) is float8, which is neither int8 nor int4.
    """
    method = str(quantization_config.get("quant_method") or "unknown")
    if quantization_config.get("load_in_4bit") or quantization_config.get("_load_in_4bit"):
        return method, 4
    if quantization_config.get("load_in_8bit") or quantization_config.get("_load_in_8bit"):
        return method, 8
    bits = quantization_config.get("bits", quantization_config.get("w_bit"))
    if method in ("fp8", "fbgemm_fp8", "compressed-tensors") and bits is None:
        return method, None
    return method, bits if isinstance(bits, int) and not isinstance(bits, bool) else None


def _prequantized_row(tensors: list[StoredTensor], resolved: Resolved, dtype: DType, notes: list[str]) -> Row:
    """int8 / int4 of a pre-quantized checkpoint: what it stores, when its bit width is the row's."""
    from estimator.quant.bnb import BnbScheme

    method, bits = checkpoint_bits(resolved.config.get("quantization_config") or {})
    if bits != BnbScheme.for_dtype(dtype).bits:
        stored_as = f"{bits}-bit" if bits is not None else "a non-integer format"
        return _null_row(dtype, f"{dtype.value}: the checkpoint is pre-quantized ({method}, {stored_as}) and loads as stored; "
                                f"it is not re-quantized to {dtype.value}, so no figure is given (see the 16-bit rows)", method="stored")
    if method == "bitsandbytes":
        from estimator.quant.bnb import loaded_from_checkpoint

        tensors = loaded_from_checkpoint(tensors)
    stored = stored_bytes(tensors, DType.FLOAT16)
    return Row(
        dtype=dtype.value,
        total_bytes=stored.total_bytes,
        largest_layer_bytes=stored.largest_layer_bytes,
        training_adam_bytes=None,
        method="stored",
        notes=(
            (f"pre-quantized checkpoint ({method}, {bits}-bit): its quantized tensors as stored, its floating tensors in float16; "
             f"largest layer: {stored.largest_layer_name}"),
            *notes,
            "training_adam_bytes is null: a pre-quantized model trains only through adapters",
        ),
    )


@dataclass(frozen=True)
class _CrossCheck:
    note: str
    rows: tuple[Row, ...] | None  # the exact rows, when the meta build worked


def _cross_check(resolved: Resolved, spec: LoadSpec, stored_elements: int, load: KeptDType, names: list[str]) -> _CrossCheck:
    """Build the model on meta and compare its persistent element count with the checkpoint's."""
    from estimator.errors import EstimatorError

    try:
        model = build(resolved, DType.BFLOAT16, trust_remote_code=spec.trust_remote_code)
        rows = built_rows(resolved, spec, load, names)
    except EstimatorError as exc:
        return _CrossCheck(f"cross-check skipped: {exc}", None)
    params = {id(p): p.numel() for p in model.parameters()}
    persistent: dict[int, int] = {}
    for module in model.modules():
        for name, buffer in module.named_buffers(recurse=False):
            if buffer is not None and name not in module._non_persistent_buffers_set:
                persistent[id(buffer)] = buffer.numel()
    built = sum(params.values()) + sum(n for k, n in persistent.items() if k not in params)
    if built == stored_elements:
        return _CrossCheck(f"cross-checked: the checkpoint's safetensors headers hold the same {built:,} elements as the meta build", rows)
    return _CrossCheck(
        f"mismatch: the checkpoint stores {stored_elements:,} elements, the meta build of {type(model).__name__} has {built:,} "
        f"({stored_elements - built:+,}); figures are the meta build's, what from_pretrained keeps in memory",
        rows,
    )
