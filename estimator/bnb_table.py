"""Make the bitsandbytes layout table (:mod:`estimator.bnb_stored`) with transformers' own code.

For one checkpoint (a config and its safetensors headers) the model is built on the meta device in
float16 as ``from_pretrained`` lays it out (:func:`estimator.loadrows.build`), the layers the
bitsandbytes quantizer swaps are chosen by transformers (:func:`estimator.bnb.bnb_targets`), and each
checkpoint key is renamed as loading renames it (``get_model_conversion_mapping`` and
``rename_source_key`` from ``transformers.core_model_loading``). The outcome per key is one code
(see :mod:`estimator.bnb_stored`). Checkpoints of one architecture merge into one entry; a key seen
with two outcomes becomes ``?``.

:func:`make_table` then answers every checkpoint from the merged table and requires, for int8, int4
and int4 with double quantization, that the answer equal the meta-build path
(:func:`estimator.bnb.quantized_bytes`) minus the tensors the checkpoint does not fill (non-persistent
buffers) to the byte; any difference raises.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from estimator.bnb import BnbScheme, tensor_sizes
from estimator.bnb_stored import AMBIGUOUS, DROPPED, layout_key, pattern, stored_quantized_bytes
from estimator.stored import StoredTensor


@dataclass(frozen=True)
class Checkpoint:
    """One source of the table: a repo's config and its safetensors headers."""

    name: str
    config: dict[str, Any]
    tensors: list[StoredTensor]


@dataclass(frozen=True)
class Classified:
    codes: dict[str, str]  # checkpoint key -> code
    unfilled: dict[BnbScheme, int]  # bytes of the model's unique tensors no checkpoint key lands in, per scheme
    quantized: dict[BnbScheme, int]  # the meta-build path's total, per scheme


def classify(checkpoint: Checkpoint) -> Classified:
    """Codes for every key of ``checkpoint``, from transformers' loading code on a meta build."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    from transformers.pytorch_utils import Conv1D

    from estimator.loadrows import build
    from estimator.options import DType, Library
    from estimator.reference import parse_reference
    from estimator.resolve import Resolved
    from estimator.weights import unique_tensors

    resolved = Resolved(ref=parse_reference(checkpoint.name), source="hub", library=Library.TRANSFORMERS, config=checkpoint.config)
    model = build(resolved, DType.FLOAT16)
    state = model.state_dict(keep_vars=True)
    aliases: dict[int, list[str]] = defaultdict(list)  # tied tensors have several state-dict names
    for key, tensor in state.items():
        aliases[id(tensor)].append(key)
    mapping = get_model_conversion_mapping(model)  # type: ignore[arg-type]  # a PreTrainedModel (transformers config)
    renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
    converters = [m for m in mapping if isinstance(m, WeightConverter)]
    prefix = str(model.base_model_prefix)

    landed: dict[str, list[tuple[StoredTensor, bool]]] = defaultdict(list)  # model key -> (checkpoint tensor, via a converter)
    destination: dict[str, str | None] = {}
    for tensor in checkpoint.tensors:  # the same two steps as convert_and_load_state_dict_in_model
        renamed, source_pattern = rename_source_key(tensor.name, renamings, converters, prefix, state)
        if renamed not in state and tensor.name in state:
            renamed, source_pattern = rename_source_key(tensor.name, [], [], base_model_prefix=prefix, meta_state_dict=state)
        if renamed in state:
            landed[renamed].append((tensor, source_pattern is not None))
            destination[tensor.name] = renamed
        else:
            destination[tensor.name] = None

    sizes_per_scheme = {scheme: tensor_sizes(model, scheme)[0] for scheme in BnbScheme}
    _, quantized_layers, _ = tensor_sizes(model, BnbScheme.INT8)

    codes: dict[str, str] = {}
    for tensor in checkpoint.tensors:
        landing = destination[tensor.name]
        if landing is None:
            codes[tensor.name] = DROPPED
            continue
        key = landing
        target = state[key]
        module_name, _, leaf = key.rpartition(".")
        sources = landed[key]
        if sum(t.numel for t, _ in sources) != target.numel():
            codes[tensor.name] = AMBIGUOUS  # pieces that do not add up to the parameter
        elif module_name in quantized_layers and leaf == "weight":
            conv1d = isinstance(model.get_submodule(module_name), Conv1D)
            out_features, in_features = quantized_layers[module_name]
            expected = (in_features, out_features) if conv1d else (out_features, in_features)
            one_to_one = len(sources) == 1 and not sources[0][1]
            codes[tensor.name] = ("C" if conv1d else "L") if one_to_one and tensor.shape == expected else AMBIGUOUS
        else:
            itemsize = 2 if module_name in quantized_layers else target.element_size()  # a quantized layer's bias: 16-bit
            names = aliases[id(target)]
            codes[tensor.name] = str(itemsize) if len(names) == 1 else f"S{itemsize}@{pattern(min(names))}"

    filled = {id(state[key]) for key in landed}
    by_name = dict(unique_tensors(model))
    return Classified(
        codes=codes,
        unfilled={scheme: sum(size for name, size in sizes.items() if id(by_name[name]) not in filled) for scheme, sizes in sizes_per_scheme.items()},
        quantized={scheme: sum(sizes.values()) for scheme, sizes in sizes_per_scheme.items()},
    )


def merge(entries: dict[str, str], codes: dict[str, str]) -> None:
    """Add one checkpoint's codes (by key pattern) to an architecture's entry; disagreements become ``?``."""
    for name, code in codes.items():
        key = pattern(name)
        entries[key] = code if entries.get(key, code) == code else AMBIGUOUS


@dataclass(frozen=True)
class Check:
    checkpoint: str
    key: str
    scheme: BnbScheme
    table_bytes: int | None  # None: the table does not answer this checkpoint (the build does)
    build_bytes: int
    unfilled_bytes: int


def make_table(checkpoints: list[Checkpoint], transformers_version: str) -> tuple[dict[str, Any], list[Check]]:
    """The table for ``checkpoints`` and the byte checks of every checkpoint against the meta build."""
    layouts: dict[str, dict[str, Any]] = {}
    classified: dict[str, Classified] = {}
    for checkpoint in checkpoints:
        key = layout_key(checkpoint.config)
        if key is None:
            raise ValueError(f"{checkpoint.name}: the config names no single architecture")
        result = classify(checkpoint)
        classified[checkpoint.name] = result
        entry = layouts.setdefault(key, {"checkpoints": [], "codes": {}})
        entry["checkpoints"].append(checkpoint.name)
        merge(entry["codes"], result.codes)
    for entry in layouts.values():
        entry["checkpoints"].sort()
        entry["codes"] = dict(sorted(entry["codes"].items()))
    table = {"transformers": transformers_version, "layouts": dict(sorted(layouts.items()))}

    checks = []
    for checkpoint in checkpoints:
        result = classified[checkpoint.name]
        for scheme in BnbScheme:
            answer = stored_quantized_bytes(checkpoint.tensors, checkpoint.config, scheme, table=table)
            check = Check(
                checkpoint=checkpoint.name, key=str(layout_key(checkpoint.config)), scheme=scheme,
                table_bytes=None if answer is None else answer.bytes.total_bytes,
                build_bytes=result.quantized[scheme], unfilled_bytes=result.unfilled[scheme],
            )
            if check.table_bytes is not None and check.table_bytes != check.build_bytes - check.unfilled_bytes:
                raise AssertionError(
                    f"{checkpoint.name} {scheme.value}: the table gives {check.table_bytes:,} bytes, the meta build "
                    f"{check.build_bytes:,} minus {check.unfilled_bytes:,} not in the checkpoint")
            checks.append(check)
    return table, checks
