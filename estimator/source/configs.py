"""Config reading for repos made of several JSON files: diffusers pipelines and sentence-transformers.

Each reader takes ``read(path) -> parsed JSON or None`` (a local folder, the Hub, or the bundled
catalog supplies it) and returns ``(config, extra)`` for :class:`~estimator.source.resolve.Resolved`.
No library is imported: the builders in :mod:`estimator.build` turn what is read here into models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from estimator.errors import MalformedConfigError, NoConfigError, UnsupportedError

SINGLE = "model"  # the component name of a single-component diffusers repo

_NO_WEIGHTS = {"Pooling", "Normalize", "Dropout"}
_SUPPORTED = {"Transformer", "Dense", "LayerNorm", "WeightedLayerPooling", *_NO_WEIGHTS}


def _kind(module_type: str) -> str:
    """``sentence_transformers.models.Dense`` (or the 6.x path) -> ``Dense``."""
    return module_type.rsplit(".", 1)[-1]


def read_sentence_transformers(read: Callable[[str], Any], *, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config, extra)``: the Transformer module's config, and ``extra["modules"]`` in order.

    Each module is ``{"name", "kind", "path", "config"}`` (``config`` None for modules without one).
    """
    modules = read("modules.json")
    if not isinstance(modules, list) or not modules:
        raise NoConfigError(f"{model} has no usable modules.json (a list of modules), so it is not a sentence-transformers model.")
    listed: list[dict[str, Any]] = []
    transformer_config: dict[str, Any] | None = None
    for entry in sorted(modules, key=lambda m: m.get("idx", 0) if isinstance(m, dict) else 0):
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            raise MalformedConfigError(f"The modules.json of {model} has an entry without a 'type': {entry!r}.")
        kind = _kind(entry["type"])
        if kind not in _SUPPORTED:
            raise UnsupportedError(f"{model} uses the sentence-transformers module {entry['type']}, which is not estimated yet.")
        path = str(entry.get("path") or "").strip("/")
        config = None
        if kind not in _NO_WEIGHTS:
            config = read(f"{path}/config.json" if path else "config.json")
            if not isinstance(config, dict):
                raise NoConfigError(f"The {kind} module of {model} has no {path + '/' if path else ''}config.json.")
        if kind == "Transformer" and transformer_config is None:
            transformer_config = config
        listed.append({"name": str(entry.get("name", entry.get("idx", len(listed)))), "kind": kind, "path": path, "config": config})
    return transformer_config or {}, {"modules": listed}


def read_diffusers(read: Callable[[str], Any], *, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config, extra)`` of a diffusers repo from a reader of its JSON files.

    ``config`` is ``model_index.json`` (or the single component's config); ``extra["components"]``
    maps each weight-holding component to ``{"library", "class", "config"}``.
    """
    index = read("model_index.json")
    if isinstance(index, dict):
        components: dict[str, Any] = {}
        for name, value in index.items():
            if name.startswith("_") or not (isinstance(value, list) and len(value) == 2) or None in value:
                continue
            config = read(f"{name}/config.json")
            if not isinstance(config, dict):
                continue  # schedulers, tokenizers, feature extractors: no weights
            components[name] = {"library": str(value[0]), "class": str(value[1]), "config": config}
        if not components:
            raise NoConfigError(f"The model_index.json of {model} names no component with a config.json, so there is nothing to build.")
        return index, {"components": components}
    config = read("config.json")
    if not isinstance(config, dict):
        raise NoConfigError(f"{model} has neither a model_index.json nor a config.json.")
    class_name = config.get("_class_name")
    if not isinstance(class_name, str):
        raise MalformedConfigError(f"The config of {model} has no '_class_name', so diffusers cannot tell what to build.")
    return config, {"components": {SINGLE: {"library": "diffusers", "class": class_name, "config": config}}}
