"""Which workload and inputs each model type gets, against the golden file (nothing simulated).

``tests/data/input_golden.json`` holds, for every model type of transformers' registry, the coverage
bench's class and small config (built on meta), the media a default request asks for, the workload the
engine picks and its inputs' names, shapes and dtypes (:mod:`testkit.input_golden`). Here a fixed sample
of it, one or more per input provider; ``python -m testkit.input_golden --check`` checks all of them
(about a minute), ``--regenerate`` rewrites the file after an intended change.
"""

from __future__ import annotations

import json

import pytest

from testkit.input_golden import GOLDEN, record

SAMPLE = (  # at least one type per input provider and media path
    "gpt2", "bert", "t5", "jamba", "llava", "qwen2_vl", "udop", "glm_image", "whisper", "wav2vec2", "qwen2_audio", "pop2piano",
    "encodec", "kyutai_speech_to_text", "fastspeech2_conformer", "vits", "sam", "sam2_video", "evolla", "pi0", "vit", "timesformer",
    "detr", "mask2former", "depth_pro", "grounding-dino", "clip", "time_series_transformer", "patchtst", "longformer",
    "qwen2_5_vl_vision",
)


@pytest.fixture(scope="module")
def golden() -> dict[str, dict[str, object]]:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("model_type", SAMPLE)
def test_the_workload_and_inputs_are_the_golden_ones(golden: dict[str, dict[str, object]], model_type: str) -> None:
    expected = golden[model_type]
    assert "skipped" not in expected and isinstance(expected.get("inputs"), dict), expected  # the sample is of built types
    assert json.loads(json.dumps(record(model_type))) == expected
