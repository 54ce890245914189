"""``estimate-memory sweep`` on local Ray against the Hub stand-in: every requested row present,
each row equal to the single answer for the same options, a rerun that recomputes nothing but the
Hub's transient failures, a worker SIGKILLed mid-run losing nothing, and the same command on a
separately started ``ray start --head`` cluster giving the same dataset.

One driver process (``tests/_drive_sweep.py``) runs the local steps in one Ray session, so the
workers import torch once; the cluster test starts its own head. About a minute in all.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from estimator_sweep import Grid
from estimator_sweep.rows import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 256}
HUB_REFS = ["estimator-test/tiny-llama", "estimator-test/tiny-llama-mismatch", "estimator-test/gguf-only", "estimator-test/no-config", "nobody-here/no-such-model",
            "estimator-test/rate-limited"]
GRID = {"modes": ["load", "inference"], "dtypes": ["float32", "bfloat16"], "seq_lens": [64], "gpus": ["L4"]}
# device cpu: at 768 tokens this llama's peak holds the CPU flash-attention kernel's per-thread buffers
CPU_LLAMA = {**TINY_LLAMA, "intermediate_size": 16, "vocab_size": 100, "max_position_embeddings": 4096}
CPU_GRID = {"modes": ["inference", "training"], "dtypes": ["float32"], "seq_lens": [768], "device": "cpu"}
VOLATILE = ("computed_at", "seconds")
SUBSET = ["estimator-test/tiny-llama", "estimator-test/gguf-only", "estimator-test/no-config"]  # the kill and cluster runs (and the local folder)


@pytest.fixture(scope="module")
def local_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models") / "tiny-local-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    return folder


@pytest.fixture(scope="module")
def driven(hub_server: str, local_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from testkit.hub_process import hub_env

    out = tmp_path_factory.mktemp("sweep")
    cpu_model = out / "tiny-cpu-llama"
    cpu_model.mkdir()
    (cpu_model / "config.json").write_text(json.dumps(CPU_LLAMA))
    env = hub_env(hub_server, out / "hf_home")
    hub_refs = [f"{hub_server}/{r}" if r.endswith("-mismatch") else r for r in HUB_REFS]  # one as a Hub URL
    spec = {"refs": [*hub_refs, str(local_model)], "kill_refs": [*SUBSET, str(local_model)], "grid": GRID, "out": str(out),
            "cpu_refs": [str(cpu_model)], "cpu_grid": CPU_GRID}
    done = subprocess.run([sys.executable, "-m", "tests._drive_sweep"], input=json.dumps(spec), capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print("driver phases (s):", result["phase_seconds"])  # shown with -s; where the minute goes
    result["out"] = out
    result["refs"] = spec["refs"]
    return result


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["reference"], row["mode"], row["gpu"], row["dtype"])


def _differences(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(row key, column, mine, theirs) for every cell that differs; a Hub failure's wording (its retry timing) is not compared."""
    a, b = {_key(r): r for r in mine}, {_key(r): r for r in theirs}
    assert len(a) == len(mine) and len(b) == len(theirs), "a row written twice"
    out: list[tuple[Any, ...]] = [(k, "missing", k in a, k in b) for k in sorted(set(a) ^ set(b), key=str)]
    for k in set(a) & set(b):
        for column in a[k]:
            if column == "error" and a[k]["error_kind"] == "hub":
                continue
            if a[k][column] != b[k].get(column):
                out.append((k, column, a[k][column], b[k].get(column)))
    return out


def test_every_requested_row_is_there_failures_included(driven: dict[str, Any], local_model: Path) -> None:
    rows = driven["rows"]
    assert driven["first"]["requested"] == 7 and driven["first"]["computed"] == 7 and driven["first"]["skipped"] == 0
    assert set(rows[0]) == {name for name, _, _ in COLUMNS} - set(VOLATILE)
    keys = [_key(r) for r in rows]
    assert len(keys) == len(set(keys)), "a row written twice"
    grid = Grid(**{k: tuple(v) for k, v in GRID.items()})
    for reference in driven["refs"]:
        if reference == "estimator-test/gguf-only":  # a GGUF repo answers per quantization file, whatever dtypes were asked
            assert {(r["mode"], r["dtype"]) for r in rows if r["reference"] == reference} == {
                (m, q) for m in ("load", "inference") for q in ("F16", "Q4_K_M", "Q8_0")}
            continue
        expected = {(reference, s.mode, "L4", d) for s in grid.scenarios() for d in grid.row_dtypes}
        assert {k for k in keys if k[0] == reference} == expected, reference
    by_ref = {r["reference"]: r for r in rows}
    assert by_ref["estimator-test/no-config"]["error_kind"] == "refused" and "config.json" in by_ref["estimator-test/no-config"]["error"]
    assert by_ref["nobody-here/no-such-model"]["error_kind"] == "refused"
    assert by_ref["estimator-test/rate-limited"]["error_kind"] == "hub" and "429" in by_ref["estimator-test/rate-limited"]["error"]
    import estimator

    assert {r["estimator_version"] for r in rows} == {estimator.__version__}
    ok = [r for r in rows if r["error"] is None]
    assert len(ok) == 4 * 3 + 6 and all(r["total_bytes"] > 0 for r in ok)
    assert by_ref[str(local_model)]["source"] == "local" and by_ref[str(local_model)]["revision"] is None
    assert by_ref["estimator-test/tiny-llama"]["model"] == "estimator-test/tiny-llama" and len(by_ref["estimator-test/tiny-llama"]["revision"]) == 40
    url = next(r for r in driven["refs"] if "://" in r)
    assert by_ref[url]["model"] == "estimator-test/tiny-llama-mismatch" and by_ref[url]["error"] is None


def test_each_row_equals_the_single_answer(driven: dict[str, Any]) -> None:
    """estimate(reference, **the scenario's options), called alone, gives each row's figures (JSON fields mapped by hand)."""
    rows = {_key(r): r for r in driven["rows"]}
    compared = 0
    for single in driven["singles"]:
        scenario = single["scenario"]
        mine = {k: r for k, r in rows.items() if k[0] == single["reference"] and k[1] == scenario["mode"]}
        if "error" in single:
            assert mine and all(r["error"] == single["error"] and r["total_bytes"] is None for r in mine.values()), single["reference"]
            compared += len(mine)
            continue
        answer = single["ok"]
        assert {k[3] for k in mine} == {row["dtype"] for row in answer["rows"]}
        for row in answer["rows"]:
            got = mine[(single["reference"], scenario["mode"], "L4", row["dtype"])]
            fit = row["fit"] or {}
            assert (got["model"], got["revision"], got["library"], got["architecture"], got["source"]) == (
                answer["model"], answer["revision"], answer["library"], answer["architecture"], answer["source"])
            assert (got["total_bytes"], got["largest_layer_bytes"], got["training_adam_bytes"], got["peak_bytes"], got["method"]) == (
                row["total_bytes"], row["largest_layer_bytes"], row["training_adam_bytes"], row["peak_bytes"], row["method"])
            assert got["notes"] == "; ".join(row["notes"])
            assert (got["fits"], got["needed_bytes"], got["gpu_memory_bytes"], got["max_batch"], got["max_seq"]) == (
                fit.get("fits"), fit.get("needed_bytes"), fit.get("capacity_bytes"), fit.get("max_batch_size"), fit.get("max_seq_len"))
            assert got["error"] is None and got["seq_len"] == (64 if scenario["mode"] == "inference" else None)
            compared += 1
    assert compared == len(driven["rows"])


def test_cpu_target_rows_equal_the_single_answer(driven: dict[str, Any]) -> None:
    """A CPU-target grid (``device`` cpu): each row is the single answer of the asking process (2 torch threads), not
    of the one-thread Ray worker that computed it — the thread count is carried into the workers. The answers at one
    thread differ, so the comparison can tell."""
    rows = {(r["mode"], r["dtype"]): r for r in driven["cpu_rows"]}
    assert len(rows) == len(driven["cpu_rows"]) == 2
    differs = 0
    for single in driven["cpu_singles"]:
        assert single["ok"]["options"]["cpu_threads"] == 2 and single["one_thread"]["options"]["cpu_threads"] == 1
        for row, alone in zip(single["ok"]["rows"], single["one_thread"]["rows"], strict=True):
            got = rows[(single["scenario"]["mode"], row["dtype"])]
            assert got["error"] is None and row["method"] == "simulated"
            assert (got["peak_bytes"], got["method"], got["notes"]) == (row["peak_bytes"], row["method"], "; ".join(row["notes"]))
            differs += alone["peak_bytes"] != row["peak_bytes"]
    assert differs  # the kernels' per-thread scratch: one thread's answer is another


def test_share_query_is_the_apps_link_for_the_row(driven: dict[str, Any]) -> None:
    from urllib.parse import parse_qsl

    from estimator_app.form import FormState, from_query

    row = next(r for r in driven["rows"] if r["reference"] == "estimator-test/tiny-llama" and r["mode"] == "inference" and r["dtype"] == "bfloat16")
    parsed = from_query(parse_qsl(row["share_query"], keep_blank_values=True))
    assert parsed.notices == []  # every parameter is one the page knows, spelled as it spells it
    assert parsed.state == FormState(model="estimator-test/tiny-llama", revision=row["revision"], dtypes=("bfloat16",), mode="inference", seq=64, gpu="L4")
    gguf = next(r for r in driven["rows"] if r["reference"] == "estimator-test/gguf-only" and r["dtype"] == "Q8_0" and r["mode"] == "load")
    parsed = from_query(parse_qsl(gguf["share_query"], keep_blank_values=True))
    assert parsed.notices == [] and parsed.state.gguf_file == "Q8_0" and parsed.state.model == "estimator-test/gguf-only"


def test_rerun_recomputes_only_hub_failures(driven: dict[str, Any]) -> None:
    rerun = driven["rerun"]
    assert (rerun["requested"], rerun["skipped"], rerun["computed"]) == (7, 6, 1)  # the rate-limited repo is tried again
    rewritten = driven["rewritten"]
    assert len(rewritten) == 1
    again = {_key(r): r for r in driven["rows_after_rerun"]}
    assert len(again) == len(driven["rows_after_rerun"]) == len(driven["rows"])
    for row in driven["rows"]:
        other = again[_key(row)]
        if row["reference"] == "estimator-test/rate-limited":
            assert other["error"] == row["error"]
        else:
            assert other == row


def test_a_killed_worker_loses_nothing(driven: dict[str, Any]) -> None:
    assert len(driven["killed"]) == 1, "no task process was seen to kill"
    assert driven["third"]["computed"] == 4 and driven["third"]["failed_tasks"] == []
    subset = [r for r in driven["rows"] if r["reference"] in (*SUBSET, driven["refs"][-1])]
    assert _differences(driven["rows_killed"], subset) == []
    assert len(list((driven["out"] / "killed" / "data").glob("part-*.parquet"))) == 4


def test_a_task_past_its_deadline_is_killed_and_reported(driven: dict[str, Any]) -> None:
    deadline = driven["deadline"]
    assert deadline["kinds"] == ["limit"] and "--task-timeout" in deadline["errors"][0]
    assert deadline["seconds"] < 30, "the sleeping task (60 s) was cancelled, not waited for"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_same_dataset_on_a_separately_started_cluster(driven: dict[str, Any], hub_server: str, tmp_path: Path) -> None:
    """``ray start --head`` on loopback, then the CLI with ``--ray-address`` (and ``--push-to-hub``): the rows of the local run."""
    from testkit.hub_process import hub_env

    ray = Path(sys.executable).with_name("ray")
    port = _free_port()
    env = {**hub_env(hub_server, tmp_path / "hf_home"), "RAY_AUTH_MODE": "token", "HF_TOKEN": "hf_standin_user"}
    head = subprocess.Popen([str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "1",
                             "--include-dashboard", "false", "--disable-usage-stats", "--object-store-memory", str(100 * 2**20)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        models = tmp_path / "models.txt"
        models.write_text("\n".join([*SUBSET, driven["refs"][-1]]) + "\n")
        out = tmp_path / "cluster"
        args = [sys.executable, "-m", "estimator", "sweep", "--models", str(models), "--out", str(out), "--modes", "load", "inference",
                "--dtypes", "float32,bfloat16", "--seq-len", "64", "--gpu", "L4", "--hub-retries", "1", "--ray-address", f"127.0.0.1:{port}",
                "--no-progress", "--push-to-hub", "standin-user/cluster-fits"]
        done = None
        for _ in range(30):  # the head takes a few seconds to listen
            done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
            if "could not reach" not in done.stderr and "Failed to connect" not in done.stderr:
                break
        assert done is not None and done.returncode == 0, done.stderr[-3000:] if done else ""
        assert "4 models: 4 estimated" in done.stdout and "pushed: " in done.stdout and "/datasets/standin-user/cluster-fits/" in done.stdout
        import pyarrow.dataset as ds

        cluster = ds.dataset(out / "data").to_table().drop_columns(list(VOLATILE)).to_pylist()
        assert _differences(cluster, [r for r in driven["rows"] if r["reference"] in (*SUBSET, driven["refs"][-1])]) == []
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()


PUSH_AND_READ = """
import json, sys
from pathlib import Path
import pyarrow.parquet as pq
from huggingface_hub import HfApi, snapshot_download
from estimator_sweep import Grid
from estimator_sweep.card import push_to_hub
out, grid = Path(sys.argv[1]), Grid(**{k: tuple(v) for k, v in json.loads(sys.argv[2]).items()})
url = push_to_hub(out, "standin-user/what-fits", grid=grid)
again = push_to_hub(out, "standin-user/what-fits", grid=grid)  # the repo exists; nothing changed
files = sorted(HfApi().list_repo_files("standin-user/what-fits", repo_type="dataset"))
local = snapshot_download("standin-user/what-fits", repo_type="dataset", local_dir=str(out.parent / "downloaded"))
print(json.dumps({"url": url, "again": again, "files": files, "rows": pq.read_table(Path(local) / "data").num_rows,
                  "same": pq.read_table(Path(local) / "data").sort_by("task").equals(pq.read_table(out / "data").sort_by("task")),
                  "card": (Path(local) / "README.md").read_text()}))
"""


def test_push_to_hub_then_read_back(driven: dict[str, Any], hub_server: str, tmp_path: Path) -> None:
    """``push_to_hub`` through the real huggingface_hub client to the stand-in; read back with it, equal to what was written."""
    from testkit.hub_process import hub_env

    env = hub_env(hub_server, tmp_path / "hf_home", HF_TOKEN="hf_standin_user")
    done = subprocess.run([sys.executable, "-c", PUSH_AND_READ, str(driven["out"] / "first"), json.dumps(GRID)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    parts = sorted(p.name for p in (driven["out"] / "first" / "data").glob("part-*.parquet"))
    assert got["files"] == ["README.md", *(f"data/{p}" for p in parts)]
    assert got["rows"] == len(driven["rows"]) and got["same"] is True
    assert "/datasets/standin-user/what-fits/commit/" in got["url"] and got["again"].rsplit("/", 1)[-1] == got["url"].rsplit("/", 1)[-1]
    assert "How the figures were obtained" in got["card"] and "simulated" in got["card"] and "path: data/*.parquet" in got["card"]
