"""GPTQ and AWQ checkpoints on CUDA: the Marlin layer gptqmodel gives them, modelled from its published source.

transformers 5 loads both through gptqmodel (``GptqHfQuantizer`` -> optimum's ``GPTQQuantizer.convert_model`` ->
``gptqmodel.utils.importer.hf_select_quant_linear``; ``AwqQuantizer`` -> ``integrations/awq.py``
``replace_with_awq_linear`` -> ``hf_select_quant_linear_v2``), whose ``select_quant_linear`` with the default
``BACKEND.AUTO`` walks the kernels by their declared priority (``SUPPORTS_FORMATS``) and takes the first that
validates on the device. On CUDA that is Marlin for a symmetric 4- or 8-bit GPTQ checkpoint
(``nn_modules/qlinear/marlin.py`` ``MarlinQuantLinear``: priority 90, ``SUPPORTS_SYM = [True]``) and for an AWQ
``gemm`` checkpoint (``nn_modules/qlinear/marlin_awq.py`` ``AwqMarlinLinear``: priority 90), compute capability
>= 7.5. Only the Swordfish (GPTQ, 101) and Machete (100; Hopper builds) kernels rank above it, where their compiled
extensions load: **the GPU assumed is an Ampere A100** (compute capability 8.0, ``ASSUMED_SMS`` = 108 streaming
multiprocessors, NVIDIA's A100 datasheet), where the auto order lands on Marlin. Marlin's kernels are CUDA only
and cannot run on fakes, so the layer here is a stand-in that holds and allocates what the source says
(GPTQModel, ``ModelCloud/GPTQModel`` main):

- **held** (``post_init`` of either layer): ``qweight`` repacked by ``gptq_marlin_repack`` / ``awq_marlin_repack``
  (the same int32 count as stored), ``scales`` permuted (the same count, in the compute dtype: ``forward`` casts
  them to the input's dtype), AWQ's ``qzeros`` turned into Marlin zero points (same count); a symmetric GPTQ
  layer's ``qzeros`` and, without ``desc_act``, its ``g_idx`` are replaced by empty tensors
  (``marlin_make_empty_g_idx``); with ``desc_act`` ``g_idx`` stays and ``g_idx_sort_indices`` (int32,
  ``in_features``) is added. Each layer keeps its own workspace: ``utils/marlin.py``
  ``marlin_make_workspace_new``: ``torch.zeros(max(sms * max_blocks_per_sm, 128), dtype=torch.int)`` with
  ``max_blocks_per_sm`` 1 (a buffer of the layer, counted with the weights).
- **per call** (``apply_gptq_marlin_linear`` / ``apply_awq_marlin_linear`` -> ``gptq_marlin_gemm``,
  ``gptqmodel_ext/marlin/gptq_marlin.cu``): the output ``c = torch::empty({size_m, size_n})`` in the input dtype
  (the bias is added inside the kernel); with ``use_fp32_reduce`` (``GPTQMODEL_MARLIN_USE_FP32`` defaults on;
  AWQ's call passes True) ``c_tmp = torch::empty({sms * min(round_up(size_m, 16), 64) * max_thread_n})`` float32,
  ``max_thread_n = 256`` (``marlin.cuh``); with act order (``desc_act``) ``a_tmp = torch::empty({size_m, size_k})``
  in the input dtype. ``c_tmp`` and ``a_tmp`` are freed when the call returns.

Which linears are swapped: every ``nn.Linear`` but the output embedding (``lm_head``, left in the compute dtype by
both quantizers' defaults) and those named in ``modules_to_not_convert``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["ASSUMED_SMS", "MARLIN_MAX_THREAD_N", "MarlinLinear", "c_tmp_elements", "swap_linears", "workspace_elements"]

ASSUMED_SMS = 108  # NVIDIA A100 datasheet: 108 SMs (compute capability 8.0, where gptqmodel's auto order picks Marlin)
MARLIN_MAX_THREAD_N = 256  # gptqmodel_ext/marlin/marlin.cuh: static constexpr int max_thread_n = 256
_MIN_WORKSPACE_BLOCKS = 128  # utils/marlin.py marlin_make_workspace_new: max(sms * max_blocks_per_sm, 128)


def workspace_elements(sms: int = ASSUMED_SMS) -> int:
    """int32 elements of one layer's Marlin workspace (``marlin_make_workspace_new``, ``max_blocks_per_sm`` 1)."""
    return max(sms * 1, _MIN_WORKSPACE_BLOCKS)


def c_tmp_elements(size_m: int, sms: int = ASSUMED_SMS) -> int:
    """float32 elements of ``gptq_marlin_gemm``'s fp32-reduce buffer for ``size_m`` rows."""
    return sms * min(-(-size_m // 16) * 16, 64) * MARLIN_MAX_THREAD_N


class MarlinLinear(nn.Module):
    """A GPTQ / AWQ Marlin layer after ``post_init``: its held tensors and, per call, its kernel's buffers."""

    def __init__(self, in_features: int, out_features: int, *, bias: bool, bits: int, group_size: int,
                 desc_act: bool, awq: bool, dtype: torch.dtype, sms: int = ASSUMED_SMS) -> None:
        super().__init__()
        self.in_features, self.out_features, self.desc_act, self.sms = in_features, out_features, desc_act, sms
        pack = 32 // bits
        groups = in_features // group_size if group_size > 0 else 1

        def held(*shape: int, dtype: torch.dtype = torch.int32) -> nn.Parameter:
            return nn.Parameter(torch.empty(shape, dtype=dtype, device="meta"), requires_grad=False)

        # GPTQ stores qweight as (in / pack, out), AWQ as (in, out / pack): the same int32 count
        self.qweight = held(in_features // pack, out_features) if not awq else held(in_features, out_features // pack)
        self.scales = held(groups, out_features, dtype=dtype)
        self.qzeros = held(groups, out_features // pack) if awq else held(0)  # symmetric GPTQ: emptied by post_init
        self.g_idx = held(in_features if desc_act else 0)
        self.register_buffer("g_idx_sort_indices", torch.empty(in_features if desc_act else 0, dtype=torch.int32, device="meta"))
        self.register_buffer("workspace", torch.zeros(workspace_elements(sms), dtype=torch.int32, device="meta"))
        self.bias = held(out_features, dtype=dtype) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_m = x.numel() // x.shape[-1]
        c = x.new_empty((size_m, self.out_features))  # gptq_marlin_gemm's output, bias added in the kernel
        c_tmp = x.new_empty((c_tmp_elements(size_m, self.sms),), dtype=torch.float32)
        a_tmp = x.new_empty((size_m, self.in_features)) if self.desc_act else None
        del c_tmp, a_tmp  # local to the C++ call: freed when it returns
        return c.view(*x.shape[:-1], self.out_features)


def swap_linears(model: nn.Module, quantization_config: dict[str, Any], *, awq: bool) -> int:
    """Replace ``model``'s linears (on meta) by :class:`MarlinLinear` as the quantizer would; how many were swapped."""
    bits = int(quantization_config.get("bits") or 4)
    group_size = int(quantization_config.get("group_size") or 128)
    desc_act = bool(quantization_config.get("desc_act")) and not awq
    skip = set(quantization_config.get("modules_to_not_convert") or ())
    get_output = getattr(model, "get_output_embeddings", None)
    output = get_output() if callable(get_output) else None
    swapped = 0
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear) or module is output or name in skip or name.split(".")[-1] in skip:
            continue
        dtype = module.weight.dtype if module.weight.is_floating_point() else torch.float16
        model.set_submodule(name, MarlinLinear(module.in_features, module.out_features, bias=module.bias is not None,
                                               bits=bits, group_size=group_size, desc_act=desc_act, awq=awq, dtype=dtype))
        swapped += 1
    return swapped
