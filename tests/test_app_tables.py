"""The results table, the method note and the downloads, against a real build of a local config."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from estimator import estimate
from estimator.units import format_bytes
from estimator_app.tables import TRAINING_LABEL, method_note, results_frame, summary_html, write_downloads

FIXTURES = Path(__file__).resolve().parent / "hub_data" / "models"  # the repo's copies of the published configs
GPT2 = FIXTURES / "openai-community" / "gpt2"


@pytest.fixture(scope="module")
def gpt2():
    if not (GPT2 / "config.json").exists():
        pytest.skip("hub fixtures not available")
    return estimate(str(GPT2), dtypes=["float32", "bfloat16", "int4"])


def test_table_shows_the_core_s_bytes_in_binary_units(gpt2) -> None:
    frame = results_frame(gpt2)
    assert list(frame.columns) == ["dtype", "Total size", "Largest layer", TRAINING_LABEL, "method"]
    for (_, line), row in zip(frame.iterrows(), gpt2.rows, strict=True):
        assert line["dtype"] == row.dtype
        assert line["Total size"] == format_bytes(row.total_bytes)
        assert line["Largest layer"] == format_bytes(row.largest_layer_bytes)
        assert line[TRAINING_LABEL] == format_bytes(row.training_adam_bytes)


def test_gpt2_float32_is_its_parameter_count_times_four(gpt2) -> None:
    # independent truth: GPT-2 small has 124,439,808 parameters (tied lm_head); the core counts buffers on top
    assert gpt2.row("float32").total_bytes >= 124_439_808 * 4


def test_downloads_carry_exact_integers(gpt2, tmp_path: Path) -> None:
    csv_path, json_path = write_downloads(gpt2, tmp_path)
    data = json.loads(json_path.read_text())
    assert data == gpt2.to_dict()
    with csv_path.open() as handle:
        lines = list(csv.DictReader(handle))
    assert [int(line["total_bytes"]) for line in lines if line["total_bytes"]] == [
        r.total_bytes for r in gpt2.rows if r.total_bytes is not None
    ]
    assert csv_path.name == "gpt2-memory.csv"


def test_method_note_and_summary(gpt2) -> None:
    note = method_note(gpt2)
    assert "*exact*" in note and "1024³" in note and "activations are not included" in note
    assert f"<strong>{gpt2.model}</strong>" in summary_html(gpt2) and "gpt2" in gpt2.model


def test_the_first_line_states_the_setting_and_per_gpu_figures_say_times_n() -> None:
    from estimator.fit.table import fits_caption
    from estimator.options import Mode
    from estimator.result import Estimate
    from estimator_app.tables import per_gpu_count, setting_words

    def made(mode: str, **options: object) -> Estimate:
        return Estimate(model="org/m", revision=None, library="transformers", architecture=None, source="hub", mode=Mode(mode),
                        options={"mode": mode, "dtypes": ["bfloat16", "int4"], **options}, rows=())

    lora = made("training", batch_size=2, seq_len=512, optimizer="adamw", gradient_checkpointing=True, lora_rank=16, gpu="RTX 4090",
                device="cuda")
    assert setting_words(lora) == "Fine-tune, QLoRA r16 (int4 rows), adamw, gradient checkpointing · bfloat16, int4 · batch 2 × 512 tokens · on RTX 4090"
    zero = made("training", batch_size=1, seq_len=128, optimizer="adamw", gpu="A100 80GB", device="cuda", gpus=8, nodes=2, strategy="zero3")
    assert per_gpu_count(zero) == 16 and setting_words(zero).endswith("on A100 80GB, per GPU (× 16, zero3)")
    served = made("serving", max_model_len=4096, tensor_parallel_size=2, pipeline_parallel_size=2, gpu_memory="24GiB")
    assert setting_words(served) == "Serve with vLLM · bfloat16, int4 · max model length 4,096 · on 24GiB, per GPU (× 4)"
    assert setting_words(made("inference", batch_size=1, seq_len=64, max_new_tokens=8, device="cpu")) == \
        "Run (inference) · bfloat16, int4 · batch 1 × 64 tokens + 8 new · on CPU"
    assert "choose a GPU" in fits_caption("training", allocator=False)
    chosen = fits_caption("training", allocator=False, gpu_chosen=True)
    assert "choose a GPU" not in chosen and "not modelled per GPU under a strategy" in chosen
