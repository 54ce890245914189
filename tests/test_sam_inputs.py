"""The SAM family's inputs (estimator/peak/inputs/vision/sam.py) and small configs (testkit/shrink_sam.py).

SAM's small config used to fail its real forward (the ViT neck's 256 output channels against a 64-wide
prompt encoder, a prompt encoder at 1024 px against a 64 px tower); the video trackers were fed no session.
Here: the small SAM runs its real forward and backward on the processor's pixel_values and point prompt,
the workload's tensors have the processor's shapes, and a video tracker's training step is refused in one
line (transformers runs it under torch.inference_mode). Peaks against the CPU allocator: testkit/sam_truth.py.
"""

from __future__ import annotations

import pytest
import torch


def test_small_sam_runs_processor_inputs_for_real() -> None:
    from estimator.peak.inputs.providers import workload_for
    from testkit.coverage import small_config

    small, _name, model, level, reason = small_config("sam")
    assert small is not None and level == 1, reason
    vision, prompt = small["vision_config"], small["prompt_encoder_config"]
    assert vision["output_channels"] == prompt["hidden_size"] == small["mask_decoder_config"]["hidden_size"]
    assert prompt["image_embedding_size"] == vision["image_size"] // vision["patch_size"]
    wl = workload_for(model, batch_size=2, image_size=80)
    inputs = wl.make_inputs()
    side = vision["image_size"]
    assert tuple(inputs["pixel_values"].shape) == (2, 3, side, side)
    assert tuple(inputs["input_points"].shape) == (2, 1, 1, 2)
    assert tuple(inputs["input_labels"].shape) == (2, 1, 1)
    assert "pixel_values" in wl.description and "80x80" in wl.description
    wl.train_loss(model.train(), inputs).backward()
    assert all(p.grad is not None for p in model.vision_encoder.parameters() if p.requires_grad)


def test_video_tracker_training_is_refused() -> None:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from estimator.peak import simulate_peak
    from estimator.peak.inputs.vision.sam_video import InferenceOnlyError
    from testkit.coverage import small_config

    small, name, _model, _level, reason = small_config("sam2_video")
    assert small is not None, reason
    with torch.device("meta"):
        model = getattr(transformers, name)._from_config(CONFIG_MAPPING["sam2_video"].from_dict(dict(small)), dtype=torch.float32)
    with pytest.raises(InferenceOnlyError, match="inference_mode"):
        simulate_peak(model, mode="training", device="cpu")
