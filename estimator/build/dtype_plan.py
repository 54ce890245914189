"""The float32 exceptions ``from_pretrained`` makes in a 16-bit load (``_keep_in_fp32_modules``).

``cls._from_config(config, dtype=X)`` builds every parameter in X, but ``from_pretrained(...,
dtype=X)`` loads the parameters named by the model's dtype plan in float32: transformers 5
``PreTrainedModel._get_dtype_plan`` (``_keep_in_fp32_modules`` when X is float16,
``_keep_in_fp32_modules_strict`` when X is float16 or bfloat16), matched against each parameter
name with ``core_model_loading.build_glob_alternation`` and ``re.search``, as
``convert_and_load_state_dict_in_model`` does. T5's ``wo`` layers are the classic case: a float16 T5
holds them in float32. This applies the same plan to a meta build.
"""

from __future__ import annotations

import torch
from torch import nn


def apply_dtype_plan(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Cast, in place, the parameters ``from_pretrained(dtype=dtype)`` would load in another dtype."""
    plan_for = getattr(model, "_get_dtype_plan", None)
    if plan_for is None or dtype not in (torch.float16, torch.bfloat16):
        return model
    plan = plan_for(dtype)
    if not plan:
        return model
    from transformers.core_model_loading import build_glob_alternation

    pattern, group_to_glob, _ = build_glob_alternation(list(plan))
    for name, param in model.named_parameters():
        match = pattern.search(name)
        if match is not None and match.lastgroup is not None and param.is_floating_point():
            target = plan[group_to_glob[match.lastgroup]]
            if param.dtype != target:
                param.data = param.data.to(target)
    return model
