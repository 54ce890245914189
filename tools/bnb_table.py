"""Make the bitsandbytes layout table (:mod:`estimator.quant.bnb_stored`) with transformers' own code.

For one checkpoint (a config and its safetensors headers) the model is built on the meta device in
float16, bfloat16 and float32 as ``from_pretrained`` lays it out (:func:`estimator.load.rows.build`,
dtype plan included), the dtypes of each kept tensor across the three builds give its code (follows the
load dtype, ``_keep_in_fp32_modules``, or a fixed width), the layers the
bitsandbytes quantizer swaps are chosen by transformers (:func:`estimator.quant.bnb.bnb_targets`), and each
checkpoint key is renamed as loading renames it (``get_model_conversion_mapping`` and
``rename_source_key`` from ``transformers.core_model_loading``). The outcome per key is one code
(see :mod:`estimator.quant.bnb_stored`). Checkpoints of one architecture merge into one entry; a key seen
with two outcomes becomes ``?``.

:func:`make_table` then answers every checkpoint from the merged table and requires, for int8, int4
and int4 with double quantization, in each of the three load dtypes, that the answer equal the meta-build path
(:func:`estimator.quant.bnb.quantized_bytes`) minus the tensors the checkpoint does not fill (non-persistent
buffers) to the byte; any difference raises.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from estimator.options import DType
from estimator.quant.bnb import BnbScheme, tensor_sizes
from estimator.quant.bnb_stored import AMBIGUOUS, DROPPED, KEEP_IN_FP32, LOAD_DTYPE, layout_key, pattern, stored_quantized_bytes
from estimator.quant.load_dtype import KEPT_DTYPES
from estimator.source.stored import StoredTensor


@dataclass(frozen=True)
class Checkpoint:
    """One source of the table: a repo's config and its safetensors headers."""

    name: str
    config: dict[str, Any]
    tensors: list[StoredTensor]


@dataclass(frozen=True)
class Classified:
    codes: dict[str, str]  # checkpoint key -> code
    tie_default: bool | None  # its config class's default, for configs that omit it
    unfilled: dict[tuple[BnbScheme, DType], int]  # bytes of the model's unique tensors no checkpoint key lands in, per scheme and load dtype
    quantized: dict[tuple[BnbScheme, DType], int]  # the meta-build path's total, per scheme and load dtype


def kept_code(float16: int, bfloat16: int, float32: int) -> str:
    """The code of a kept tensor from its bytes per element in the three builds."""
    if (float16, bfloat16, float32) == (2, 2, 4):
        return LOAD_DTYPE
    if (float16, bfloat16, float32) == (4, 2, 4):
        return KEEP_IN_FP32
    return str(float16) if float16 == bfloat16 == float32 else AMBIGUOUS


def classify(checkpoint: Checkpoint) -> Classified:
    """Codes for every key of ``checkpoint``, from transformers' loading code on a meta build."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    from transformers.pytorch_utils import Conv1D

    from estimator.build.weights import unique_tensors
    from estimator.load.rows import build
    from estimator.options import DType, Library
    from estimator.source.reference import parse_reference
    from estimator.source.resolve import Resolved

    resolved = Resolved(ref=parse_reference(checkpoint.name), source="hub", library=Library.TRANSFORMERS, config=checkpoint.config)
    models = {dtype: build(resolved, dtype) for dtype in KEPT_DTYPES}
    model = models[DType.FLOAT16]
    states = {dtype: built.state_dict(keep_vars=True) for dtype, built in models.items()}
    state = states[DType.FLOAT16]
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

    per_case = {(scheme, dtype): tensor_sizes(models[dtype], scheme, dtype) for scheme in BnbScheme for dtype in KEPT_DTYPES}
    sizes_per_case = {case: sizes for case, (sizes, _, _) in per_case.items()}
    quantized_layers = per_case[BnbScheme.INT8, DType.FLOAT16][1]  # the same layers in every scheme and dtype

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
            widths = [states[dtype][key].element_size() for dtype in (DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32)]
            code = LOAD_DTYPE if module_name in quantized_layers else kept_code(*widths)  # a quantized layer's bias: the load dtype
            names = aliases[id(target)]
            codes[tensor.name] = code if len(names) == 1 else f"S{code}@{pattern(min(names))}"

    unfilled: dict[tuple[BnbScheme, DType], int] = {}
    for (scheme, dtype), sizes in sizes_per_case.items():
        filled = {id(states[dtype][key]) for key in landed}
        by_name = dict(unique_tensors(models[dtype]))
        unfilled[scheme, dtype] = sum(size for name, size in sizes.items() if id(by_name[name]) not in filled)
    default = getattr(type(model.config)(), "tie_word_embeddings", None)
    return Classified(
        codes=codes,
        tie_default=default if isinstance(default, bool) else None,
        unfilled=unfilled,
        quantized={case: sum(sizes.values()) for case, sizes in sizes_per_case.items()},
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
    load_dtype: DType
    table_bytes: int | None  # None: the table does not answer this checkpoint (the build does)
    build_bytes: int
    unfilled_bytes: int


def make_table(checkpoints: list[Checkpoint], transformers_version: str) -> tuple[dict[str, Any], list[Check]]:
    """The table for ``checkpoints`` and the byte checks of every checkpoint against the meta build."""
    layouts: dict[str, dict[str, Any]] = {}
    tie_defaults: dict[str, bool] = {}
    classified: dict[str, Classified] = {}
    for checkpoint in checkpoints:
        architectures = checkpoint.config.get("architectures")
        if not isinstance(architectures, list) or len(architectures) != 1:
            raise ValueError(f"{checkpoint.name}: the config names no single architecture")
        result = classify(checkpoint)
        classified[checkpoint.name] = result
        if result.tie_default is not None and tie_defaults.setdefault(architectures[0], result.tie_default) != result.tie_default:
            raise ValueError(f"{architectures[0]}: two default tie_word_embeddings values")
        key = layout_key(checkpoint.config, tie_defaults)  # the key the runtime computes for this config
        if key is None:
            raise ValueError(f"{checkpoint.name}: no table key (no tie_word_embeddings and no class default)")
        entry = layouts.setdefault(key, {"checkpoints": [], "codes": {}})
        entry["checkpoints"].append(checkpoint.name)
        merge(entry["codes"], result.codes)
    for entry in layouts.values():
        entry["checkpoints"].sort()
        entry["codes"] = dict(sorted(entry["codes"].items()))
    table = {"transformers": transformers_version, "tie_defaults": dict(sorted(tie_defaults.items())), "layouts": dict(sorted(layouts.items()))}

    checks = []
    for checkpoint in checkpoints:
        result = classified[checkpoint.name]
        for scheme in BnbScheme:
            for dtype in KEPT_DTYPES:
                answer = stored_quantized_bytes(checkpoint.tensors, checkpoint.config, scheme, table=table, load_dtype=dtype)
                check = Check(
                    checkpoint=checkpoint.name, key=str(layout_key(checkpoint.config, tie_defaults)), scheme=scheme, load_dtype=dtype,
                    table_bytes=None if answer is None else answer.bytes.total_bytes,
                    build_bytes=result.quantized[scheme, dtype], unfilled_bytes=result.unfilled[scheme, dtype],
                )
                if check.table_bytes is not None and check.table_bytes != check.build_bytes - check.unfilled_bytes:
                    raise AssertionError(
                        f"{checkpoint.name} {scheme.value} {dtype.value}: the table gives {check.table_bytes:,} bytes, the meta build "
                        f"{check.build_bytes:,} minus {check.unfilled_bytes:,} not in the checkpoint")
                checks.append(check)
    return table, checks


# Architectures also taken as transformers 5 saves them: a tiny model of each (random weights, CPU)
# written with save_pretrained, untied and tied, and its own safetensors header read back. The key
# names a checkpoint saved by transformers has; legacy layouts of older checkpoints are the stand-in's.
SAVED = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM", "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM", "phi": "PhiForCausalLM", "phi3": "Phi3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM", "granite": "GraniteForCausalLM", "stablelm": "StableLmForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM", "gpt_neox": "GPTNeoXForCausalLM", "falcon": "FalconForCausalLM",
    "opt": "OPTForCausalLM", "bloom": "BloomForCausalLM", "gpt2": "GPT2LMHeadModel", "smollm3": "SmolLM3ForCausalLM",
    "bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM", "xlm-roberta": "XLMRobertaForMaskedLM",
    "distilbert": "DistilBertForMaskedLM", "modernbert": "ModernBertForMaskedLM",
    "t5": "T5ForConditionalGeneration", "bart": "BartForConditionalGeneration",
}
TINY = {  # set where the config class has the attribute: 2 layers, 64 wide, 4 experts
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 128, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "num_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2,
    "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, "d_model": 64, "d_ff": 128, "d_kv": 16,
    "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4, "encoder_layers": 2, "decoder_layers": 2,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
    "ffn_dim": 128, "dim": 64, "hidden_dim": 128, "n_layers": 2, "n_heads": 4, "word_embed_proj_dim": 64,
    "global_attn_every_n_layers": 1, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0, "decoder_start_token_id": 0,
}


def saved_by_transformers(folder: Path, model_types: Iterable[str] | None = None) -> list[Checkpoint]:
    """Tiny models of ``SAVED`` (or of ``model_types``) written by save_pretrained, with their headers read back."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    checkpoints = []
    for model_type in model_types or SAVED:
        architecture = SAVED[model_type]
        default = transformers.AutoConfig.for_model(model_type)
        overrides = {key: value for key, value in TINY.items() if hasattr(default, key) and not isinstance(getattr(type(default), key, None), property)}
        for tie in (False, True):
            config = transformers.AutoConfig.for_model(model_type, **overrides, tie_word_embeddings=tie, architectures=[architecture])
            torch.manual_seed(0)
            path = folder / f"{architecture}-tie-{str(tie).lower()}"
            getattr(transformers, architecture)(config).save_pretrained(path)
            tensors = header_tensors(path / "model.safetensors")
            saved_config = json.loads((path / "config.json").read_text())
            checkpoints.append(Checkpoint(name=f"saved-by-transformers/{path.name}", config=saved_config, tensors=tensors))
    return checkpoints


def header_tensors(path: Path) -> list[StoredTensor]:
    """A local safetensors file's tensors as its header lists them (what the Hub path reads over HTTP)."""
    from safetensors import safe_open

    from estimator.source.stored import tensors_from_shapes

    with safe_open(str(path), framework="pt") as handle:
        pieces = {name: handle.get_slice(name) for name in handle.keys()}  # noqa: SIM118 - safe_open handles are not iterable
        return tensors_from_shapes({name: (piece.get_dtype(), piece.get_shape()) for name, piece in pieces.items()})
