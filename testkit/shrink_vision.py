"""Size relations of vision models that the coverage bench's shrinking rule must keep (called by
:func:`testkit.shrink_fit.fit` on every (old, new) sub-config pair after the level-1 shrink). Each was
found by building the small model and running its real forward on CPU by hand:

- **EfficientNet**: the last convolution has ``round_filters(config, 1280)`` channels and the BatchNorm and
  classifier after it read ``hidden_dim``, so ``hidden_dim`` is that rounding of the small config's
  ``width_coefficient`` and ``depth_divisor`` (the default's 2560 is ``round_filters(1280)`` at 2.0), not a
  free width.
- **DepthPro**: ``intermediate_hook_ids`` index the patch encoder's hidden states, so they stay below its
  new depth (duplicates dropped).
- **LW-DETR / RF-DETR**: the default config leaves ``projector_scale_factors`` empty (no feature level: the
  real forward fails on ``torch.cat([])``); every converted checkpoint states ``[1.0]``
  (transformers' conversion scripts: LW-DETR tiny/small/medium, all RF-DETR sizes). Their two-stage
  query selection takes the ``num_queries`` best of the encoder's positions (``topk``), so the queries are
  at most the small image's patches, ``(image_size // patch_size) ** 2``.
- **Per-stage block lists**: a backbone whose ``depths`` count the entries of its per-stage block lists
  (PP-LCNet's ``block_configs``, UVDoc's ``stage_configs`` and ``resnet_configs``) keeps each stage's first
  ``depth`` blocks, so the list and the depth agree (the first block of a stage changes the width; the
  others repeat it).
- **OneFormer**: its transformer module projects the pixel decoder's maps (``conv_dim`` wide) to
  ``hidden_dim`` with convolutions kept in a plain list (not registered: no weights saved) unless the two
  are equal, as in every checkpoint (256 and 256); so ``conv_dim`` and ``mask_dim`` follow ``hidden_dim``
  where they equalled it.
- **UVDoc**: its head concatenates one map per bridge stage (``bridge_connector[0] * len(stage_configs)``
  channels in), so the backbone outputs every stage; the default's ``out_indices`` ``[6]`` (the last
  only) fails the real forward at any size.

Not fixed, and why: PP-OCRv6 small det's default config gives it PP-LCNetV4's text-recognition backbone (strides
``[2, 1]``, one output map of 384 channels) while its neck reads four maps of ``layer_list_out_channels``
(12, 18, 42, 360: PP-LCNetV3 at scale 0.75, as ``sub_configs_defaults`` names it, whose maps are 48 to 384 wide);
neither backbone runs the neck at any size, and the checkpoint's backbone is not derivable from the library.
"""

from __future__ import annotations

from typing import Any

__all__ = ["fit_vision"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def fit_vision(old: dict[str, Any], new: dict[str, Any]) -> None:
    """The relations of the module docstring restored in ``new`` (one sub-config level), in place."""
    _efficientnet(new)
    _depth_pro(new)
    _detr_queries(new)
    _stage_blocks(old, new)
    _uvdoc(new)
    _oneformer(old, new)


def _efficientnet(out: dict[str, Any]) -> None:
    if out.get("model_type") != "efficientnet" or not _is_int(out.get("hidden_dim")):
        return
    divisor: Any = out.get("depth_divisor")
    coefficient: Any = out.get("width_coefficient")
    if not (_is_int(divisor) and isinstance(coefficient, (int, float))):
        return
    channels = 1280 * coefficient  # transformers' efficientnet round_filters(config, 1280)
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    out["hidden_dim"] = int(rounded + divisor if rounded < 0.9 * channels else rounded)


def _depth_pro(out: dict[str, Any]) -> None:
    hooks, patch = out.get("intermediate_hook_ids"), out.get("patch_model_config")
    if not (isinstance(hooks, list) and isinstance(patch, dict) and _is_int(patch.get("num_hidden_layers"))):
        return
    n = patch["num_hidden_layers"]
    kept = list(dict.fromkeys(min(int(h), n - 1) for h in hooks))
    if len(kept) != len(hooks):
        dims = out.get("intermediate_feature_dims")
        if isinstance(dims, list) and len(dims) == len(hooks):
            out["intermediate_feature_dims"] = dims[: len(kept)]
    out["intermediate_hook_ids"] = kept


def _detr_queries(out: dict[str, Any]) -> None:
    if out.get("model_type") not in ("lw_detr", "rf_detr"):
        return
    if "projector_scale_factors" in out and not out["projector_scale_factors"]:
        out["projector_scale_factors"] = [1.0]
        # what the config's __post_init__ derives from them (the saved dict holds the empty default's)
        out["num_feature_levels"] = 1
        if "projector_in_channels" in out and _is_int(out.get("d_model")):
            out["projector_in_channels"] = [out["d_model"]]
    backbone = out.get("backbone_config")
    if isinstance(backbone, dict) and _is_int(backbone.get("image_size")) and _is_int(backbone.get("patch_size")) \
            and _is_int(out.get("num_queries")):
        out["num_queries"] = min(out["num_queries"], (backbone["image_size"] // backbone["patch_size"]) ** 2)


def _stage_blocks(old: dict[str, Any], out: dict[str, Any]) -> None:
    depths, old_depths = out.get("depths"), old.get("depths")
    if not (isinstance(depths, list) and isinstance(old_depths, list) and depths != old_depths):
        return
    for key in ("block_configs", "stage_configs", "resnet_configs"):
        blocks = out.get(key)
        if isinstance(blocks, list) and len(blocks) == len(old_depths) and [len(b) for b in blocks] == list(old_depths):
            out[key] = [list(stage[:depth]) for stage, depth in zip(blocks, depths, strict=True)]


def _uvdoc(out: dict[str, Any]) -> None:
    backbone = out.get("backbone_config")
    if out.get("model_type") != "uvdoc" or not isinstance(backbone, dict) or not isinstance(backbone.get("stage_configs"), list):
        return
    stages = len(backbone["stage_configs"])
    backbone["out_indices"] = list(range(1, stages + 1))
    backbone["out_features"] = [f"stage{i}" for i in range(1, stages + 1)]


def _oneformer(old: dict[str, Any], out: dict[str, Any]) -> None:
    if out.get("model_type") != "oneformer" or not _is_int(out.get("hidden_dim")):
        return
    for key in ("conv_dim", "mask_dim"):
        if _is_int(out.get(key)) and old.get(key) == old.get("hidden_dim"):
            out[key] = out["hidden_dim"]
