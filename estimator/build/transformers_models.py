"""transformers models on the meta device, as ``from_pretrained(..., dtype=X)`` would lay them out.

The class is the one the checkpoint is published for (``config.architectures[0]``), so task heads
count (accelerate builds the bare ``AutoModel`` and misses an untied ``lm_head``); where that class
is unknown, ``AutoModel``'s class for the config. ``cls._from_config(config, dtype=X)`` is exactly
what ``from_pretrained`` builds before loading weights: tied weights are one tensor, and buffers the
modeling code makes in float32 on purpose (rotary ``inv_freq``) stay float32. The parameters that
``from_pretrained`` loads in float32 in a 16-bit load (``_keep_in_fp32_modules``, T5's ``wo``) are then
cast as it casts them (:mod:`estimator.build.dtype_plan`).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch
from torch import nn

from estimator.errors import (
    LibraryMissingError,
    MalformedConfigError,
    Option,
    RemoteCodeRequiredError,
    UnknownArchitectureError,
)

logger = logging.getLogger(__name__)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:  # pragma: no cover - transformers is a hard requirement of the package
        raise LibraryMissingError("transformers is not installed; `pip install transformers`.") from None
    return transformers


def transformers_config(config: dict[str, Any], *, model: str, trust_remote_code: bool = False, remote_ref: str | None = None) -> Any:
    """A ``PretrainedConfig`` from a config.json dict, refusing remote code unless allowed."""
    transformers = _transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise MalformedConfigError(f"The config of {model} has no model_type, so transformers cannot tell what to build.")
    if model_type not in CONFIG_MAPPING:
        if config.get("auto_map"):
            if not trust_remote_code:
                raise RemoteCodeRequiredError([
                    f"{model} is defined by code in its repo (model_type {model_type!r}); the estimator runs it only "
                    "from the command line with ", Option("trust_remote_code"), ", after you have read that code.",
                ])
            if remote_ref is None:
                raise RemoteCodeRequiredError(f"{model} needs its repo's code, which cannot be fetched here.")
            return transformers.AutoConfig.from_pretrained(remote_ref, trust_remote_code=True)
        raise UnknownArchitectureError(
            f"transformers {transformers.__version__} does not know model_type {model_type!r} ({model}); "
            f"upgrade transformers, or check the config."
        )
    from huggingface_hub.errors import StrictDataclassError  # transformers 5's configs are strict dataclasses

    try:
        # config.json holds non-finite floats as {"__float__": "Infinity"} (Mamba2's and Falcon-H1's
        # time_step_limit): decoded as transformers' own reader does (PreTrainedConfig._dict_from_json_file)
        decoded = transformers.PreTrainedConfig._decode_special_floats(dict(config))
        return CONFIG_MAPPING[model_type].from_dict(decoded)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError, OverflowError, RecursionError, StrictDataclassError) as exc:
        raise MalformedConfigError(f"The config of {model} could not be read as a {model_type} config: {exc}") from None


def model_class(config: Any, *, model: str, trust_remote_code: bool = False) -> type[nn.Module]:
    """The class named by ``architectures[0]``, else ``AutoModel``'s class for this config."""
    transformers = _transformers()
    architectures = getattr(config, "architectures", None) or []
    if not isinstance(architectures, (list, tuple)) or not all(isinstance(name, str) for name in architectures):
        raise MalformedConfigError(f"The config of {model} has 'architectures' {architectures!r}; it must be a list of class names.")
    for name in architectures:
        cls = getattr(transformers, name, None)
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            return cls
        logger.info("architecture %s is not in transformers; falling back to AutoModel", name)
    auto_map = getattr(config, "auto_map", None) or {}
    if trust_remote_code and "AutoModel" in auto_map:
        return transformers.AutoModel._model_mapping.get(type(config), None) or transformers.AutoModel
    try:
        return transformers.AutoModel._model_mapping[type(config)]
    except KeyError:
        raise UnknownArchitectureError(f"transformers has no model class for {model} ({type(config).__name__}).") from None
    except ValueError as exc:  # the auto mapping names a class its module does not define (voxtral_realtime_text)
        missing = re.search(r"Could not find (\w+)", str(exc))
        name = missing[1] if missing else "its model class"
        raise UnknownArchitectureError(
            f"transformers {transformers.__version__} maps {type(config).__name__} to {name} but does not define that class, "
            f"so {model} cannot be built; name a class it has in the config's 'architectures'."
        ) from None


def build_transformers(config: dict[str, Any], dtype: torch.dtype, *, model: str, trust_remote_code: bool = False, remote_ref: str | None = None) -> nn.Module:
    """The published class of ``config``, built on the meta device as ``from_pretrained(dtype=dtype)`` lays it out."""
    from estimator.build.dtype_plan import apply_dtype_plan

    hf_config = transformers_config(config, model=model, trust_remote_code=trust_remote_code, remote_ref=remote_ref)
    cls = model_class(hf_config, model=model, trust_remote_code=trust_remote_code)
    from estimator.build.scalars import ScalarsOnCpu

    try:
        with torch.device("meta"), ScalarsOnCpu():  # integer scalars keep their values (estimator.build.scalars)
            if trust_remote_code and not hasattr(cls, "_from_config"):
                built = cls.from_config(hf_config, trust_remote_code=True, dtype=dtype)  # type: ignore[attr-defined]  # a transformers/diffusers class, typed as nn.Module here
            else:
                built = cls._from_config(hf_config, dtype=dtype)  # type: ignore[attr-defined]  # a transformers/diffusers class, typed as nn.Module here
    except ImportError as exc:  # transformers' requires_backends: an optional library the class needs (natten, torchaudio)
        found = re.search(r"(\w+) requires the (\S+) library", str(exc))
        needs = f"{found[1]} needs the {found[2]} library, which is not installed" if found else f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise LibraryMissingError(
            f"{model} cannot be built here: {needs}. The estimator does not install optional kernel libraries, "
            "so it cannot build this model."
        ) from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError, RuntimeError, AssertionError) as exc:
        # the modeling code's own checks (an embedding's padding row, a width that heads must divide)
        from estimator.build.rejections import refusal

        why = refusal(exc, hf_config.to_dict())
        raise MalformedConfigError(f"transformers could not build {cls.__name__} from the config of {model}: {why.rstrip('.')}.") from None
    return apply_dtype_plan(built, dtype)
