"""MXFP4 (gpt-oss) checkpoints on CUDA: transformers' ``Mxfp4GptOssMLP`` and the triton_kernels it calls, modelled
from their published source.

transformers 5 (``integrations/mxfp4.py``) swaps every ``GptOssMLP`` whose ``experts`` are not in
``modules_to_not_convert`` for ``Mxfp4GptOssMLP(router, Mxfp4GptOssExperts)`` and loads the checkpoint's blocks and
scales as they are stored (``Mxfp4Deserialize`` -> ``swizzle_mxfp4_convertops``), where ``Mxfp4HfQuantizer`` finds a
CUDA GPU of compute capability >= 7.5, Triton >= 3.4 and the ``kernels`` package (else it dequantizes, as on CPU).
The experts' forward calls ``matmul_ogs`` of the Hub kernel ``kernels-community/gpt-oss-triton-kernels`` (version 1;
its source: ``huggingface/kernels-community``, ``gpt-oss-triton-kernels/torch-ext/gpt_oss_triton_kernels/``), whose
Triton kernels cannot run on fakes. This stand-in holds and allocates what that source says, for an **A100**
(compute capability 8.0, ``ASSUMED_SMS`` 108 SMs, the GPU the Marlin model assumes too):

- **held** (per layer): the values as stored, ``gate_up`` ``(E, 2I, H/2)`` and ``down`` ``(E, H, I/2)`` uint8 (two
  e2m1 per byte) and their e8m0 scales ``(E, 2I, H/32)`` / ``(E, H, I/32)`` uint8: ``swizzle_mxfp4`` wraps them in
  ``layout.make_default_matmul_mxfp4_w_layout``'s layout, ``StridedLayout`` below compute capability 9 (and from
  10), whose ``swizzle_data`` returns the data as is, and the scales in ``StridedLayout`` (``tensor_details/
  layout.py``, ``layout_details/strided.py``). Hopper's ``HopperMXValueLayout`` pads them (not modelled). The
  biases stay float32 as ``Mxfp4GptOssExperts`` declares them (the loader keeps a parameter's own dtype,
  ``core_model_loading.py``: ``_dtype = empty_param.dtype``), so the forward's ``.to(torch.float32)`` copies nothing.
- **routing** (``routing.py`` ``routing`` -> ``routing_from_bitmatrix`` -> ``SortTokens.forward``), alive through
  both matmuls: ``gate_scal`` (``T*k`` in the logits' dtype), ``combined_indx`` (``2*T*k`` int32: the gather and
  scatter indices), ``_compute_expt_data_internal``'s ``token_offs_combined`` ``(5, pad512(E+1))`` and
  ``block_pid_map`` ``(4, pad512(max_n_tiles))`` int32. ``topk``'s values / indices / bitmatrix and the histogram's
  partials are freed before the first matmul (smaller than its output) and are not counted.
- **per matmul_ogs call** (``matmul_ogs.py`` ``init_allocation`` / ``apply_allocation``; ``opt_flags.py``
  ``make_default_opt_flags_nvidia``; ``opt_flags_details/opt_flags_nvidia.py``): not persistent (TMA needs compute
  capability 9), ``block_k`` 128 (4-bit weights without native MXFP), ``block_m = max(16, min(next_pow2(max(1,
  M // E)), 128))``, ``block_n = 256`` for ``N > 128`` (else ``max(16, min(128, next_pow2(N)))``),
  ``split_k = max(1, min(SMs // (cdiv(M, block_m) * cdiv(N, block_n)), cdiv(K, 128) // 4))``
  (:func:`split_k`). gate_up (``M = T*k`` gathered rows, ``N = 2I``, fused SwiGLU halves it): the output
  ``(1, M, I)`` in the activations' dtype and, when ``split_k > 1``, the float32 scratchpad ``(split_k, 1, M, 2I)``
  (freed on return). down (``M = T*k``, scattered to ``T`` rows with the gate weights): with ``split_k == 1`` the
  scatter is fused and the output holds the scratch rows too, ``(1, M + T, H)``, returned as a view of its first
  ``T`` rows (``apply_postprocessing_features``: ``out[:, :, :n_final_rows, :]``, so the whole buffer lives as the
  layer's MLP output), with the int32 ``writeback_idxs`` (``M``) and ``finalize_scatter_idxs`` (``T + M + 1``) of
  ``apply_preprocessing_features`` during the call; with ``split_k > 1`` the output ``(1, T, H)`` and the float32
  scratchpad ``(split_k, 1, M, H)``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["Mxfp4Experts", "Mxfp4MLP", "call_buffers", "routing_held_elements", "split_k", "swap_mlps"]

_BLOCK_K = 128  # opt_flags_nvidia.compute_block_k: rhs_width == 4 and not has_native_mxfp -> 128
_MEMSET_BLOCK = 512  # routing.py _compute_expt_data_internal: pad = cdiv(x, 512) * 512
_BLOCK_M_NUM = 4  # block_m 16, 32, 64, 128 (block_m_log2_start 4, block_m_log2_end 8 on CUDA)


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def split_k(m: int, n: int, k: int, experts: int, sms: int | None = None) -> int:
    """``opt_flags.split_k`` of one ``matmul_ogs`` call on the assumed GPU (``make_default_opt_flags_nvidia``, not
    persistent): ``m`` rows, ``n`` outputs, ``k`` inputs, ``experts`` the routing's ``n_expts_tot``."""
    from estimator.peak.sim.prequant_marlin import ASSUMED_SMS

    sms = ASSUMED_SMS if sms is None else sms
    block_m = max(16, min(_next_pow2(max(1, m // experts)), 128))
    block_n = 256 if n > 128 else max(16, min(128, _next_pow2(n)))
    grid = -(-m // block_m) * -(-n // block_n)
    return max(1, min(sms // grid, -(-k // _BLOCK_K) // 4))


def call_buffers(m: int, n: int, k: int, experts: int, *, top_k: int, scatter: bool, reduction_n: int = 1,
                 sms: int | None = None) -> tuple[tuple[int, ...], tuple[int, ...] | None, int]:
    """One ``matmul_ogs`` call of ``m`` rows: its output shape and float32 scratchpad shape (or None), from
    ``init_allocation``, and the int32 elements of the fused scatter's index buffers (``apply_preprocessing_features``:
    ``writeback_idxs`` ``m`` and ``finalize_scatter_idxs`` ``m / top_k + m + 1``), freed with the call. ``scatter``:
    the call scatters its rows back to ``m / top_k`` tokens (down); else its rows are gathered (gate_up)."""
    splits = split_k(m, n, k, experts, sms)
    scratch = (splits, 1, m, n) if splits > 1 else None
    if not scatter or top_k == 1:  # no finalize but split-k's (init_postprocessing_features)
        return (1, m, n // reduction_n), scratch, 0
    if splits > 1:  # fused_scatter needs split_k == 1 (make_default_opt_flags_nvidia)
        return (1, m // top_k, n), scratch, 0
    return (1, m + m // top_k, n), None, m + m // top_k + m + 1


def routing_held_elements(tokens: int, top_k: int, experts: int) -> tuple[int, int]:
    """``(elements in the logits' dtype, int32 elements)`` the routing keeps through both matmuls."""
    gates = tokens * top_k
    max_tiles = gates if gates <= experts else experts - 1 - ((experts - gates - 1) // 16)

    def pad(x: int) -> int:
        return -(-x // _MEMSET_BLOCK) * _MEMSET_BLOCK

    return gates, 2 * gates + (_BLOCK_M_NUM + 1) * pad(experts + 1) + _BLOCK_M_NUM * pad(max_tiles)


class Mxfp4Experts(nn.Module):
    """``Mxfp4GptOssExperts`` after loading: the packed values and scales as stored, float32 biases."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        e, h, i = int(config.num_local_experts), int(config.hidden_size), int(config.intermediate_size)
        self.num_experts, self.hidden_size, self.intermediate_size = e, h, i

        def held(*shape: int, dtype: torch.dtype = torch.uint8) -> nn.Parameter:
            return nn.Parameter(torch.empty(shape, dtype=dtype, device="meta"), requires_grad=False)

        self.gate_up_proj_blocks = held(e, 2 * i, h // 32, 16)
        self.gate_up_proj_scales = held(e, 2 * i, h // 32)
        self.gate_up_proj_bias = held(e, 2 * i, dtype=torch.float32)
        self.down_proj_blocks = held(e, h, i // 32, 16)
        self.down_proj_scales = held(e, h, i // 32)
        self.down_proj_bias = held(e, h, dtype=torch.float32)


class Mxfp4MLP(nn.Module):
    """``Mxfp4GptOssMLP``: the router's linear runs as is; routing and the two ``matmul_ogs`` calls allocate what
    their source does (module docstring)."""

    def __init__(self, router: nn.Module, config: Any, sms: int | None = None) -> None:
        super().__init__()
        self.router, self.experts, self.sms = router, Mxfp4Experts(config), sms
        self.top_k = int(config.num_experts_per_tok)

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch_size = hidden_states.shape[0]
        x = hidden_states.reshape(-1, self.experts.hidden_size)
        weight, bias = self.router.weight, self.router.bias
        assert isinstance(weight, torch.Tensor) and (bias is None or isinstance(bias, torch.Tensor))
        router_logits = nn.functional.linear(x, weight, bias)
        routed_out = self.routed(x, router_logits)
        return routed_out.reshape(batch_size, -1, self.experts.hidden_size), router_logits

    def routed(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        """``routing(router_logits, top_k)`` and ``Mxfp4GptOssExperts.forward_routed``'s two ``matmul_ogs`` calls."""
        e, h, i = self.experts.num_experts, self.experts.hidden_size, self.experts.intermediate_size
        tokens = x.shape[0]
        scaled, indices = routing_held_elements(tokens, self.top_k, e)
        gate_scal = router_logits.new_empty((scaled,))
        routing_indices = x.new_empty((indices,), dtype=torch.int32)
        gates = tokens * self.top_k
        out_shape, scratch_shape, _ = call_buffers(gates, 2 * i, h, e, top_k=self.top_k, scatter=False, reduction_n=2,
                                                   sms=self.sms)
        intermediate = x.new_empty(out_shape)  # intermediate_cache1
        scratch = None if scratch_shape is None else x.new_empty(scratch_shape, dtype=torch.float32)
        del scratch
        out_shape, scratch_shape, scatter_indices = call_buffers(gates, h, i, e, top_k=self.top_k, scatter=True, sms=self.sms)
        out = x.new_empty(out_shape)  # intermediate_cache3: its first T rows are the result
        scratch = None if scratch_shape is None else x.new_empty(scratch_shape, dtype=torch.float32)
        writeback = x.new_empty((scatter_indices,), dtype=torch.int32)  # writeback_idxs, finalize_scatter_idxs
        del scratch, writeback, intermediate, gate_scal, routing_indices
        return out[0, :tokens, :]


def swap_mlps(model: nn.Module, quantization_config: dict[str, Any], sms: int | None = None) -> int:
    """Replace ``model``'s ``GptOssMLP`` layers (on meta) as ``replace_with_mxfp4_linear`` does; how many."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP
    from transformers.quantizers.quantizers_utils import should_convert_module

    config = getattr(model, "config", None)
    text = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    skip = list(quantization_config.get("modules_to_not_convert") or ()) or None
    swapped = 0
    for name, module in list(model.named_modules()):
        if isinstance(module, GptOssMLP) and should_convert_module(f"{name}.experts", skip):
            model.set_submodule(name, Mxfp4MLP(module.router, text, sms=sms))
            swapped += 1
    return swapped
