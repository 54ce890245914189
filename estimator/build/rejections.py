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
