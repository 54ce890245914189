"""The command line as a user meets it: a real subprocess, stdout, stderr and exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.cli_each import run_each

ROOT = Path(__file__).resolve().parent.parent
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False,
         "torch_dtype": "bfloat16"}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")  # no network at all
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "estimator", *args], capture_output=True, text=True, cwd=ROOT, env=environment, timeout=300)


def write(folder: Path, config: object, name: str = "config.json") -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(config if isinstance(config, str) else json.dumps(config))
    return str(folder)


def test_local_folder_json_with_no_network(tmp_path: Path) -> None:
    result = run(write(tmp_path / "m", LLAMA), "--format", "json", "--dtypes", "float32,bfloat16", "int4")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "estimator/v1" and data["source"] == "local" and data["library"] == "transformers"
    assert data["architecture"] == "LlamaForCausalLM" and data["mode"] == "load"
    assert [r["dtype"] for r in data["rows"]] == ["float32", "bfloat16", "int4"]
    fp32, bf16, int4 = data["rows"]
    assert fp32["total_bytes"] > bf16["total_bytes"] > 0 and fp32["method"] == "exact"
    assert 0 < int4["total_bytes"] < bf16["total_bytes"] and int4["training_adam_bytes"] is None and int4["notes"]
    assert set(fp32) == {"dtype", "total_bytes", "largest_layer_bytes", "training_adam_bytes", "accelerate_training_bytes", "peak_bytes",
                         "components", "runtime_overhead", "method", "notes", "fit", "cpu_bytes", "outputs_kept_bytes", "weights_held"}
    assert fp32["peak_bytes"] is None and fp32["components"] == {}


def test_table_csv_markdown(tmp_path: Path) -> None:
    folder = write(tmp_path / "m", LLAMA)
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")  # no network at all
    table, csv, markdown = run_each((folder, "--dtypes", "float32"), (folder, "--format", "csv", "--dtypes", "float32"),
                                    (folder, "--format", "markdown", "--dtypes", "float32"), env=environment)
    assert table.returncode == 0 and "Largest Layer" in table.stdout and "Total Size" in table.stdout and "MiB" in table.stdout
    assert "besides activations" in table.stdout
    assert csv.returncode == 0 and csv.stdout.splitlines()[0].startswith("dtype,largest_layer_bytes,total_bytes,training_adam_bytes")
    assert markdown.returncode == 0 and "| dtype |" in markdown.stdout and "|---|" in markdown.stdout


@pytest.mark.parametrize(
    ("config", "args", "status", "message"),
    [
        ({**LLAMA, "num_hidden_layers": 1_000_000_000}, (), 2, "far beyond any real model"),
        ('{"model_type": "llama", ', (), 2, "not valid JSON"),
        ({**LLAMA, "hidden_size": "big"}, (), 2, "whole number"),
        ({**LLAMA, "model_type": "not-a-model"}, (), 2, "does not know model_type"),
        ({**LLAMA, "model_type": "my-custom", "auto_map": {"AutoModel": "modeling.MyModel"}}, (), 2, "--trust-remote-code"),
        (LLAMA, ("--dtypes", "float64"), 2, "--dtypes must be one of"),
        (LLAMA, ("--format", "yaml"), 2, "--format must be one of"),
        (LLAMA, ("--batch-size", "0"), 2, "--batch-size must be between"),
        (LLAMA, ("--gpu", "Voodoo 5"), 2, "is not a GPU we know"),
    ],
    ids=["absurd-size", "bad-json", "wrong-type", "unknown-type", "remote-code", "bad-dtype", "bad-format", "bad-batch", "unknown-gpu"],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, config: object, args: tuple[str, ...], status: int, message: str) -> None:
    started = time.perf_counter()
    result = run(write(tmp_path / "m", config), *args)
    assert result.returncode == status, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr
    if "absurd" in message or message.startswith("far"):
        assert time.perf_counter() - started < 30  # whole process incl. imports; the check itself is timed below


def test_absurd_size_is_refused_before_building() -> None:
    from estimator.errors import AbsurdSizeError
    from estimator.source.limits import check_config

    started = time.perf_counter()
    with pytest.raises(AbsurdSizeError, match="far beyond any real model"):
        check_config({**LLAMA, "num_hidden_layers": 1_000_000_000}, model="m")
    assert time.perf_counter() - started < 0.1


def test_missing_folder_and_folder_without_config(tmp_path: Path) -> None:
    missing = run(str(tmp_path / "nope"))
    assert missing.returncode == 2 and "No such folder" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = run(str(tmp_path / "empty"))
    assert empty.returncode == 2 and "has no config.json" in empty.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = run(write(tmp_path / "m", {**LLAMA, "num_hidden_layers": 10**9}), "--debug")
    assert result.returncode == 2 and "Traceback" in result.stderr


def test_timm_folder(tmp_path: Path) -> None:
    config = {"architecture": "resnet18.a1_in1k", "num_classes": 10, "pretrained_cfg": {"input_size": [3, 224, 224]}}
    result = run(write(tmp_path / "m", config), "--format", "json", "--dtypes", "float32")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["library"] == "timm" and data["architecture"] == "resnet18.a1_in1k"


@pytest.mark.parametrize(("mode", "collects"), [("load", False), ("inference", True), ("training", True)])
def test_the_process_entry_pauses_the_collector_only_for_load_answers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                      mode: str, collects: bool) -> None:
    """``run()`` (estimate-memory, python -m estimator) turns the cyclic collector off; a simulation turns it back on
    (its fake tensors make garbage cycles), a load answer keeps it off (docs/benchmarks.md). Here on a missing folder,
    so the answer is a refusal and no model is built."""
    import gc

    from estimator import cli

    was = gc.isenabled()
    monkeypatch.setattr(cli, "_COLLECTOR_PAUSED", True)
    gc.disable()
    try:
        status = cli.main([str(tmp_path / "missing"), "--mode", mode])
        assert status == 2
        assert gc.isenabled() is collects
    finally:
        gc.enable() if was else gc.disable()


def test_main_alone_leaves_the_collector_as_its_caller_set_it(tmp_path: Path) -> None:
    """A program that calls ``main()`` with its own collector off keeps it off, simulation or not."""
    import gc

    from estimator import cli

    assert not cli._COLLECTOR_PAUSED
    gc.disable()
    try:
        assert cli.main([str(tmp_path / "missing"), "--mode", "inference"]) == 2
        assert not gc.isenabled()
    finally:
        gc.enable()
