"""Per-request state of recurrent layers (Mamba, Mamba2, gated DeltaNet, short convolutions) as vLLM 0.19 keeps it.

vLLM gives every recurrent layer a ``MambaSpec`` (``vllm/v1/kv_cache_interface.py``): a block holds
one request's whole state, ``page_size_bytes = sum(prod(shape) x dtype size)`` over the layer's state
tensors. The shapes are ``MambaStateShapeCalculator``'s (``vllm/model_executor/layers/mamba/mamba_utils.py``),
per tensor-parallel rank, from the model class's ``get_mamba_state_shape_from_config``:

- Mamba-1 (Mamba, FalconMamba, Jamba): conv ``(conv_kernel - 1, intermediate / tp)``, SSM
  ``(intermediate / tp, state_size)``;
- Mamba2 (Mamba2, Bamba, Falcon-H1, GraniteMoeHybrid, NemotronH): ``n_groups`` raised to a multiple of
  ``tp`` where it does not divide (``extra_groups_for_head_shards``), conv ``(conv_kernel - 1,
  (intermediate + 2 n_groups state_size) / tp)``, SSM ``(heads / tp, head_dim, state_size)``;
- gated DeltaNet (Qwen3-Next, Qwen3.5): conv ``(conv_kernel - 1, (2 k_heads k_dim + v_heads v_dim) / tp)``,
  recurrent ``(v_heads / tp, v_dim, k_dim)``;
- short convolution (LFM2): conv ``(L_cache - 1, hidden / tp)`` only.

Dtypes are ``MambaStateDtypeCalculator``'s: the conv state in the model's dtype (``mamba_cache_dtype``
"auto"; not ``--kv-cache-dtype``), the SSM state in the conv state's dtype unless
``mamba_ssm_cache_dtype`` says otherwise (vLLM's default "auto"; per-model config rules: NemotronH the config's
``mamba_ssm_cache_dtype``, else float16; Qwen3.5 the text config's ``mamba_ssm_dtype``, float32 in its checkpoints). transformers' own caches hold the same widths with the whole
kernel (``conv_kernel`` positions, not ``conv_kernel - 1``); tests/test_serving_states.py checks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

from estimator.errors import UnsupportedError

__all__ = ["StateShapes", "state_shapes"]

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class StateShapes:
    """One recurrent layer's state tensors per request (one rank), and their bytes."""

    kind: str  # mamba1, mamba2, gated_delta_net, short_conv
    conv: tuple[int, ...]
    ssm: tuple[int, ...] | None
    conv_bytes: int  # bytes per value of the conv state
    ssm_bytes: int

    @property
    def conv_state_bytes(self) -> int:
        return prod(self.conv) * self.conv_bytes

    @property
    def ssm_state_bytes(self) -> int:
        return prod(self.ssm) * self.ssm_bytes if self.ssm else 0

    @property
    def page_bytes(self) -> int:
        """vLLM's ``MambaSpec.page_size_bytes`` before padding."""
        return self.conv_state_bytes + self.ssm_state_bytes


def _div(a: int, tp: int, what: str) -> int:
    if a % tp:
        raise UnsupportedError(f"{what} ({a}) is not divisible by tensor_parallel_size {tp}; vLLM refuses it too.")
    return a // tp


def _get(config: Any, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise UnsupportedError(f"{type(config).__name__} names none of {', '.join(names)}: its recurrent state cannot be sized.")


def _mamba2(config: Any, tp: int, intermediate: int, n_groups: int, heads: int, head_dim: int, state: int,
            kernel: int, model_bytes: int, ssm_bytes: int) -> StateShapes:
    if n_groups % tp:
        n_groups += tp - n_groups  # extra_groups_for_head_shards (n_groups 1: tp)
    conv_dim = intermediate + 2 * n_groups * state
    return StateShapes("mamba2", (kernel - 1, _div(conv_dim, tp, "the conv width")),
                       (_div(heads, tp, "the SSM heads"), head_dim, state), model_bytes, ssm_bytes)


def state_shapes(config: Any, *, model_bytes: int, tp: int = 1) -> StateShapes:
    """The per-request state of one recurrent layer of ``config`` (a decoder text config) on one of ``tp`` ranks."""
    kind = getattr(config, "model_type", "")
    ssm_bytes = model_bytes
    hidden = _get(config, "hidden_size")
    if kind in ("mamba", "falcon_mamba", "jamba"):
        if kind == "jamba":
            inter, state, kernel = int(config.mamba_expand) * hidden, _get(config, "mamba_d_state"), _get(config, "mamba_d_conv")
        else:
            inter, state, kernel = _get(config, "intermediate_size"), _get(config, "state_size"), _get(config, "conv_kernel")
        d = _div(inter, tp, "the Mamba width")
        return StateShapes("mamba1", (kernel - 1, d), (d, state), model_bytes, ssm_bytes)
    if kind == "mamba2":
        return _mamba2(config, tp, int(config.expand * hidden), _get(config, "n_groups"), _get(config, "num_heads"),
                       _get(config, "head_dim"), _get(config, "state_size"), _get(config, "conv_kernel"), model_bytes, ssm_bytes)
    if kind in ("bamba", "granitemoehybrid", "falcon_h1"):
        d_ssm = getattr(config, "mamba_d_ssm", None) if kind == "falcon_h1" else None
        inter = int(d_ssm) if d_ssm else int(config.mamba_expand * hidden)
        return _mamba2(config, tp, inter, _get(config, "mamba_n_groups"), _get(config, "mamba_n_heads"),
                       _get(config, "mamba_d_head"), _get(config, "mamba_d_state"), _get(config, "mamba_d_conv"),
                       model_bytes, ssm_bytes)
    if kind == "nemotron_h":
        ssm_bytes = _DTYPE_BYTES[str(getattr(config, "mamba_ssm_cache_dtype", None) or "float16")]
        heads, head_dim = _get(config, "mamba_num_heads"), _get(config, "mamba_head_dim")
        return _mamba2(config, tp, heads * head_dim, _get(config, "n_groups"), heads, head_dim,
                       _get(config, "ssm_state_size"), _get(config, "conv_kernel"), model_bytes, ssm_bytes)
    if kind in ("qwen3_5_text", "qwen3_5_moe_text"):  # Qwen3_5ForConditionalGenerationConfig: the config's mamba_ssm_dtype
        ssm_bytes = _DTYPE_BYTES.get(str(getattr(config, "mamba_ssm_dtype", None)), model_bytes)
    if kind in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):
        kh, vh = _get(config, "linear_num_key_heads"), _get(config, "linear_num_value_heads")
        kd, vd = _get(config, "linear_key_head_dim"), _get(config, "linear_value_head_dim")
        conv_dim = 2 * kh * kd + vh * vd
        return StateShapes("gated_delta_net", (_get(config, "linear_conv_kernel_dim") - 1, _div(conv_dim, tp, "the conv width")),
                           (_div(vh, tp, "the value heads"), vd, kd), model_bytes, ssm_bytes)
    if kind in ("lfm2", "lfm2_moe"):
        return StateShapes("short_conv", (_get(config, "conv_L_cache") - 1, _div(hidden, tp, "the hidden size")), None,
                           model_bytes, ssm_bytes)
    raise UnsupportedError(f"{type(config).__name__} has recurrent layers whose vLLM state is not planned yet "
                           "(planned: Mamba, FalconMamba, Mamba2, Jamba, Bamba, Falcon-H1, GraniteMoeHybrid, NemotronH, "
                           "Qwen3-Next, Qwen3.5, LFM2)")
