"""A config that the model's own library rejects: one line naming the field and the rule, exit 2.

Each case is first shown to be rejected by the library itself (the real class, built on the CPU,
raises), then asked through the API (``MalformedConfigError``, an ``InputError``) and the CLI (one
line on stderr, exit status 2, no "Internal error").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from estimator import estimate
from estimator.errors import InputError, MalformedConfigError

ROOT = Path(__file__).resolve().parent.parent

WHISPER = {  # Whisper's default pad_token_id (50256) kept while the vocabulary is shrunk to 1000
    "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"], "d_model": 64, "encoder_layers": 1,
    "decoder_layers": 1, "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128, "vocab_size": 1000, "pad_token_id": 50256, "num_mel_bins": 80,
}
LLAMA_TEXT_IN_VLM = {  # a VLM whose text_config's pad_token_id is past its vocabulary
    "model_type": "llava", "architectures": ["LlavaForConditionalGeneration"], "image_token_index": 10,
    "text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "pad_token_id": 100},
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                      "num_attention_heads": 2, "image_size": 32, "patch_size": 16, "projection_dim": 32},
}
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "whisper-pad-outside-vocab": (WHISPER, r"pad_token_id is 50256, outside the vocabulary: it must be below vocab_size \(1000\)"),
    "vlm-text-pad-outside-vocab": (LLAMA_TEXT_IN_VLM, r"text_config\.pad_token_id is 100, outside the vocabulary: it must be below text_config\.vocab_size \(100\)"),
}


def folder(tmp_path: Path, config: dict[str, Any]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def library_rejects(config: dict[str, Any]) -> bool:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = getattr(transformers, config["architectures"][0])
    try:
        cls._from_config(CONFIG_MAPPING[config["model_type"]].from_dict(dict(config)))
    except Exception:  # noqa: BLE001 - any refusal by the library is what this checks
        return True
    return False


@pytest.mark.parametrize("case", sorted(CASES))
def test_library_rejects_it_and_the_api_names_the_field(case: str, tmp_path: Path) -> None:
    config, message = CASES[case]
    assert library_rejects(config)
    for mode in ("load", "inference"):
        with pytest.raises(MalformedConfigError, match=message) as caught:
            estimate(str(folder(tmp_path, config)), mode=mode, dtypes=["float32"])
        assert isinstance(caught.value, InputError) and caught.value.exit_code == 2


def test_the_cli_says_one_line_and_exits_2(tmp_path: Path) -> None:
    config, message = CASES["whisper-pad-outside-vocab"]
    done = subprocess.run([sys.executable, "-m", "estimator", str(folder(tmp_path, config))], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Internal error" not in lines[0] and "Traceback" not in done.stderr
    assert "pad_token_id is 50256" in lines[0] and "vocab_size (1000)" in lines[0]


QWEN25_VL = {  # head_dim 16, and no mrope_section: the modeling code's default [16, 24, 24] fits head_dim 128 only
    "model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"], "image_token_id": 1000,
    "video_token_id": 1001, "vision_start_token_id": 1002,
    "text_config": {"model_type": "qwen2_5_vl_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "vision_config": {"model_type": "qwen2_5_vl", "depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                      "out_hidden_size": 64, "fullatt_block_indexes": [0]},
}


def test_mrope_sections_that_do_not_fit_the_head_dim_are_refused(tmp_path: Path) -> None:
    """Qwen2.5-VL's text rotary splits head_dim / 2 frequencies into mrope_section parts: the real
    model fails in its first forward on the CPU, and the estimator says which field and rule."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    real = transformers.Qwen2_5_VLForConditionalGeneration._from_config(CONFIG_MAPPING["qwen2_5_vl"].from_dict(dict(QWEN25_VL)))
    with pytest.raises(RuntimeError, match="split_with_sizes"):
        real(input_ids=torch.zeros(1, 8, dtype=torch.long))
    for mode in ("inference", "training"):
        with pytest.raises(MalformedConfigError, match=r"states no mrope_section, so the modeling code uses \[16, 24, 24\], "
                                                       r"which adds up to 64; the sections must add up to head_dim / 2 = 8"):
            estimate(str(folder(tmp_path, QWEN25_VL)), mode=mode, dtypes=["float32"])
    fitted = {**QWEN25_VL, "text_config": {**QWEN25_VL["text_config"], "rope_parameters": {
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}}}
    assert estimate(str(folder(tmp_path, fitted)), mode="inference", dtypes=["float32"]).row("float32").method == "simulated"


def test_per_stage_size_lists_are_read_not_refused(tmp_path: Path) -> None:
    """CvT states embed_dim and num_heads per stage: a list of whole numbers is a size, as the
    library reads it (the load row equals the real build's bytes); a list holding text is refused."""
    import torch

    from testkit.truth import storage_bytes

    cvt = {"model_type": "cvt", "architectures": ["CvtForImageClassification"], "embed_dim": [16, 32, 64], "num_heads": [1, 2, 4],
           "depth": [1, 2, 3], "num_labels": 10}  # depth[i] > i: CvtStage indexes its drop-path rates by stage
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    real = transformers.CvtForImageClassification._from_config(CONFIG_MAPPING["cvt"].from_dict(dict(cvt)), dtype=torch.float32)
    assert estimate(str(folder(tmp_path, cvt)), dtypes=["float32"]).row("float32").total_bytes == storage_bytes(real)
    with pytest.raises(MalformedConfigError, match=r"embed_dim = \[16, 'big'\]; it must be a whole number \(or a list"):
        estimate(str(folder(tmp_path, {**cvt, "embed_dim": [16, "big"]})), dtypes=["float32"])


def test_a_field_the_training_step_reads_and_the_config_lacks_is_named(tmp_path: Path) -> None:
    """transformers 5's default T5 config has no decoder_start_token_id (T5's checkpoints state 0); a
    training step shifts the labels right with it, so the real step fails: the field is named."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    t5 = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 64, "d_ff": 128, "d_kv": 16,
          "num_layers": 1, "num_heads": 4, "vocab_size": 1000}
    real = transformers.T5ForConditionalGeneration._from_config(CONFIG_MAPPING["t5"].from_dict(dict(t5)))
    ids = torch.zeros(1, 8, dtype=torch.long)
    with pytest.raises(AttributeError, match="decoder_start_token_id"):
        real(input_ids=ids, labels=ids)
    with pytest.raises(MalformedConfigError, match="The config has no decoder_start_token_id, which T5ForConditionalGeneration's "
                                                   "training step reads"):
        estimate(str(folder(tmp_path, t5)), mode="training", dtypes=["float32"])
    assert estimate(str(folder(tmp_path, t5)), mode="inference", dtypes=["float32"]).row("float32").method == "simulated"
    fixed = {**t5, "decoder_start_token_id": 0}
    assert estimate(str(folder(tmp_path, fixed)), mode="training", dtypes=["float32"]).row("float32").method == "simulated"


def test_a_whole_number_written_as_a_float_is_read_as_its_library_reads_it(tmp_path: Path) -> None:
    """transformers' own MusicFlamingo default states max_position_embeddings = 1200.0 and its config
    class (as Whisper's) takes it: the estimator reads it too (the load row equals a real build's bytes);
    1200.5 is refused."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from testkit.truth import storage_bytes

    whisper = {**WHISPER, "pad_token_id": 999, "max_position_embeddings": 1200.0}  # WhisperConfig takes the float as given
    real = transformers.WhisperForConditionalGeneration._from_config(CONFIG_MAPPING["whisper"].from_dict(dict(whisper)), dtype=torch.float32)
    assert estimate(str(folder(tmp_path, whisper)), dtypes=["float32"]).row("float32").total_bytes == storage_bytes(real)
    with pytest.raises(MalformedConfigError, match=r"max_position_embeddings = 1200.5; it must be a whole number"):
        estimate(str(folder(tmp_path, {**whisper, "max_position_embeddings": 1200.5})), dtypes=["float32"])
