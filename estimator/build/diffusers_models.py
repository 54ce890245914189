"""diffusers pipelines and single components on the meta device, component by component.

A pipeline repo's ``model_index.json`` names each component as ``[library, class]``; the ones
that hold weights have a ``<name>/config.json`` (UNet or transformer, VAE, text encoders, a
safety checker, ControlNets). Schedulers (``scheduler_config.json``), tokenizers and feature
extractors hold no weights and are skipped. A single-component repo has one ``config.json``
with ``_class_name``.

Each component is built the way ``DiffusionPipeline.from_pretrained(..., torch_dtype=X)`` loads
it: diffusers classes with ``cls.from_config(config)`` then cast to X, except the parameters under
the class's ``_keep_in_fp32_modules`` (diffusers ``load_model_dict_into_meta``: a parameter stays
float32 when one of its dotted name's parts is such a module); transformers classes (the CLIP
text encoders) with ``cls._from_config(config, dtype=X)`` as in :mod:`.transformers_models`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from estimator.build.rejections import refusal
from estimator.errors import LibraryMissingError, MalformedConfigError, UnknownArchitectureError
from estimator.source.configs import SINGLE, read_diffusers
from estimator.source.limits import check_config

__all__ = ["SINGLE", "Component", "build_component", "components", "read_diffusers"]



@dataclass(frozen=True)
class Component:
    """One weight-holding component of a diffusers repo."""

    name: str
    library: str  # "diffusers", "transformers", or a diffusers pipeline module ("stable_diffusion")
    class_name: str
    config: dict[str, Any]


def components(extra: dict[str, Any]) -> tuple[Component, ...]:
    """The weight-holding components recorded by :func:`read_diffusers`, in model_index order."""
    return tuple(Component(name, spec["library"], spec["class"], spec["config"]) for name, spec in extra.get("components", {}).items())


def _diffusers() -> Any:
    try:
        import diffusers
    except ImportError:
        raise LibraryMissingError("diffusers is not installed; `pip install diffusers` to estimate diffusers pipelines.") from None
    return diffusers


def _diffusers_class(component: Component, *, model: str) -> type[nn.Module]:
    diffusers = _diffusers()
    cls = getattr(diffusers, component.class_name, None)
    if cls is None and component.library not in ("diffusers", "transformers"):
        try:
            cls = getattr(importlib.import_module(f"diffusers.pipelines.{component.library}"), component.class_name, None)
        except ImportError:
            cls = None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise UnknownArchitectureError(f"diffusers {diffusers.__version__} has no model class {component.class_name!r} ({model}, {component.name}).")
    return cls


def _keep_fp32(model: nn.Module, keep: list[str] | None) -> None:
    """Put back in float32 the parameters diffusers keeps there (any name part in ``keep``)."""
    if not keep:
        return
    for name, module in model.named_modules():
        if name and any(part in keep for part in name.split(".")):
            nn.Module.to(module, torch.float32)


def build_component(component: Component, dtype: torch.dtype, *, model: str) -> nn.Module:
    """One component on the meta device in ``dtype``."""
    where = f"{model} ({component.name})"
    check_config(component.config, model=where)
    if component.library == "transformers":
        import transformers

        from estimator.build.dtype_plan import apply_dtype_plan
        from estimator.build.transformers_models import transformers_config

        cls = getattr(transformers, component.class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise UnknownArchitectureError(f"transformers has no model class {component.class_name!r} ({where}).")
        hf_config = transformers_config(component.config, model=where)
        try:
            with torch.device("meta"):
                return apply_dtype_plan(cls._from_config(hf_config, dtype=dtype), dtype)  # type: ignore[attr-defined]  # a transformers/diffusers class, typed as nn.Module here
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, RuntimeError, AssertionError) as exc:
            raise MalformedConfigError(f"transformers could not build {component.class_name} from the config of {where}: "
                                       f"{refusal(exc, hf_config.to_dict())}") from None
    from accelerate import init_empty_weights

    cls = _diffusers_class(component, model=model)
    try:
        with init_empty_weights():
            built = cls.from_config(dict(component.config))  # type: ignore[attr-defined]  # a transformers/diffusers class, typed as nn.Module here
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RuntimeError, AssertionError) as exc:
        raise MalformedConfigError(f"diffusers could not build {component.class_name} from the config of {where}: "
                                   f"{refusal(exc, dict(component.config))}") from None
    # nn.Module.to, not ModelMixin.to: the latter only adds a warning about _keep_in_fp32_modules,
    # which _keep_fp32 then applies the way from_pretrained(torch_dtype=...) does.
    built = nn.Module.to(built, device="meta", dtype=dtype)
    if dtype != torch.float32:
        _keep_fp32(built, getattr(cls, "_keep_in_fp32_modules", None))
    return built
