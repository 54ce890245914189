"""sentence-transformers models assembled by hand on the meta device, module by module.

The library has no build-from-config path, so the model is put together as
``SentenceTransformer(model_path)`` would load it from ``modules.json``:

* ``Transformer`` (``path`` holds its ``config.json``): the transformers model that
  sentence-transformers 6 loads for ``transformer_task="feature-extraction"`` — ``AutoModel``'s
  class for the config, or the encoder alone for the encoder-decoder families it lists in
  ``_ENCODER_ONLY_MODELS`` (T5 -> ``T5EncoderModel``, ...). Built with ``_from_config`` like any
  transformers model (:mod:`.transformers_models`).
* ``Dense`` (``<path>/config.json``): ``nn.Linear(in_features, out_features, bias)``, plus a
  bias-free residual projection when ``use_residual`` and the sizes differ.
* ``LayerNorm``: ``nn.LayerNorm(dimension)``. ``WeightedLayerPooling``: one float32 weight per
  pooled layer.
* ``Pooling``, ``Normalize``, ``Dropout``: no weights.

Module names follow sentence-transformers' state dicts (``0.auto_model.*``, ``2.linear.*``). The
whole model is in the row's dtype, as after ``model.to(dtype)`` (``model_kwargs={"dtype": ...}``
casts only the transformer; the Dense head of a few hundred KiB then stays float32).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn

from estimator.errors import MalformedConfigError, UnsupportedError
from estimator.source.configs import read_sentence_transformers

__all__ = ["build_sentence_transformer", "read_sentence_transformers"]


def _transformer_class(hf_config: Any) -> type[nn.Module]:
    """sentence-transformers' own choice: the encoder of listed encoder-decoders, else AutoModel's class."""
    import transformers

    try:
        st_transformer = importlib.import_module("sentence_transformers.base.modules.transformer")
        encoder_only = getattr(st_transformer, "_ENCODER_ONLY_MODELS", [])
    except ImportError:  # sentence-transformers not installed: its T5-family rule, restated
        encoder_only = [(transformers.T5Config, "transformers", "T5EncoderModel"), (transformers.MT5Config, "transformers", "MT5EncoderModel")]
    for config_class, module_path, class_name in encoder_only:
        if isinstance(hf_config, config_class):
            cls: type[nn.Module] = getattr(importlib.import_module(module_path), class_name)
            return cls
    try:
        return transformers.AutoModel._model_mapping[type(hf_config)]  # type: ignore[return-value]  # a class at runtime; typed loosely upstream
    except KeyError:
        raise UnsupportedError(f"transformers' AutoModel has no class for {type(hf_config).__name__}.") from None


class _Wrapper(nn.Module):
    """A named slot so parameter names read like sentence-transformers' (``0.auto_model.*``)."""

    def __init__(self, **children: nn.Module) -> None:
        super().__init__()
        for name, child in children.items():
            self.add_module(name, child)


def build_sentence_transformer(extra: dict[str, Any], dtype: torch.dtype, *, model: str) -> nn.Module:
    """The whole sentence-transformers model on the meta device in ``dtype``."""
    from estimator.build.dtype_plan import apply_dtype_plan
    from estimator.build.transformers_models import transformers_config

    root = nn.Sequential()
    no_split: list[str] = []
    for module in extra.get("modules", []):
        kind, config = module["kind"], module["config"] or {}
        built: nn.Module
        if kind == "Transformer":
            hf_config = transformers_config(config, model=model)
            cls = _transformer_class(hf_config)
            try:
                with torch.device("meta"):
                    inner = apply_dtype_plan(cls._from_config(hf_config, dtype=dtype), dtype)  # type: ignore[attr-defined]  # a transformers/diffusers class, typed as nn.Module here
            except (TypeError, ValueError, KeyError, AttributeError, IndexError, RuntimeError, AssertionError) as exc:
                from estimator.build.rejections import refusal

                raise MalformedConfigError(f"transformers could not build {cls.__name__} for {model}: {refusal(exc, hf_config.to_dict())}") from None
            no_split.extend(getattr(inner, "_no_split_modules", None) or [])
            built = _Wrapper(auto_model=inner)
        elif kind == "Dense":
            try:
                in_features, out_features = int(config["in_features"]), int(config["out_features"])
            except (KeyError, TypeError, ValueError):
                raise MalformedConfigError(f"The Dense module of {model} needs integer in_features and out_features.") from None
            with torch.device("meta"):
                children = {"linear": nn.Linear(in_features, out_features, bias=bool(config.get("bias", True)), dtype=dtype)}
                if config.get("use_residual") and in_features != out_features:
                    children["residual"] = nn.Linear(in_features, out_features, bias=False, dtype=dtype)
            built = _Wrapper(**children)
        elif kind == "LayerNorm":
            with torch.device("meta"):
                built = _Wrapper(norm=nn.LayerNorm(int(config.get("dimension", 0)), dtype=dtype))
        elif kind == "WeightedLayerPooling":
            count = int(config.get("num_hidden_layers", 12)) + 1 - int(config.get("layer_start", 4))
            built = _Wrapper()
            built.register_parameter("layer_weights", nn.Parameter(torch.empty(count, device="meta", dtype=dtype)))
        else:
            built = _Wrapper()
        root.add_module(module["name"], built)
    root._no_split_modules = no_split  # type: ignore[assignment]  # read by weights.largest_layer
    return root
