"""int8 / int4 rows from safetensors headers, without importing torch or transformers.

Which checkpoint tensors ``load_in_8bit`` / ``load_in_4bit`` quantize is a property of the model's
modules (a Linear is quantized, an Embedding of the same shape is not; the output head, tied
modules and ``_keep_in_fp32_modules`` stay unquantized) and of transformers' checkpoint-key renaming
(prefixes, legacy names, MoE experts fused on load). Both are decided by transformers' own code on a
meta build; ``tools/make_bnb_layouts.py`` (:mod:`tools.bnb_table`) records the outcome per
architecture in ``estimator/quant/data/bnb_layouts.json``, keyed by checkpoint tensor name with the layer
numbers replaced by ``*``, and checks every entry against the meta-build path to the byte.

At answer time a checkpoint's tensor names are looked up in that table. Any name the table does not
know (another architecture, another checkpoint layout, a tensor name seen with two outcomes) or a
transformers minor version other than the table's gives ``None``: the caller then builds the model (exact,
slower). The codes:

* ``L``: a Linear weight, quantized (stored ``out x in``); ``C``: a GPT-2 ``Conv1D`` weight,
  quantized (stored ``in x out``);
* ``D``: kept, in the load dtype (:mod:`estimator.quant.load_dtype`): 4 bytes per element in a
  float32 load, 2 in a float16 or bfloat16 one;
* ``F``: kept, one of the model's ``_keep_in_fp32_modules``: float32 in a float16 load, else the load
  dtype (transformers' ``_get_dtype_plan``);
* ``<n>``: kept, ``n`` bytes per element whatever the load dtype (``_keep_in_fp32_modules_strict``,
  tensors the modeling code makes in one dtype);
* ``S<code>@<name>``: one of the above for a tensor the model ties to other names, ``<name>`` the
  tied group (a checkpoint holding two tensors of one group is answered by the build);
* ``X``: not loaded by ``from_pretrained`` (GPT-2's stored ``attn.bias`` masks, BERT's pooler in a
  masked-LM checkpoint, Llama-2's stored ``rotary_emb.inv_freq``);
* ``?``: seen with two outcomes; never answered from the table.

What the table path cannot see is what the model holds that no checkpoint stores: non-persistent
buffers (rotary ``inv_freq``, 512 bytes for Llama-3.1-8B). The float rows read from headers leave
them out the same way (:mod:`estimator.source.stored`).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from estimator.options import DType
from estimator.quant.bnb import BnbScheme, QuantizedBytes, weight_bytes
from estimator.quant.load_dtype import FLOAT16_GIVEN, ITEMSIZE, KeptDType
from estimator.source.stored import FLOATING, StoredTensor, group_of

TABLE_PATH = Path(__file__).resolve().parent / "data" / "bnb_layouts.json"
QUANTIZED_CODES = ("L", "C")
LOAD_DTYPE = "D"  # kept, in the load dtype
KEEP_IN_FP32 = "F"  # kept, _keep_in_fp32_modules: float32 in a float16 load, else the load dtype
DROPPED = "X"
AMBIGUOUS = "?"
_NUMBER = re.compile(r"(^|\.)\d+(?=\.|$)")


def pattern(name: str) -> str:
    """A tensor name with its layer and expert numbers replaced by ``*``."""
    return _NUMBER.sub(r"\1*", name)


def layout_key(config: dict[str, Any], tie_defaults: dict[str, Any] | None = None) -> str | None:
    """The table key of a transformers config: its architecture and whether it ties its embeddings.

    A config without ``tie_word_embeddings`` ties as its config class does by default
    (``tie_defaults``, recorded in the table); None when that is not known.
    """
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or len(architectures) != 1 or not isinstance(architectures[0], str):
        return None
    tie = config.get("tie_word_embeddings")
    if tie is None:
        tie = (tie_defaults or {}).get(architectures[0])
    if not isinstance(tie, bool):
        return None
    return f"{architectures[0]}|tie_word_embeddings={str(tie).lower()}"


def minor_version(version: str) -> str:
    return ".".join(version.split(".")[:2])


@functools.lru_cache(maxsize=1)
def load_table(path: Path = TABLE_PATH) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@functools.lru_cache(maxsize=1)
def _installed_transformers() -> str | None:  # read once: every int row of every estimate asks
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def table_entry(config: dict[str, Any], table: dict[str, Any] | None = None) -> dict[str, str] | None:
    """The table's codes for ``config``'s architecture, or None (not in the table, or another transformers)."""
    table = load_table() if table is None else table
    installed = _installed_transformers()
    if installed is None or minor_version(str(table.get("transformers", ""))) != minor_version(installed):
        return None
    key = layout_key(config, table.get("tie_defaults"))
    entry = (table.get("layouts") or {}).get(key) if key else None
    return entry.get("codes") if isinstance(entry, dict) else None


@dataclass(frozen=True)
class StoredQuantized:
    """A checkpoint's bytes once loaded with bitsandbytes, from its headers."""

    bytes: QuantizedBytes  # its kept_16bit: the 2-D floating weights not quantized (patterns)
    dropped: tuple[str, ...]  # checkpoint tensors from_pretrained does not load (patterns)


def kept_itemsize(code: str, load_dtype: DType) -> int | None:
    """Bytes per element of a kept tensor's code in a ``load_dtype`` load; None for a code this version does not know."""
    if code == LOAD_DTYPE:
        return ITEMSIZE[load_dtype]
    if code == KEEP_IN_FP32:
        return 4 if load_dtype is DType.FLOAT16 else ITEMSIZE[load_dtype]
    return int(code) if code.isdigit() else None


def stored_quantized_bytes(tensors: list[StoredTensor], config: dict[str, Any], scheme: BnbScheme,
                           table: dict[str, Any] | None = None, load_dtype: DType = DType.FLOAT16) -> StoredQuantized | None:
    """``tensors`` (a checkpoint's headers) loaded in ``scheme`` with the unquantized modules in ``load_dtype``
    (float32, float16 or bfloat16), or None when the table cannot say."""
    codes = table_entry(config, table)
    if codes is None:
        return None
    groups: dict[str, int] = {}
    total = quantized = 0
    tied: set[str] = set()
    kept_2d: set[str] = set()
    dropped: set[str] = set()
    for tensor in tensors:
        name = pattern(tensor.name)
        code = codes.get(name)
        if code is None or code == AMBIGUOUS:
            return None
        if code == DROPPED:
            dropped.add(name)
            continue
        if code in QUANTIZED_CODES:
            if tensor.shape is None or len(tensor.shape) != 2:
                return None
            rows, cols = tensor.shape
            out_features, in_features = (rows, cols) if code == "L" else (cols, rows)
            size = weight_bytes(scheme, out_features, in_features)
            quantized += 1
        else:
            if code.startswith("S"):
                code, _, group = code[1:].partition("@")
                if group in tied:
                    return None
                tied.add(group)
            itemsize = kept_itemsize(code, load_dtype)
            if itemsize is None:
                return None
            size = tensor.numel * itemsize
            if tensor.dtype in FLOATING and tensor.shape is not None and len(tensor.shape) == 2:
                kept_2d.add(name.removesuffix(".weight"))
        total += size
        group = group_of(tensor.name)
        groups[group] = groups.get(group, 0) + size
    largest_name, largest = max(groups.items(), key=lambda item: item[1]) if groups else ("", 0)
    return StoredQuantized(
        bytes=QuantizedBytes(total_bytes=total, largest_layer_bytes=largest, largest_layer_names=(largest_name,),
                             quantized_layers=quantized, kept_16bit=tuple(sorted(kept_2d))),
        dropped=tuple(sorted(dropped)),
    )


def stored_notes(scheme: BnbScheme, answer: StoredQuantized, load: KeptDType = FLOAT16_GIVEN) -> tuple[str, ...]:
    """The notes of an int8 / int4 row read from headers: layout, what stays 16-bit, what is not loaded."""
    from estimator.quant.bnb import TRAINING_NULL_NOTE, fused_experts_note, layout_note

    kept = ", ".join(answer.bytes.kept_16bit) or "none"
    notes = [
        layout_note(scheme, answer.bytes.quantized_layers),
        (f"from the checkpoint's safetensors headers and transformers' bitsandbytes layer choice for this architecture "
         f"(estimator/quant/data/bnb_layouts.json); largest layer: {answer.bytes.largest_layer_names[0]}"),
        (f"not quantized, kept in {load.named} ({load.source}; float32 where the model keeps a module in float32): norms, "
         f"biases and the 2-D weights transformers does not quantize ({kept})"),
    ]
    if any(".experts." in f".{name}." for name in answer.bytes.kept_16bit):
        notes.append(fused_experts_note(load.named))
    if answer.dropped:
        notes.append(f"not counted: checkpoint tensors from_pretrained does not load ({', '.join(answer.dropped)})")
    notes.append(TRAINING_NULL_NOTE)
    return tuple(notes)
