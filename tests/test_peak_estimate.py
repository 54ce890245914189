"""The whole path a user takes: `estimate-memory FOLDER --mode training|inference --device cpu`.

The peak in the CLI's JSON is compared with the CPU allocator's measured peak of the same work
(testkit/peak_truth.py: torch.profiler, a fresh forked process per case, model built inside the profiled region), for a
GQA Llama (the transformers path) and a timm ResNet (the timm path, ``--image-size``), each given to the CLI as a config
folder as a user would. The CLI's path is the same for every transformers model, so the other cases of
testkit/peak_cases.py (BERT MLM among them) are checked against the same truth through the library by
tests/test_peak_accuracy.py and all of them by ``python -m bench.peak_accuracy`` (README, "Peaks against the CPU allocator").
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.cli_each import Started, start_each
from testkit.peak_pool import run_jobs

SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 256}
CASES = {
    # peak_cases name: (config.json the CLI reads, CLI options matching the case's workload)
    "llama_gqa": ({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2, **SMALL}, ["--batch-size", "2", "--seq-len", "64"]),
    "timm_resnet18": ({"architecture": "resnet18", "num_classes": 10, "pretrained_cfg": {"input_size": [3, 224, 224]}}, ["--batch-size", "4", "--image-size", "64"]),
}


MODES = ["training", "inference"]
RECIPES = {"mixed_bf16": ["--dtypes", "bfloat16"], "qlora8": ["--dtypes", "int4", "--lora-rank", "8"]}


VIT = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 64, "intermediate_size": 128,
       "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64, "patch_size": 8}


def _folder(tmp_path_factory: pytest.TempPathFactory, name: str, config: dict[str, Any]) -> str:
    path = tmp_path_factory.mktemp(name)
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def _peak_argv(folder: str, case: str, mode: str) -> tuple[str, ...]:
    return (folder, "--mode", mode, "--device", "cpu", "--dtypes", "float32", "--format", "json", *CASES[case][1])


def _recipe_argv(folder: str, recipe: str) -> tuple[str, ...]:
    return (folder, "--mode", "training", "--device", "cpu", "--batch-size", "2", "--seq-len", "128", "--format", "json", *RECIPES[recipe])


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[tuple[str, str]], Started]]:
    """The CLI's answer to each question of this module: every ``estimate-memory FOLDER ...`` run in one real
    subprocess (testkit.cli_each, the imports paid once), started here and waited for by :func:`answers`."""
    folders = {case: _folder(tmp_path_factory, case, CASES[case][0]) for case in CASES}
    argvs = {(case, mode): _peak_argv(folders[case], case, mode) for case in sorted(CASES) for mode in MODES}
    llama, vit = folders["llama_gqa"], _folder(tmp_path_factory, "vit", VIT)
    argvs.update({("llama_gqa", recipe): _recipe_argv(llama, recipe) for recipe in RECIPES})
    argvs[("llama_gqa", "bfloat16+int4")] = (llama, "--mode", "training", "--dtypes", "bfloat16", "int4", "--format", "json")
    argvs[("llama_gqa", "sgd")] = (llama, "--mode", "training", "--optimizer", "sgd", "--dtypes", "float32", "--format", "json")
    argvs[("vit", "lora")] = (vit, "--mode", "training", "--dtypes", "float32", "--lora-rank", "8")
    argvs[("vit", "lora-targets")] = (vit, "--mode", "training", "--dtypes", "float32", "--lora-rank", "8", "--lora-targets", "q_proj,v_proj",
                                      "--format", "json")
    answering = start_each(*argvs.values(), env=os.environ, timeout=1200)
    yield list(argvs), answering
    answering.stop()


@pytest.fixture(scope="module")
def answers(started: tuple[list[tuple[str, str]], Started]) -> dict[tuple[str, str], subprocess.CompletedProcess[str]]:
    """``{(model, question): CompletedProcess}`` of the CLI's subprocess."""
    questions, answering = started
    return dict(zip(questions, answering.wait(), strict=True))


@pytest.fixture(scope="module")
def measured(started: tuple[list[tuple[str, str]], Started]) -> dict[tuple[str, str, str], Any]:
    """The allocator's peak of each case's real run, each in its own fresh process (testkit.peak_pool: forked from a
    server that has imported torch and transformers): testkit.peak_truth for the modes, testkit.training_truth for the
    recipes; the CLI's subprocess (``started``) answers meanwhile."""
    jobs = [("truth", case, mode) for case in sorted(CASES) for mode in MODES]
    jobs += [("recipe_truth", "llama_gqa", recipe) for recipe in RECIPES]
    return run_jobs(jobs)


def _row(answer: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert answer.returncode == 0, answer.stderr
    return dict(json.loads(answer.stdout)["rows"][0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_peak_within_2_percent_of_the_allocator(case: str, mode: str, measured: dict[tuple[str, str, str], Any],
                                                    answers: dict[tuple[str, str], Any]) -> None:
    # measured before answers: the pool measures while the CLI's subprocess answers, and then its answers are read
    row = _row(answers[(case, mode)])
    truth = measured[("truth", case, mode)]
    assert isinstance(truth, int), f"ground truth failed: {truth}"
    assert row["method"] == "simulated" and sum(row["components"].values()) == row["peak_bytes"]
    assert abs(row["peak_bytes"] - truth) / truth < 0.02, (row["peak_bytes"], truth)


def test_unsimulated_rows_say_why(answers: dict[tuple[str, str], Any]) -> None:
    result, sgd = answers[("llama_gqa", "bfloat16+int4")], answers[("llama_gqa", "sgd")]
    assert result.returncode == 0, result.stderr
    bf16, int4 = json.loads(result.stdout)["rows"]
    assert bf16["peak_bytes"] and bf16["method"] == "simulated" and any("torch.autocast(bfloat16)" in n for n in bf16["notes"])
    assert int4["peak_bytes"] is None and any("simulates QLoRA" in n for n in int4["notes"])
    assert sgd.returncode == 0 and "torch.optim.SGD" in sgd.stdout


@pytest.mark.parametrize("recipe", list(RECIPES), ids=["mixed-bfloat16", "qlora-int4"])
def test_cli_training_options_within_2_percent_of_the_allocator(recipe: str, measured: dict[tuple[str, str, str], Any],
                                                                answers: dict[tuple[str, str], Any]) -> None:
    # The CLI's rows turn the options into the step (mixed precision for a bfloat16 row; QLoRA for an
    # int4 row with a LoRA rank); testkit.training_truth runs the same step as a user's script, for real.
    row = _row(answers[("llama_gqa", recipe)])
    truth = measured[("recipe_truth", "llama_gqa", recipe)]
    assert isinstance(truth, int), f"ground truth failed: {truth}"
    assert row["method"] == "simulated" and sum(row["components"].values()) == row["peak_bytes"]
    assert abs(row["peak_bytes"] - truth) / truth < 0.02, (row["peak_bytes"], truth)
    assert any("trainable parameters" in n for n in row["notes"]) and any("hand-written loop" in n for n in row["notes"])


def test_lora_without_default_targets_asks_for_them(answers: dict[tuple[str, str], Any]) -> None:
    refused, named = answers[("vit", "lora")], answers[("vit", "lora-targets")]
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    line = refused.stderr.strip()
    assert "--lora-targets" in line and "q_proj" in line and "fc1" in line, line
    assert named.returncode == 0, named.stderr
    assert any("LoRA r=8 on q_proj, v_proj" in n for n in json.loads(named.stdout)["rows"][0]["notes"])
