"""The whole path a user takes: `estimate-memory FOLDER --mode training|inference --device cpu`.

The peak in the CLI's JSON is compared with the CPU allocator's measured peak of the same work
(testkit/peak_truth.py: torch.profiler, fresh process, model built inside the profiled region), for a
GQA Llama (the transformers path) and a timm ResNet (the timm path, ``--image-size``), each given to the CLI as a config
folder as a user would. The CLI's path is the same for every transformers model, so the other cases of
testkit/peak_cases.py (BERT MLM among them) are checked against the same truth through the library by
tests/test_peak_accuracy.py and all of them by ``python -m bench.peak_accuracy`` (README, "Peaks against the CPU allocator").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.cli_each import run_each
from testkit.hub_process import REPO_ROOT

SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 256}
CASES = {
    # peak_cases name: (config.json the CLI reads, CLI options matching the case's workload)
    "llama_gqa": ({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2, **SMALL}, ["--batch-size", "2", "--seq-len", "64"]),
    "timm_resnet18": ({"architecture": "resnet18", "num_classes": 10, "pretrained_cfg": {"input_size": [3, 224, 224]}}, ["--batch-size", "4", "--image-size", "64"]),
}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)


@pytest.mark.parametrize("mode", ["training", "inference"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_peak_within_2_percent_of_the_allocator(case: str, mode: str, tmp_path: Path) -> None:
    config, options = CASES[case]
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours = run("-m", "estimator", str(tmp_path), "--mode", mode, "--device", "cpu", "--dtypes", "float32", "--format", "json", *options)
    assert ours.returncode == 0, ours.stderr
    row = json.loads(ours.stdout)["rows"][0]
    truth = run("-m", "testkit.peak_truth", case, mode)
    assert truth.returncode == 0, truth.stderr
    measured = json.loads(truth.stdout.strip().splitlines()[-1])["peak_bytes"]
    assert row["method"] == "simulated" and sum(row["components"].values()) == row["peak_bytes"]
    assert abs(row["peak_bytes"] - measured) / measured < 0.02, (row["peak_bytes"], measured)


def test_unsimulated_rows_say_why(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CASES["llama_gqa"][0]))
    folder = str(tmp_path)
    result, sgd = run_each((folder, "--mode", "training", "--dtypes", "bfloat16", "int4", "--format", "json"),
                           (folder, "--mode", "training", "--optimizer", "sgd", "--dtypes", "float32", "--format", "json"),
                           env=os.environ)
    assert result.returncode == 0, result.stderr
    bf16, int4 = json.loads(result.stdout)["rows"]
    assert bf16["peak_bytes"] and bf16["method"] == "simulated" and any("torch.autocast(bfloat16)" in n for n in bf16["notes"])
    assert int4["peak_bytes"] is None and any("simulates QLoRA" in n for n in int4["notes"])
    assert sgd.returncode == 0 and "torch.optim.SGD" in sgd.stdout


@pytest.mark.parametrize(
    ("recipe", "options"),
    [("mixed_bf16", ["--dtypes", "bfloat16"]), ("qlora8", ["--dtypes", "int4", "--lora-rank", "8"])],
    ids=["mixed-bfloat16", "qlora-int4"],
)
def test_cli_training_options_within_2_percent_of_the_allocator(recipe: str, options: list[str], tmp_path: Path) -> None:
    # The CLI's rows turn the options into the step (mixed precision for a bfloat16 row; QLoRA for an
    # int4 row with a LoRA rank); testkit.training_truth runs the same step as a user's script, for real.
    (tmp_path / "config.json").write_text(json.dumps(CASES["llama_gqa"][0]))
    ours = run("-m", "estimator", str(tmp_path), "--mode", "training", "--device", "cpu", "--batch-size", "2",
               "--seq-len", "128", "--format", "json", *options)
    assert ours.returncode == 0, ours.stderr
    row = json.loads(ours.stdout)["rows"][0]
    truth = run("-m", "testkit.training_truth", "llama_gqa", recipe)
    assert truth.returncode == 0, truth.stderr
    measured = json.loads(truth.stdout.strip().splitlines()[-1])["peak_bytes"]
    assert row["method"] == "simulated" and sum(row["components"].values()) == row["peak_bytes"]
    assert abs(row["peak_bytes"] - measured) / measured < 0.02, (row["peak_bytes"], measured)
    assert any("trainable parameters" in n for n in row["notes"]) and any("hand-written loop" in n for n in row["notes"])


def test_lora_without_default_targets_asks_for_them(tmp_path: Path) -> None:
    vit = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64, "patch_size": 8}
    (tmp_path / "config.json").write_text(json.dumps(vit))
    folder = str(tmp_path)
    refused, named = run_each((folder, "--mode", "training", "--dtypes", "float32", "--lora-rank", "8"),
                              (folder, "--mode", "training", "--dtypes", "float32", "--lora-rank", "8",
                               "--lora-targets", "q_proj,v_proj", "--format", "json"), env=os.environ)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    line = refused.stderr.strip()
    assert "--lora-targets" in line and "q_proj" in line and "fc1" in line, line
    assert named.returncode == 0, named.stderr
    assert any("LoRA r=8 on q_proj, v_proj" in n for n in json.loads(named.stdout)["rows"][0]["notes"])
