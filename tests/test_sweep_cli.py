"""``estimate-memory sweep``'s boundary, without Ray: bad input is refused before any work (exit 2, one line,
what to do), ``estimate-memory MODEL`` is unchanged (a folder named ``sweep`` is still a model as ``./sweep``),
the grid crosses each mode only with its own options, ``--search`` lists the stand-in's models through
``HfApi.list_models``, and the task's limits and Hub retries do what they say."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from estimator.cli import main
from estimator.errors import HubRateLimitedError, ModelNotFoundError
from estimator_sweep.grid import Grid
from estimator_sweep.task import Limits, OverTime, describe, folder_digest, limited, with_retries

ROOT = Path(__file__).resolve().parents[1]
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 256}


@pytest.fixture
def models_file(tmp_path: Path) -> Path:
    path = tmp_path / "models.txt"
    path.write_text("# a comment\ngpt2\n\n")
    return path


@pytest.mark.parametrize(("args", "says"), [
    (["--out", "{out}"], "give the models: --models FILE"),
    (["--models", "{missing}", "--out", "{out}"], "no file"),
    (["--models", "{models}", "--out", "{out}", "--seq-len", "long"], "--seq-len takes whole numbers"),
    (["--models", "{models}", "--out", "{out}", "--gpu", "NoSuchGPU-9000"], "NoSuchGPU-9000"),
    (["--models", "{models}", "--out", "{out}", "--modes", "serving"], "serving"),
    (["--models", "{models}", "--out", "{out}", "--dtypes", "float33"], "--dtypes"),
    (["--models", "{models}", "--out", "{out}", "--task-memory", "lots"], "--task-memory takes a size"),
    (["--models", "{models}", "--out", "{out}", "--gradient-checkpointing", "maybe"], "--gradient-checkpointing takes on and/or off"),
])
def test_bad_input_exits_2_before_any_work(args: list[str], says: str, models_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["sweep", *(a.format(out=out, models=models_file, missing=tmp_path / "nope.txt") for a in args)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and err.startswith("estimate-memory sweep:")
    assert not out.exists(), "nothing is written for a refused sweep"


def test_no_argument_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep"])
    assert exc.value.code == 2 and "--out" in capsys.readouterr().err


def test_a_folder_named_sweep_is_still_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "config.json").write_text(json.dumps(TINY))
    monkeypatch.chdir(tmp_path)
    assert main(["./sweep", "--dtypes", "float32", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["architecture"] == "LlamaForCausalLM" and data["rows"][0]["total_bytes"] > 0


def test_grid_crosses_each_mode_with_its_own_options() -> None:
    grid = Grid(modes=("load", "inference", "training"), batch_sizes=(1, 4), seq_lens=(128,), lora_ranks=(None, 8),
                gradient_checkpointing=(False, True), gpus=("L4", "A100-80GB"))
    scenarios = grid.scenarios()
    load = [s for s in scenarios if s.mode == "load"]
    assert [(s.gpu, s.batch_size) for s in load] == [("L4", None), ("A100-80GB", None)]
    assert len([s for s in scenarios if s.mode == "inference"]) == 2 * 2
    training = [s for s in scenarios if s.mode == "training"]
    assert len(training) == 2 * 2 * 2 * 2 and {s.lora_rank for s in training} == {None, 8}
    assert Grid(modes=("load",)).key() == Grid(modes=("load",)).key() != Grid(modes=("inference",)).key()
    assert grid.estimate_kwargs(training[-1]) == {"library": "auto", "dtypes": None, "mode": "training", "device": "cuda", "batch_size": 4,
                                                  "seq_len": 128, "optimizer": "adamw", "lora_rank": 8, "gradient_checkpointing": True,
                                                  "pure_16bit": False, "gpu": "A100-80GB"}


def test_time_limit_interrupts_and_is_reported_as_limit() -> None:
    started = time.monotonic()
    with pytest.raises(OverTime), limited(Limits(seconds=0.2, memory_bytes=None)):
        time.sleep(5)
    assert time.monotonic() - started < 2
    message, kind = describe(OverTime("Ran past the task's time limit of 0.2 s; give the sweep more --task-timeout."))
    assert kind == "limit" and "--task-timeout" in message


def test_memory_limit_turns_a_huge_allocation_into_a_limit_row() -> None:
    mapped = int(next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmSize:")).split()[1]) * 1024
    limit = mapped + 256 * 2**20
    with pytest.raises(MemoryError), limited(Limits(seconds=0, memory_bytes=limit)):
        assert resource.getrlimit(resource.RLIMIT_AS)[0] <= limit  # applied (or a lower hard limit); so the next line is refused, whatever else is mapped now
        bytearray(limit)  # the whole limit on top of what is already mapped: never fits (other threads may unmap between the
        # two lines, so a fixed size such as 1 GiB can fit once they have)
    assert describe(MemoryError())[1] == "limit"
    bytearray(2**20)  # the limit is lifted afterwards


def test_hub_faults_are_retried_with_backoff_then_raised() -> None:
    calls: list[float] = []
    sleeps: list[float] = []

    def flaky() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise HubRateLimitedError("HTTP 429")
        return "ok"

    assert with_retries(flaky, Limits(hub_retries=4, backoff_s=1.0), sleep=sleeps.append) == "ok"
    assert sleeps == [1.0, 2.0]

    def always() -> str:
        raise HubRateLimitedError("HTTP 429")

    sleeps.clear()
    with pytest.raises(HubRateLimitedError):
        with_retries(always, Limits(hub_retries=2, backoff_s=0.5), sleep=sleeps.append)
    assert sleeps == [0.5, 1.0]

    def missing() -> str:
        raise ModelNotFoundError("no such model")

    sleeps.clear()
    with pytest.raises(ModelNotFoundError):
        with_retries(missing, Limits(hub_retries=4), sleep=sleeps.append)
    assert sleeps == [], "a refusal is not retried"


def test_a_folder_state_follows_its_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    first = folder_digest(tmp_path)
    assert folder_digest(tmp_path) == first and first.startswith("local:")
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "num_hidden_layers": 3}))
    assert folder_digest(tmp_path) != first


def test_search_lists_the_hub_models(hub_client_env: dict[str, str]) -> None:
    code = ("import json; from estimator_sweep.references import from_search; "
            "print(json.dumps([from_search(None, pipeline_tag='text-generation', library=None, sort='downloads', limit=3), "
            "from_search('gguf', pipeline_tag=None, library='gguf', sort='downloads', limit=50)]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=hub_client_env, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    text_generation, gguf = json.loads(done.stdout)
    assert len(text_generation) == 3 and len(set(text_generation)) == 3
    assert gguf and all("gguf" in repo.lower() for repo in gguf)


def test_the_contracts_sweep_flags_exist() -> None:
    import re

    from estimator_sweep.cli import build_parser

    contract = (ROOT / "docs" / "CONTRACT.md").read_text().split("## Sweep", 1)[1]
    flags = {f for line in contract.splitlines() if line.startswith("| `sweep ") for f in re.findall(r"(--[a-z0-9-]+)", line.split("|")[1])}
    known = {opt for action in build_parser()._actions for opt in action.option_strings}
    assert len(flags) >= 25 and flags <= known, flags - known


def test_without_ray_the_sweep_says_what_to_install(models_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as it does where Ray is not installed
    assert main(["sweep", "--models", str(models_file), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs ray: pip install 'model-memory-estimator[sweep]'" in err and "Traceback" not in err
