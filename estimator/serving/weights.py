"""The weights one vLLM rank loads ("Model loading took"), from the model built on meta and its config.

Each parameter of the transformers model is counted in the bytes vLLM stores it in and on the ranks
that hold it:

- **Pipeline stages** (``vllm/distributed/utils.py``, ``get_pp_indices``): layers split evenly, the
  remainder going to the stages before the last; the embeddings on the first stage, the final norm and
  ``lm_head`` on the last (a tied ``lm_head`` is a second copy there when the stages differ).
- **Tensor parallelism** (vLLM's ``ColumnParallelLinear`` / ``RowParallelLinear`` / fused MoE): every
  matrix is split over the ranks; norms, routers and row-parallel biases are replicated; the
  embeddings and ``lm_head`` are split by vocabulary rows padded to a multiple of 64
  (``VocabParallelEmbedding``).
- **Quantization as loaded** (``quantization_config`` of the checkpoint, or vLLM's ``--quantization
  fp8`` on a 16-bit one): MXFP4 experts (gpt-oss) are 4-bit values plus one E8M0 scale per 32
  (``Mxfp4MoEMethod``: uint8 ``w13_weight`` / ``w2_weight`` of half the width, uint8 scales of a 32nd),
  laid out as on Hopper's default backend, ``Mxfp4MoeBackend.TRITON`` (:func:`mxfp4_expert_bytes`);
  fp8 and compressed-tensors 8-bit weights one byte plus float32 scales (per tensor, channel or
  128 x 128 block); 4-bit compressed-tensors / GPTQ / AWQ weights half a byte plus a 16-bit scale per
  group. Embeddings, ``lm_head``, norms, routers and the modules the config leaves out stay 16-bit.
- **Buffers vLLM adds**: the rotary ``cos_sin_cache`` (``max_position x rotary_dim`` in the model's
  dtype, shared by the layers), and for multi-head latent attention the absorbed ``W_UK_T`` / ``W_UV``
  that ``MLAAttention.process_weights_after_loading`` derives from ``kv_b_proj`` and keeps beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from torch import nn

from estimator.errors import UnsupportedError

__all__ = ["Quant", "mxfp4_expert_bytes", "pp_layers", "quant_of", "rank_weights"]

_LAYER = re.compile(r"\.(?:layers|h|blocks|block|decoder_layers)\.(\d+)\.")
_ROUTER = re.compile(r"(?:\.mlp\.gate|\.router|shared_expert_gate|\.gate)\.(?:weight|bias|e_score_correction_bias)$")
# vLLM's ReplicatedLinear: MoE routers, and MLA's low-rank down projections (DeepseekV2MLAAttention's q_a_proj and
# kv_a_proj_with_mqa, fused as fused_qkv_a_proj)
_REPLICATED = re.compile(r"(?:q_a_proj|kv_a_proj_with_mqa)\.(?:weight|bias)$")
_ROW_BIAS = re.compile(r"(?:o_proj|dense|down_proj|fc2|c_proj|out_proj|wo)\.bias$")
_EMBED = re.compile(r"(?:embed_tokens|wte|word_embeddings|embed_in|tok_embeddings)\.weight$")
_HEAD = re.compile(r"(?:^|\.)(?:lm_head|embed_out|output)\.weight$")


@dataclass(frozen=True)
class Quant:
    """How a checkpoint's (or ``--quantization``'s) weights are stored by vLLM."""

    method: str  # "none", "mxfp4", "fp8", "int8", "int4"
    group_size: int = 0  # int4: values per 16-bit scale
    block: tuple[int, int] | None = None  # fp8 block scales
    skip: tuple[str, ...] = ()  # module name patterns left in 16-bit

    def bytes_of(self, name: str, numel: int, shape: tuple[int, ...], act_bytes: int) -> float:
        if self.method == "none" or any(s and s in name for s in self.skip):
            return numel * act_bytes
        if self.method == "mxfp4":  # experts: mxfp4_expert_bytes (rank_weights); anything else 16-bit
            return numel * act_bytes
        if self.method in ("fp8", "int8"):
            if self.block:
                rows, cols = shape[-2], shape[-1]
                lead = numel // (rows * cols)
                return numel + lead * -(-rows // self.block[0]) * -(-cols // self.block[1]) * 4
            return numel + (shape[0] if len(shape) == 3 else 1) * 4
        if self.method == "int4":
            return numel * 0.5 + numel / max(self.group_size or shape[-1], 1) * 2
        raise UnsupportedError(f"weights quantized as {self.method!r} are not sized for serving yet.")


def quant_of(config: Any, online: str | None) -> Quant:
    """The :class:`Quant` of a checkpoint's ``quantization_config``, or vLLM's online ``--quantization``."""
    qc = getattr(config, "quantization_config", None)
    if qc is not None and not isinstance(qc, dict):
        qc = qc.to_dict() if hasattr(qc, "to_dict") else vars(qc)
    if qc:
        method = str(qc.get("quant_method", "")).lower()
        skip = tuple(str(s).replace("*", "").strip(".") for s in (qc.get("modules_to_not_convert") or qc.get("ignore")
                                                                 or qc.get("ignored_layers") or []))
        skip = tuple(s.removeprefix("re:") for s in skip)
        if method == "mxfp4":
            return Quant("mxfp4", skip=skip)
        if method == "fp8":
            block = qc.get("weight_block_size")
            return Quant("fp8", block=(int(block[0]), int(block[1])) if block else None, skip=skip)
        if method in ("gptq", "awq"):
            bits = int(qc.get("bits", 4))
            return Quant("int4" if bits == 4 else "int8", group_size=int(qc.get("group_size", 128) or 0), skip=skip)
        if method == "compressed-tensors":
            groups = list((qc.get("config_groups") or {}).values())
            weights = (groups[0] or {}).get("weights") or {} if groups else {}
            bits = int(weights.get("num_bits", 8))
            return Quant("int4" if bits == 4 else "int8", group_size=int(weights.get("group_size") or 0), skip=skip)
        raise UnsupportedError(f"quantization_config {method!r}: vLLM's storage of it is not sized yet (mxfp4, fp8, "
                               "compressed-tensors, gptq and awq are).")
    if online in (None, "", "none"):
        return Quant("none")
    if online == "fp8":
        return Quant("fp8", skip=())
    raise UnsupportedError(f"--quantization {online}: only fp8 (vLLM's online fp8) is sized.")


def _up(x: int, align: int) -> int:
    return -(-x // align) * align


def mxfp4_expert_bytes(name: str, ndim: int, text: Any, tp: int) -> int | None:
    """Bytes of one MoE layer's MXFP4 expert tensor ``name`` on one tensor-parallel rank, as vLLM 0.19 keeps them
    on Hopper (``Mxfp4MoeBackend.TRITON``, the first backend of ``_get_priority_backends`` an sm90 GPU supports);
    ``None`` for a tensor that is not a routed expert's stacked weight (3-D) or bias (2-D).

    - ``mxfp4_round_up_hidden_size_and_intermediate_size``: the Triton backend rounds the intermediate size per
      partition up to a multiple of 64 (gpt-oss-20b at TP2: 1,440 -> 1,472), so ``create_weights`` makes
      ``w13_weight`` ``(E, 2 I_p, H / 2)``, ``w2_weight`` ``(E, H, I_p / 2)`` and their uint8 scales ``(E, 2 I_p,
      H / 32)`` / ``(E, H, I_p / 32)``.
    - ``convert_to_mxfp4_moe_kernel_format`` (TRITON): ``_swizzle_mxfp4`` converts the transposed values to
      triton_kernels' ``HopperMXValueLayout`` (``swizzle_data`` pads both matrix dims to multiples of 64) and the
      transposed scales to ``HopperMXScaleLayout`` (the non-MX dim padded to ``2 x num_warps x 2 x 8`` = 256 at
      vLLM's 8 warps, the MX dim to 2), then deletes ``layer.w13_weight`` / ``w2_weight`` but keeps the original
      ``w13_weight_scale`` / ``w2_weight_scale`` parameters (the swizzled scales live in the precision configs): the
      scales are held twice. The biases become float32 (``w13_bias.to(torch.float32)``), ``w2_bias`` whole
      ``(E, H)`` on every rank. (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py and the triton_kernels copy
      0.19 ships, vllm/third_party/triton_kernels/tensor_details/layout_details/hopper_*.py.)
    """
    if ".experts." not in name or ndim != (2 if name.endswith("bias") else 3):
        return None
    experts = int(getattr(text, "num_local_experts", 0) or getattr(text, "num_experts", 0) or 0)
    hidden, inter = int(text.hidden_size), int(getattr(text, "moe_intermediate_size", None) or text.intermediate_size)
    if not experts:
        return None
    inter_p = _up(inter // tp, 64)
    if "gate_up" in name and name.endswith("bias"):
        return experts * 2 * inter_p * 4
    if "down" in name and name.endswith("bias"):
        return experts * hidden * 4
    if "gate_up" in name:
        values = experts * _up(hidden // 2, 64) * _up(2 * inter_p, 64)
        scales = experts * 2 * inter_p * (hidden // 32)
        swizzled = experts * _up(2 * inter_p, 256) * _up(hidden // 32, 2)
        return values + scales + swizzled
    if "down" in name:
        values = experts * _up(inter_p // 2, 64) * _up(hidden, 64)
        scales = experts * hidden * (inter_p // 32)
        swizzled = experts * _up(hidden, 256) * _up(inter_p // 32, 2)
        return values + scales + swizzled
    return None


def pp_layers(num_layers: int, pp: int) -> list[range]:
    """vLLM's ``get_pp_indices`` for every stage."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    starts = [sum(parts[:i]) for i in range(pp)]
    return [range(s, s + n) for s, n in zip(starts, parts, strict=True)]


# Models whose vLLM class builds its rotary embedding with ``get_rope(..., dtype=torch.float32)``: the cos_sin_cache
# stays float32 (vllm/model_executor/models/gpt_oss.py, minimax_text_01.py, bailing_moe_linear.py in 0.19)
_ROPE_FP32 = frozenset({"gpt_oss", "minimax", "minimax_text_01", "bailing_moe_linear"})


def _rope_bytes(text: Any, act_bytes: int) -> int:
    if not any(getattr(text, key, None) is not None for key in ("rope_parameters", "rope_theta", "rope_scaling", "rotary_dim",
                                                                "rotary_emb_base", "qk_rope_head_dim")):
        return 0  # learned or no position embeddings (GPT-2, OPT, Bloom's ALiBi): no cos_sin_cache
    if getattr(text, "kv_lora_rank", None):
        rot = int(getattr(text, "qk_rope_head_dim", 0) or 0)
    else:
        head = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
        factor = rope.get("partial_rotary_factor", getattr(text, "partial_rotary_factor", 1.0)) if isinstance(rope, dict) else 1.0
        rot = int(head * (factor or 1.0))
    rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    kind = str(rope.get("rope_type", rope.get("type", "default"))) if isinstance(rope, dict) else "default"
    max_pos = int(getattr(text, "max_position_embeddings", 0) or 0)
    if kind in ("yarn", "deepseek_yarn") and isinstance(rope, dict) and rope.get("original_max_position_embeddings"):
        max_pos = int(rope["original_max_position_embeddings"] * float(rope.get("factor", 1.0)))
    return max_pos * rot * (4 if getattr(text, "model_type", "") in _ROPE_FP32 else act_bytes)


def rank_weights(model: nn.Module, *, act_bytes: int, quant: Quant, tp: int = 1, pp: int = 1) -> list[int]:
    """Bytes of weights on one tensor-parallel rank of each pipeline stage (index: stage)."""
    config: Any = model.config
    text = config.get_text_config(decoder=True)
    n_layers = int(text.num_hidden_layers)
    stages = pp_layers(n_layers, pp)
    stage_of = {layer: s for s, r in enumerate(stages) for layer in r}
    vocab_rows = -(-int(text.vocab_size) // 64) * 64 // tp
    totals = [0.0] * pp
    head_seen = False
    for name, param in model.named_parameters():
        shape = tuple(int(d) for d in param.shape)
        numel = param.numel()
        if "vision" in name or "multi_modal" in name:  # the encoder and projector: first stage, matrices split over TP
            totals[0] += numel * act_bytes / (tp if param.dim() >= 2 else 1)
            continue
        match = _LAYER.search(name)
        if _EMBED.search(name) or _HEAD.search(name):
            per_rank = vocab_rows * shape[1] * act_bytes if len(shape) == 2 else numel * act_bytes
            if _HEAD.search(name):
                head_seen = True
                totals[-1] += per_rank
            else:
                totals[0] += per_rank
            continue
        if match is None:  # final norm, lm_head bias: last stage; anything else: first
            totals[-1 if ("norm" in name or "lm_head" in name) else 0] += numel * act_bytes
            continue
        stage = stage_of.get(int(match.group(1)), 0)
        if quant.method == "mxfp4" and not any(s and s in name for s in quant.skip):
            expert = mxfp4_expert_bytes(name, len(shape), text, tp)
            if expert is not None:  # already per rank
                totals[stage] += expert
                continue
        replicated = (param.dim() == 1 and not name.endswith("bias") or _ROUTER.search(name) or _ROW_BIAS.search(name)
                      or _REPLICATED.search(name))
        stored = numel * act_bytes if param.dim() == 1 or _ROUTER.search(name) else quant.bytes_of(name, numel, shape, act_bytes)
        if not replicated:
            stored /= tp
        if name.endswith("kv_b_proj.weight"):  # MLA: the absorbed W_UK_T and W_UV kept beside it
            stored += numel * act_bytes / tp
        totals[stage] += stored
    if not head_seen and (pp > 1 or not getattr(config, "tie_word_embeddings", True)):
        totals[-1] += vocab_rows * int(text.hidden_size) * act_bytes  # a tied lm_head on another stage: its own copy
    rope = _rope_bytes(text, act_bytes)
    return [int(t) + rope for t in totals]
