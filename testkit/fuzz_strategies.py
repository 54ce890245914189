"""Hypothesis strategies shared by ``tests/test_fuzz.py`` (short, in the suite) and ``bench/fuzz.py`` (long).

Each strategy makes one kind of input a user (or a Hub repo) can hand the estimator: model
references, option values for every keyword of ``estimate`` / flag of the CLI, share-link query
strings, config.json texts, and safetensors file prefixes. Valid values are mixed with wrong types,
huge and negative numbers, deep nesting and unicode, so that both answers and refusals are reached.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from hypothesis import strategies as st

TINY = "estimator-test/tiny-llama"  # a stand-in repo that answers from its safetensors header

_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 10**30, 1.5, -0.0]),
    st.floats(allow_nan=True, allow_infinity=True),
)
_TEXT = st.text(max_size=40)
_JUNK = st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT, st.lists(st.integers(), max_size=3))


def references() -> st.SearchStrategy[str]:
    """What a user might type as a model: ids, legacy ids, URLs, paths, garbage and unicode."""
    org = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
    return st.one_of(
        st.builds(lambda a, b: f"{a}/{b}", org, org),
        org,
        st.builds(lambda a, b, r: f"https://huggingface.co/{a}/{b}/tree/{r}", org, org, org),
        st.sampled_from(["", " ", "/", "..", "./", "a/b/c", "gpt2", "openai-community/gpt2", "hf://x/y", "\x00",
                         "https://example.com/x/y", "🤗/🤗", "a" * 300, "estimator-test/no-config"]),
        st.text(max_size=80),
    )


def option_kwargs() -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments of ``estimate`` (every option), each valid, out of range or of a wrong type."""
    dtypes = st.sampled_from(["float32", "float16", "bfloat16", "float8", "int8", "int4", "fp16", "INT4", "int3", ""])
    options: dict[str, st.SearchStrategy[Any]] = {
        "library": st.one_of(st.sampled_from(["auto", "transformers", "timm", "diffusers", "sentence-transformers", "gguf"]), _JUNK),
        "dtypes": st.one_of(st.none(), st.lists(dtypes, max_size=4), dtypes, _JUNK),
        "mode": st.one_of(st.sampled_from(["load", "inference", "training"]), _JUNK),
        "batch_size": st.one_of(st.integers(min_value=-3, max_value=8), _JUNK),
        "seq_len": st.one_of(st.none(), st.integers(min_value=-3, max_value=64), _JUNK),
        "image_size": st.one_of(st.none(), st.integers(min_value=-3, max_value=64), _JUNK),
        "max_new_tokens": st.one_of(st.integers(min_value=-3, max_value=64), _JUNK),
        "device": st.one_of(st.sampled_from(["cuda", "cpu", "mps", "cuda:0"]), _JUNK),
        "optimizer": st.one_of(st.sampled_from(["adamw", "sgd", "adafactor", "adamw8bit", "adam"]), _JUNK),
        "pure_16bit": st.one_of(st.booleans(), _JUNK),
        "gradient_checkpointing": st.one_of(st.booleans(), _JUNK),
        "lora_rank": st.one_of(st.none(), st.integers(min_value=-2, max_value=64), _JUNK),
        "lora_targets": st.one_of(st.none(), st.sampled_from(["q_proj,v_proj", "nothing", ""]), _JUNK),
        "gpu": st.one_of(st.none(), st.sampled_from(["H100", "A100-80GB", "RTX 4090", "T4", "nope"]), _JUNK),
        "trust_remote_code": st.one_of(st.booleans(), _JUNK),
        "cross_check": st.booleans(),
        "revision": st.one_of(st.none(), st.sampled_from(["main", "0" * 40, "v1", ""]), _TEXT),
    }
    return st.fixed_dictionaries({}, optional=options)


def _flag_value(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


_FLAGS = {
    "library": "--library", "mode": "--mode", "batch_size": "--batch-size", "seq_len": "--seq-len",
    "image_size": "--image-size", "max_new_tokens": "--max-new-tokens", "device": "--device",
    "optimizer": "--optimizer", "lora_rank": "--lora-rank", "lora_targets": "--lora-targets", "gpu": "--gpu",
    "revision": "--revision",
}
_SWITCHES = {"pure_16bit": "--pure-16bit", "gradient_checkpointing": "--gradient-checkpointing",
             "trust_remote_code": "--trust-remote-code", "cross_check": "--cross-check"}


@st.composite
def cli_argv(draw: st.DrawFn, model: st.SearchStrategy[str] | None = None) -> list[str]:
    """The CLI's flags for :func:`option_kwargs` (values as text), plus ``--format`` and stray arguments."""
    kwargs = draw(option_kwargs())
    argv = [draw(model) if model is not None else TINY]
    for name, value in kwargs.items():
        if name in _SWITCHES:
            if value is True:
                argv.append(_SWITCHES[name])
        elif name == "dtypes":
            if value is not None:
                argv += ["--dtypes", *(map(str, value) if isinstance(value, list) and value else [_flag_value(value)])]
        elif value is not None:
            argv += [_FLAGS[name], _flag_value(value)]
    argv += ["--format", draw(st.sampled_from(["table", "json", "csv", "markdown", "yaml"]))]
    argv += draw(st.lists(st.sampled_from(["--timeout", "5", "--nope", "-x", "--", "extra", "--timeout=-1"]), max_size=2))
    return argv


def queries() -> st.SearchStrategy[list[tuple[str, str]]]:
    """Share-link query parameters: the contract's names with wild values, repeats, unknown names."""
    names = st.sampled_from(["model", "revision", "library", "dtypes", "mode", "batch", "seq", "image", "new_tokens",
                             "device", "optimizer", "pure16", "checkpointing", "lora", "lora_targets", "gpu", "__theme", "view", "x"])
    values = st.one_of(
        st.text(max_size=30),
        st.sampled_from(["auto", "none", "0", "1", "-1", "1e9", "NaN", "inf", "float32,int4", "H100", "training", "true"]),
        st.integers(min_value=-(2**64), max_value=2**64).map(str),
    )
    return st.lists(st.tuples(st.one_of(names, st.text(max_size=10)), values), max_size=20)


_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000,
    "max_position_embeddings": 128, "torch_dtype": "float32", "tie_word_embeddings": False,
}
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBERS.filter(lambda x: x == x and abs(x) != float("inf")), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=20,
)


@st.composite
def config_texts(draw: st.DrawFn, max_depth: int = 5000) -> str:
    """config.json texts: a tiny llama with fields mutated (wrong types, huge, negative), random JSON,
    deep nesting, unicode, and text that is not JSON at all."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "random", "deep", "raw"]))
    if kind == "mutated":
        config: Any = dict(_LLAMA)
        for key in draw(st.lists(st.sampled_from([*_LLAMA, "model_type", "rope_scaling", "quantization_config", "🤗"]), max_size=4)):
            config[key] = draw(st.one_of(_JSON, _NUMBERS.filter(lambda x: x == x), st.sampled_from(["gpt2", "bert", "t5", "🤗"])))
        if draw(st.booleans()):
            config.pop(draw(st.sampled_from(sorted(_LLAMA))), None)
    elif kind == "random":
        config = draw(_JSON)
    elif kind == "deep":
        depth = draw(st.integers(min_value=50, max_value=max_depth))
        return "[" * depth + "]" * depth if draw(st.booleans()) else '{"a":' * depth + "1" + "}" * depth
    else:
        return draw(st.text(max_size=200))
    text = json.dumps(config, allow_nan=True, ensure_ascii=draw(st.booleans()))
    return text


@st.composite
def safetensors_prefixes(draw: st.DrawFn, malformed_entries: bool = True) -> dict[str, Any]:
    """A safetensors file's leading bytes (length prefix + JSON header) and its declared size: the
    tiny llama's header with tensors mutated, dtypes and shapes wrong, lengths lying, or raw bytes.
    Without ``malformed_entries`` every tensor entry is a dict with a string dtype, a list of
    non-negative int dims and a two-int ``data_offsets``."""
    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "lm_head.weight", "model.norm.weight"]
    dtype = st.one_of(st.sampled_from(["F32", "F16", "BF16", "I64", "U8", "F8_E4M3", "BOOL", "Q4", "", "f32"]), _JUNK)
    shape = st.one_of(
        st.lists(st.integers(min_value=0, max_value=4096), max_size=4),
        st.lists(st.integers(min_value=-(2**64), max_value=2**64), max_size=5),
        _JUNK,
    )
    header: dict[str, Any] = {"__metadata__": draw(st.one_of(st.just({"format": "pt"}), _JSON))}
    offset = 0
    for name in draw(st.lists(st.one_of(st.sampled_from(names), st.text(max_size=12)), max_size=6)):
        if malformed_entries:
            entry: Any = {"dtype": draw(dtype), "shape": draw(shape)}
        else:
            entry = {"dtype": draw(st.sampled_from(["F32", "F16", "BF16", "I64", "U8", "F8_E4M3", "BOOL", "Q4"])),
                     "shape": draw(st.lists(st.integers(min_value=0, max_value=2**40), max_size=4))}
        size = draw(st.integers(min_value=0, max_value=1 << 20))
        entry["data_offsets"] = [offset, offset + size]
        if malformed_entries:
            entry["data_offsets"] = draw(st.one_of(st.just(entry["data_offsets"]), _JUNK, st.lists(_NUMBERS, max_size=3)))
        offset += size
        header[name] = draw(st.one_of(st.just(entry), st.just(entry), _JSON)) if malformed_entries else entry
    raw = json.dumps(header, allow_nan=True).encode()
    kind = draw(st.sampled_from(["ok", "ok", "lie", "raw", "truncated"]))
    if kind == "raw":
        prefix = draw(st.binary(max_size=64))
    else:
        length = len(raw) if kind != "lie" else draw(st.integers(min_value=0, max_value=2**64 - 1))
        prefix = struct.pack("<Q", length) + raw
        if kind == "truncated":
            prefix = prefix[: draw(st.integers(min_value=0, max_value=len(prefix)))]
    declared = draw(st.one_of(st.just(len(prefix) + offset), st.integers(min_value=len(prefix), max_value=2**40)))
    return {"prefix_b64": base64.b64encode(prefix).decode(), "size": declared}
