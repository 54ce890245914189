"""Why a model's own library refused to build it from a config, said as the config's field and rule.

The modeling code checks some fields only while it builds: ``nn.Embedding`` asserts that its
``padding_idx`` (the config's ``pad_token_id``) is a row of the table, a module asserts that a
width divides by its head count. Those checks end in a bare ``AssertionError`` or a ``ValueError``
from deep inside the library. :func:`refusal` turns the exception into one line that names the field
of the config and the rule it broke, where a known rule fits, else the library's own words.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

PAD_FIELDS = ("pad_token_id", "padding_idx")


def _sections(config: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """The config and each sub-config (``text_config``, ``decoder``...), with its dotted prefix."""
    yield path, config
    for key, value in config.items():
        if isinstance(value, dict) and isinstance(key, str) and key not in ("id2label", "label2id"):
            yield from _sections(value, f"{path}{key}.")


def _pad_outside_vocab(config: dict[str, Any]) -> str | None:
    for prefix, section in _sections(config):
        vocab = section.get("vocab_size")
        if not isinstance(vocab, int) or isinstance(vocab, bool):
            continue
        for name in PAD_FIELDS:
            value = section.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and not -vocab <= value < vocab:
                return (f"{prefix}{name} is {value}, outside the vocabulary: it must be below {prefix}vocab_size ({vocab}), "
                        "because the embedding keeps that row for padding")
    return None


def refusal(exc: BaseException, config: dict[str, Any]) -> str:
    """The field and rule behind ``exc``, raised while the library built a model from ``config``
    (a ``to_dict()``); the library's own message (or the exception's type) where no known rule fits."""
    text = str(exc).strip()
    if "padding_idx" in text.lower():
        found = _pad_outside_vocab(config)
        if found:
            return found
    return f"{type(exc).__name__}: {text}" if text else f"{type(exc).__name__} (no message) in the library's modeling code"


def _stated(config: dict[str, Any], key: str) -> tuple[str, Any] | None:
    """Where ``key`` sits in ``config``'s ``rope_parameters`` (or ``rope_scaling``), top level or a sub-config's."""
    for prefix, section in _sections(config):
        for holder in ("rope_parameters", "rope_scaling"):
            found = section.get(holder)
            if isinstance(found, dict) and key in found:
                return f"{prefix}{holder}.{key}", found[key]
    return None


def check_runnable(model: Any, config: dict[str, Any], *, name: str) -> None:
    """Refuse, before a step is simulated, a config whose forward the modeling code cannot run.

    Multimodal rotary embeddings (Qwen2-VL, Qwen2.5-VL and their kin) split the rotary frequencies,
    ``head_dim / 2`` of them, into ``mrope_section`` parts (``freq.split(mrope_section, dim=-1)``),
    so the parts must add up to ``head_dim / 2``; the code falls back to ``[16, 24, 24]`` (a head dim
    of 128) where the config states none, and a smaller model that keeps that default fails in its
    first forward, on the CPU as here.
    """
    from estimator.errors import MalformedConfigError

    _refuse_no_attention_layer(model, config, name=name)
    for module in model.modules():
        section = getattr(module, "mrope_section", None)
        inv_freq = getattr(module, "inv_freq", None)
        if not isinstance(section, (list, tuple)) or not all(isinstance(s, int) for s in section) or inv_freq is None:
            continue
        half = int(inv_freq.shape[-1])
        if sum(section) == half:
            continue
        stated = _stated(config, "mrope_section")
        where = (f"{stated[0]} is {list(section)}" if stated else
                 f"rope_parameters states no mrope_section, so the modeling code uses {list(section)}")
        raise MalformedConfigError(
            f"The config of {name} cannot run: {where}, which adds up to {sum(section)}; the sections must add up to "
            f"head_dim / 2 = {half} (they split the rotary frequencies). Set mrope_section in rope_parameters.")


# The fields from which a hybrid's config derives its layer_types (Jamba, Qwen3-Next and their kin), in the order named.
_LAYOUT_FIELDS = ("layer_types", "layers_block_type", "attn_layer_period", "attn_layer_offset", "full_attention_interval")
_RECURRENT = ("linear_attention", "mamba", "mamba2")


def _refuse_no_attention_layer(model: Any, config: dict[str, Any], *, name: str) -> None:
    """A hybrid whose layers are all recurrent (Mamba or linear attention), Jamba or Qwen3-Next with fewer layers than
    its default attention period (``attn_layer_period`` 8 at offset 4; ``full_attention_interval`` 4): transformers'
    forward and ``generate`` refuse it (its cache measures the sequence on an attention layer: "``get_seq_length`` can
    only be called on Attention layers"), so it is refused here, in one line naming the fields."""
    from estimator.errors import MalformedConfigError

    text = model.config.get_text_config() if hasattr(getattr(model, "config", None), "get_text_config") else getattr(model, "config", None)
    types = getattr(text, "layer_types", None)
    if not isinstance(types, (list, tuple)) or not types or not all(t in _RECURRENT for t in types):
        return
    if not hasattr(text, "num_attention_heads"):  # a pure SSM (Mamba, Mamba2, FalconMamba): no attention layer by design,
        return                                      # its own cache measures the sequence, and generate runs
    stated = {key: section[key] for _, section in _sections(config) for key in _LAYOUT_FIELDS if key in section}
    fields = [f"{key} {stated[key]!r}" if key in stated else f"{key} {getattr(text, key)!r} (the default)"
              for key in _LAYOUT_FIELDS if key in stated or (key != "layer_types" and isinstance(getattr(text, key, None), int))]
    if not fields and "full_attention_interval" not in stated:  # Qwen3-Next reads it once, in __init__, and keeps only layer_types
        fields = ["full_attention_interval 4 (the default)"]
    kinds = sorted({"Mamba" if t.startswith("mamba") else "linear-attention" for t in getattr(text, "layers_block_type", None) or types})
    raise MalformedConfigError(
        f"The config of {name} cannot run: all {len(types)} of its layers are {' or '.join(kinds)} layers ({', '.join(fields)}, "
        f"num_hidden_layers {len(types)}), and transformers' forward and generate need at least one attention layer; "
        "add layers or set these fields so that one is attention.")


def missing_field(exc: BaseException, model: Any, step: str) -> str | None:
    """The line for a step that failed because the config lacks a field the modeling code reads
    (``'T5Config' object has no attribute 'decoder_start_token_id'``: transformers 5's default T5
    config has none, T5's checkpoints state 0, and a training step shifts the labels right with
    it); ``None`` for any other failure."""
    config = getattr(model, "config", None)
    if not isinstance(exc, AttributeError) or config is None or getattr(exc, "obj", None) is not config:
        return None
    field = getattr(exc, "name", None)
    if not isinstance(field, str):
        return None
    return (f"The config has no {field}, which {type(model).__name__}'s {step} reads (the real run fails the same way); "
            f"add {field} to config.json.")
