"""The real CPU peak of small vision models fed :mod:`estimator.peak.inputs.vision.models`' inputs, against the simulation.

Measured as :mod:`testkit.peak_truth` measures (the model built for real on CPU inside
``torch.profiler.profile(profile_memory=True)``, the truth the maximum "Total Allocated" inside the window
of the work; training = two steps of forward, backward, ``torch.optim.AdamW`` step and
``zero_grad(set_to_none=True)``; inference = one ``no_grad`` forward), each measurement in a fresh
forked process. The inputs are the workload's own: what the model's transformers image processor returns
for random images (:func:`estimator.peak.inputs.vision.models.processed`).

``python -m testkit.vision_truth [CASE...]`` prints one JSON line per case and mode: truth, simulation, error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class VisionCase:
    """A small model built from a transformers config, fed ``batch_size`` images of ``image_size`` px."""

    make: Callable[[], nn.Module]  # builds the model under the current default device
    image_size: int | None
    batch_size: int = 1


def _detr() -> nn.Module:
    """DETR with a small transformers ResNet backbone (no timm weights to fetch)."""
    from transformers import DetrConfig, DetrModel, ResNetConfig

    stages: dict[str, Any] = {"out_features": ["stage4"]}
    backbone = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], **stages)
    config = DetrConfig(backbone_config=backbone, d_model=64,
                        encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                        encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=20)
    return DetrModel(config)


def _siglip2_tower() -> nn.Module:
    """A Siglip2 vision tower asked alone (its processor's patches, mask and spatial shapes)."""
    from transformers import Siglip2VisionConfig, Siglip2VisionModel

    config = Siglip2VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 patch_size=16, num_patches=256)
    return Siglip2VisionModel(config)


def _idefics3_tower() -> nn.Module:
    """An Idefics3 vision tower asked alone (its processor's tiles as one batch)."""
    from transformers import Idefics3VisionConfig
    from transformers.models.idefics3.modeling_idefics3 import Idefics3VisionTransformer

    config = Idefics3VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  image_size=64, patch_size=16)
    return Idefics3VisionTransformer(config)


def _video_llama_3_tower() -> nn.Module:
    """A VideoLLaMA3 vision tower asked alone (its processor's flattened patches, grid and merge sizes)."""
    from transformers import VideoLlama3VisionConfig, VideoLlama3VisionModel

    config = VideoLlama3VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     patch_size=16)
    return VideoLlama3VisionModel(config)


def _bench(model_type: str) -> Callable[[], nn.Module]:
    """The coverage bench's small config of ``model_type`` (:func:`testkit.coverage.small_config`), built afresh."""

    def build() -> nn.Module:
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        small, name, _model, _level, reason = _small(model_type)
        if small is None:
            raise ValueError(f"{model_type}: {reason}")
        return getattr(transformers, name)._from_config(CONFIG_MAPPING[model_type].from_dict(dict(small)), dtype=torch.float32)

    return build


def _small(model_type: str) -> Any:
    from testkit.coverage import small_config

    return small_config(model_type)


CASES: dict[str, VisionCase] = {
    "idefics3_tower": VisionCase(_idefics3_tower, image_size=None),
    "video_llama_3_tower": VisionCase(_video_llama_3_tower, image_size=224),
    "detr": VisionCase(_detr, image_size=128),
    **{t: VisionCase(_bench(t), image_size=None) for t in ("hunyuan_vl_vision", "glm_image_vision", "cosmos3_edge_vision",
                                                             "gemma4_vision", "kimi_k25_vision", "lfm3_vl_vision", "muse_spark_vision",
                                                             "mgp-str", "pp_lcnet", "seggpt", "rt_detr", "efficientloftr", "imagegpt", "d_fine")},
    "siglip2_tower": VisionCase(_siglip2_tower, image_size=None),
    # issue 23's newly simulated types (the coverage bench's small configs, testkit/shrink_vision.py): their own
    # processors' inputs at their defaults, or at 128 px where the processor's 800 px would make a slow CPU truth
    **{t: VisionCase(_bench(t), image_size=None) for t in ("videomae", "lw_detr", "rf_detr", "depth_pro", "uvdoc", "efficientnet")},
    **{t: VisionCase(_bench(t), image_size=128) for t in ("oneformer", "mask2former")},
    "grounding-dino": VisionCase(_bench("grounding-dino"), image_size=None),  # 900 queries: fewer proposals than that at 128 px
    "vjepa2": VisionCase(_bench("vjepa2"), image_size=64),  # 64 frames: at its 256 px crop the CPU truth is 8,192 tokens
    "levit_b2": VisionCase(_bench("levit"), image_size=None, batch_size=2),  # BatchNorm1d refuses batch 1 in training
}


def measure(case_name: str, mode: str) -> int:
    """The allocator's peak of ``mode`` on the real model (see the module docstring)."""
    from testkit.peak_truth import measure_workload

    case = CASES[case_name]
    return measure_workload(case.make, mode, batch_size=case.batch_size, image_size=case.image_size).peak_bytes


def simulate(case_name: str, mode: str) -> dict[str, Any]:
    """The simulated CPU peak of the same case and mode."""
    from estimator.peak import simulate_peak

    case = CASES[case_name]
    with torch.device("meta"):
        model = case.make()
    r = simulate_peak(model, mode=mode, device="cpu", batch_size=case.batch_size, image_size=case.image_size)  # type: ignore[arg-type]
    return {"peak_bytes": r.peak_bytes, "components": r.components, "method": r.method, "notes": list(r.notes)}


Job = tuple[str, str, str]  # (truth | sim, case, mode)


def run_jobs(jobs: list[Job], processes: int = 2) -> dict[Job, Any]:
    """Each job in its own fresh process forked from a server that has imported torch and transformers
    (:func:`testkit.peak_pool.run_truth_jobs`)."""
    from testkit.peak_pool import run_truth_jobs

    return run_truth_jobs("testkit.vision_truth", jobs, processes)


if __name__ == "__main__":
    import sys

    names = sys.argv[1:] or list(CASES)
    found = run_jobs([(k, c, m) for c in names for m in ("inference", "training") for k in ("truth", "sim")])
    for c in names:
        for m in ("inference", "training"):
            truth, sim = found[("truth", c, m)], found[("sim", c, m)]
            error = (sim["peak_bytes"] - truth) / truth if isinstance(truth, int) and isinstance(sim, dict) else None
            print(json.dumps({"case": c, "mode": m, "truth": truth, "sim": sim if not isinstance(sim, dict) else sim["peak_bytes"],
                              "method": sim.get("method") if isinstance(sim, dict) else None, "error": error}))
