"""The widths vLLM's kernels see in each decoder layer, read from the model transformers builds on meta.

vLLM runs its own model classes, but their tensors have the shapes of the checkpoint's: the attention's
output projection takes ``heads x head_dim`` (its ``in_features``), a dense MLP's gate and up
projections (merged by vLLM into one ``gate_up_proj``) make ``intermediate`` each, a mixture of
experts has ``num_experts`` fused ``gate_up`` / ``down`` matrices of ``moe_intermediate`` and,
where the model has them, shared experts that run as a dense MLP beside them. These are read from the
parameters themselves, so every architecture transformers builds is read the same way.

A recurrent mixer (Mamba, Mamba2, gated DeltaNet, short convolution: the layer's ``mamba``, ``mixer``,
``linear_attn`` or ``conv`` child) is read by its input projections' total width (``in_proj``,
``in_proj_qkvz`` + ``in_proj_ba``) and its output projection's input (``mixer_in``, ``mixer_out``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from estimator.errors import UnsupportedError

__all__ = ["LayerShape", "ModelShape", "model_shape"]

_TOPK_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk", "top_k")


@dataclass(frozen=True)
class LayerShape:
    """One decoder layer: attention output width, and its feed-forward (dense, or experts + shared)."""

    attn_out: int  # attention heads x value head dim (the output projection's input)
    intermediate: int  # dense MLP width; 0 for a mixture of experts without a dense part
    gated: bool  # gate and up (SiluAndMul / GeluAndMul) or one up projection
    experts: int = 0
    topk: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0  # shared experts' total width (0: none)
    mixer_in: int = 0  # a recurrent mixer's input projections' width (0: none)
    mixer_out: int = 0  # its output projection's input width


@dataclass(frozen=True)
class VisionShape:
    """An image-text-to-text model's vision encoder (a ViT: SigLIP, CLIP) as vLLM's dummy encoder run feeds it."""

    hidden: int
    intermediate: int
    layers: int
    image_size: int
    patch_size: int
    channels: int
    tokens_per_image: int  # the language model's placeholders one image takes (its encoder output rows)

    @property
    def patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    vocab: int
    layers: tuple[LayerShape, ...]
    kv_lora_rank: int | None  # multi-head latent attention
    vision: VisionShape | None = None


def _is_proj(module: nn.Module) -> bool:
    """A projection: ``nn.Linear``, or transformers' ``Conv1D`` (GPT-2's, its weight stored in x out)."""
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def _dims(module: nn.Module) -> tuple[int, int]:
    """``(in, out)`` of a projection."""
    weight: Any = module.weight
    if isinstance(module, nn.Linear):
        return int(module.in_features), int(module.out_features)
    return int(weight.shape[0]), int(weight.shape[1])


def _linear_out(module: nn.Module, names: tuple[str, ...]) -> int | None:
    for name in names:
        sub = getattr(module, name, None)
        if sub is not None and _is_proj(sub):
            return _dims(sub)[1]
    return None


def _dense(mlp: nn.Module) -> tuple[int, bool]:
    up = _linear_out(mlp, ("up_proj", "w3", "c_fc2"))
    if up is not None:
        return up, True
    merged = _linear_out(mlp, ("gate_up_proj", "input_linear"))  # GraniteMoe's shared MLP: input_linear is gate and up
    if merged is not None:
        return merged // 2, True
    for child in mlp.modules():  # fc1 / c_fc / dense_h_to_4h / w1: the first projection
        if _is_proj(child):
            return _dims(child)[1], False
    raise UnsupportedError(f"{type(mlp).__name__}: no projection found to size its activations.")


def _attn_out(attn: nn.Module) -> int:
    projections = [m for m in attn.modules() if _is_proj(m)]
    if not projections:
        raise UnsupportedError(f"{type(attn).__name__}: no projection found to size its output.")
    for name in ("o_proj", "dense", "out_proj", "c_proj", "wo"):
        sub = getattr(attn, name, None)
        if sub is not None and _is_proj(sub):
            return _dims(sub)[0]
    return _dims(projections[-1])[0]


_MIXERS = ("mamba", "mixer", "linear_attn", "conv")


def _children(layer: nn.Module) -> tuple[nn.Module | None, nn.Module | None, nn.Module | None]:
    named = [(n.lower(), c) for n, c in layer.named_children() if "norm" not in n.lower()]
    mixer = next((c for n, c in named if n in _MIXERS), None)
    attn = next((c for n, c in named if n not in _MIXERS and ("attn" in n or "attention" in n)), None)
    mlp = next((c for n, c in named if n in ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn")), None)
    if (attn is None and mixer is None) or (mlp is None and mixer is None):
        raise UnsupportedError(f"{type(layer).__name__}: its attention and feed-forward blocks are not named as vLLM's models are.")
    return attn, mixer, mlp


def _mixer(mixer: nn.Module | None) -> tuple[int, int]:
    if mixer is None:
        return 0, 0
    inputs = [_dims(c)[1] for n, c in mixer.named_children() if n.startswith("in_proj") and _is_proj(c)]
    if not inputs:
        raise UnsupportedError(f"{type(mixer).__name__}: no input projection (in_proj) found to size its activations.")
    return sum(inputs), _attn_out(mixer)


def _layer(layer: nn.Module, text: Any, hidden: int) -> LayerShape:
    attn, mixer, mlp = _children(layer)
    attn_out = _attn_out(attn) if attn is not None else 0
    mixer_in, mixer_out = _mixer(mixer)
    if mlp is None:  # Mamba / Mamba2 blocks: the mixer only
        return LayerShape(attn_out, 0, False, mixer_in=mixer_in, mixer_out=mixer_out)
    experts = getattr(mlp, "experts", None)
    if experts is None:
        intermediate, gated = _dense(mlp)
        return LayerShape(attn_out, intermediate, gated, mixer_in=mixer_in, mixer_out=mixer_out)
    fused = [p for p in experts.parameters(recurse=False) if p.dim() == 3]
    if fused:
        num = int(fused[0].shape[0])
        down = getattr(experts, "down_proj", None)
        dims = [int(d) for d in (down.shape[1:] if down is not None else fused[0].shape[1:])]
        moe_i = dims[0] if dims[1] == hidden else dims[1]
    elif isinstance(experts, nn.ModuleList) and len(experts):
        num = len(experts)
        moe_i, _ = _dense(experts[0])
    else:
        raise UnsupportedError(f"{type(mlp).__name__}: its experts are not laid out as fused or listed modules.")
    topk = next((int(getattr(text, k)) for k in _TOPK_KEYS if isinstance(getattr(text, k, None), int)), 0)
    if not topk:
        raise UnsupportedError(f"{type(text).__name__} names no experts per token (num_experts_per_tok).")
    shared = next((c for n, c in mlp.named_children() if "shared" in n and not n.endswith("gate")), None)
    if shared is None:  # GraniteMoeHybrid: the shared MLP beside the experts block
        shared = next((c for n, c in layer.named_children() if n.startswith("shared")), None)
    shared_i = _dense(shared)[0] if shared is not None else 0
    return LayerShape(attn_out, 0, True, num, topk, moe_i, shared_i, mixer_in, mixer_out)


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    language = next((m for n, m in model.named_modules() if n.endswith("language_model")), None)
    best: nn.ModuleList | None = None
    for _, module in (language or model).named_modules():
        if (isinstance(module, nn.ModuleList) and len(module) and (best is None or len(module) > len(best))
                and any(_is_proj(m) for m in module[0].modules())):
            best = module
    if best is None:
        raise UnsupportedError(f"{type(model).__name__}: no stack of decoder layers found.")
    return best


def model_shape(model: nn.Module) -> ModelShape:
    """The per-layer widths of ``model`` (a causal LM built on meta)."""
    config: Any = model.config
    text = config.get_text_config(decoder=True)
    hidden = int(text.hidden_size)
    vocab = int(text.vocab_size)
    layers = tuple(_layer(layer, text, hidden) for layer in _decoder_layers(model))
    kv_lora = getattr(text, "kv_lora_rank", None)
    return ModelShape(hidden, vocab, layers, int(kv_lora) if isinstance(kv_lora, int) else None, _vision(config))


def _vision(config: Any) -> VisionShape | None:
    vision = getattr(config, "vision_config", None)
    if vision is None:
        return None
    needed = ("hidden_size", "intermediate_size", "num_hidden_layers", "image_size", "patch_size")
    if not all(isinstance(getattr(vision, k, None), int) for k in needed):
        raise UnsupportedError(f"{type(vision).__name__} is not a ViT the serving plan reads (hidden_size, intermediate_size, "
                               "num_hidden_layers, image_size, patch_size): its encoder profiling is not modelled.")
    patches = (vision.image_size // vision.patch_size) ** 2
    tokens = getattr(config, "mm_tokens_per_image", None) or getattr(config, "image_seq_length", None) or patches
    return VisionShape(int(vision.hidden_size), int(vision.intermediate_size), int(vision.num_hidden_layers), int(vision.image_size),
                       int(vision.patch_size), int(getattr(vision, "num_channels", 3) or 3), int(tokens))
