"""The estimator against the loopback Hub stand-in, through the real huggingface_hub client.

Every Hub path the estimator takes (stored rows from safetensors headers, legacy redirects,
revisions, tokens from the argument, HF_TOKEN and the login cache, GGUF-only repos, the cache) and
every fault mode, each checked by what the user sees. Cases run in subprocesses because
huggingface_hub reads HF_ENDPOINT once, at import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit.hub_process import REPO_ROOT, hub_env

DATA = Path(__file__).parent / "hub_data"
USER, UNAPPROVED = "hf_standin_user", "hf_standin_unapproved"
ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8}


def drive(url: str, cases: list[dict[str, Any]], **env: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "tests._drive_estimator"], input=json.dumps(cases), capture_output=True, text=True,
        cwd=REPO_ROOT, env=hub_env(url, **env), timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def shapes(repo: str) -> dict[str, Any]:
    return json.loads((DATA / "shapes" / f"{repo.replace('/', '__')}.json").read_text())


def stored_bytes(repo: str, itemsize: int | None = None) -> int:
    """Truth from the stand-in's own tensor tables: numel x item size of each stored tensor."""
    total = 0
    for dtype, shape in shapes(repo).values():
        numel = 1
        for dim in shape:
            numel *= dim
        size = itemsize if itemsize is not None and dtype in ("F32", "F16", "BF16") else ITEMSIZE[dtype]
        total += numel * size
    return total


@pytest.fixture(scope="module")
def results(hub_server: str) -> dict[str, dict[str, Any]]:
    sha = "d04e592bb4f6aa9cfee91e2e20afa771667e1d4b"  # the Hub commit of the Llama-3.1-8B fixture (hub-fixtures README)
    cases = {
        "bert-legacy": {"model": "bert-base-cased", "kwargs": {"dtypes": ["float32", "float16"]}},
        "llama-8b": {"model": "meta-llama/Llama-3.1-8B", "kwargs": {"dtypes": ["bfloat16", "float32", "int4"]}},
        "llama-8b-again": {"model": "meta-llama/Llama-3.1-8B", "kwargs": {"dtypes": ["bfloat16", "float32", "int4"]}},
        "llama-8b-url-sha": {"model": f"{hub_server}/meta-llama/Llama-3.1-8B/tree/{sha}", "kwargs": {"dtypes": ["bfloat16"]}},
        "llama-8b-float8": {"model": "meta-llama/Llama-3.1-8B", "kwargs": {"dtypes": ["float8"]}},
        "bloom": {"model": "bigscience/bloom", "kwargs": {"dtypes": ["bfloat16"]}},
        "tiny-cross-check": {"model": "estimator-test/tiny-llama", "kwargs": {"dtypes": ["float32"], "cross_check": True}},
        "tiny-mismatch": {"model": "estimator-test/tiny-llama-mismatch", "kwargs": {"dtypes": ["float32"], "cross_check": True}},
        "timm": {"model": "timm/resnet50.a1_in1k", "kwargs": {"dtypes": ["float32"]}},
        "gpt2-stored": {"model": "gpt2", "kwargs": {"dtypes": ["float32"]}},
        "gpt2-cross-check": {"model": "gpt2", "kwargs": {"dtypes": ["float32"], "cross_check": True}},
        "gguf": {"model": "estimator-test/gguf-only"},
        "gated-anonymous": {"model": "estimator-test/gated-model"},
        "gated-unapproved": {"model": "estimator-test/gated-model", "kwargs": {"token": UNAPPROVED}},
        "gated-approved": {"model": "estimator-test/gated-model", "kwargs": {"token": USER, "dtypes": ["float32"]}},
        "private-anonymous": {"model": "estimator-test/private-model"},
        "private-approved": {"model": "estimator-test/private-model", "kwargs": {"token": USER, "dtypes": ["float32"]}},
        "missing": {"model": "estimator-test/does-not-exist"},
        "no-config": {"model": "estimator-test/no-config"},
        "rate-limited": {"model": "estimator-test/rate-limited"},
        "server-error": {"model": "estimator-test/server-error"},
        "slow": {"model": "estimator-test/slow", "kwargs": {"timeout": 1.0}},
        "malformed": {"model": "estimator-test/malformed-config"},
        "absurd": {"model": "estimator-test/absurd-config"},
        "remote-code": {"model": "estimator-test/remote-code"},
        "bad-revision": {"model": "gpt2", "kwargs": {"revision": "no-such-branch"}},
    }
    outcomes = drive(hub_server, list(cases.values()))
    return dict(zip(cases, outcomes))


def ok(results: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    assert "ok" in results[name], results[name]
    return results[name]["ok"]


def error(results: dict[str, dict[str, Any]], name: str, cls: str, text: str, status: int) -> None:
    outcome = results[name]
    assert outcome.get("error") == cls, outcome
    assert text in outcome["message"] and outcome["exit"] == status
    assert USER not in outcome["message"] and UNAPPROVED not in outcome["message"]


def test_legacy_id_follows_the_redirect_and_counts_stored_tensors(results: dict[str, dict[str, Any]]) -> None:
    data = ok(results, "bert-legacy")
    assert data["model"] == "google-bert/bert-base-cased" and data["source"] == "hub" and len(data["revision"]) == 40
    fp32, fp16 = data["rows"]
    assert fp32["method"] == "stored" and fp32["total_bytes"] == stored_bytes("google-bert/bert-base-cased")
    assert fp16["total_bytes"] == stored_bytes("google-bert/bert-base-cased", itemsize=2)


def test_sharded_checkpoint_equals_the_index_total_size(results: dict[str, dict[str, Any]]) -> None:
    for name, folder in (("llama-8b", "meta-llama/Llama-3.1-8B"), ("bloom", "bigscience/bloom")):
        total_size = json.loads((DATA / "models" / folder / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
        assert ok(results, name)["rows"][0]["total_bytes"] == total_size
    bloom = ok(results, "bloom")["rows"][0]
    assert bloom["largest_layer_bytes"] == 250880 * 14336 * 2  # word_embeddings, the largest no-split group
    llama = ok(results, "llama-8b")
    int4 = llama["rows"][2]
    assert int4["dtype"] == "int4" and 0 < int4["total_bytes"] < llama["rows"][0]["total_bytes"] and int4["training_adam_bytes"] is None


def test_repeated_request_costs_only_the_revision_lookup(results: dict[str, dict[str, Any]]) -> None:
    first, again = results["llama-8b"], results["llama-8b-again"]
    assert first["calls"]["safetensors_metadata"] == 1
    assert again["calls"] == {"model_info": 1}
    assert again["ok"] == first["ok"]


def test_url_with_a_commit(results: dict[str, dict[str, Any]]) -> None:
    data = ok(results, "llama-8b-url-sha")
    assert data["revision"] == ok(results, "llama-8b")["revision"] and data["rows"][0]["total_bytes"] == ok(results, "llama-8b")["rows"][0]["total_bytes"]


def test_float8_rows_need_the_meta_build(results: dict[str, dict[str, Any]]) -> None:
    row = ok(results, "llama-8b-float8")["rows"][0]
    assert row["method"] == "exact" and row["total_bytes"] < ok(results, "llama-8b")["rows"][0]["total_bytes"]


def test_cross_check_reports_agreement_and_mismatch(results: dict[str, dict[str, Any]]) -> None:
    assert any("cross-checked" in note for note in ok(results, "tiny-cross-check")["rows"][0]["notes"])
    assert ok(results, "tiny-cross-check")["rows"][0]["method"] == "exact"
    notes = ok(results, "tiny-mismatch")["rows"][0]["notes"]
    assert any(note.startswith("mismatch") and "-1,792" in note for note in notes)  # up_proj [100,64] vs [128,64] in one layer


def test_cross_check_leaves_out_checkpoint_tensors_the_model_does_not_load(results: dict[str, dict[str, Any]]) -> None:
    """GPT-2's checkpoint stores its causal-mask buffers (attn.bias); transformers 5 does not load them."""
    stored, checked = ok(results, "gpt2-stored")["rows"][0], ok(results, "gpt2-cross-check")["rows"][0]
    masks = 12 * 1024 * 1024 * 4  # 12 layers of a 1x1x1024x1024 float32 mask
    assert stored["method"] == "stored" and stored["total_bytes"] == stored_bytes("openai-community/gpt2")
    assert checked["method"] == "exact" and stored["total_bytes"] - checked["total_bytes"] == masks
    assert any(note.startswith("mismatch") for note in checked["notes"])


def test_timm_repo(results: dict[str, dict[str, Any]]) -> None:
    data = ok(results, "timm")
    assert data["library"] == "timm" and data["rows"][0]["total_bytes"] == stored_bytes("timm/resnet50.a1_in1k")


def test_gguf_only_repo_gives_a_row_per_file(results: dict[str, dict[str, Any]]) -> None:
    """One row per quantization, the two parts of the split F16 file in one row (byte counts: tests/test_gguf.py)."""
    sizes = json.loads((DATA / "gguf" / "manifest.json").read_text())["estimator-test/gguf-only"]
    rows = {row["dtype"]: row["total_bytes"] for row in ok(results, "gguf")["rows"]}
    assert set(rows) == {"Q4_K_M", "Q8_0", "F16"}
    assert rows["Q4_K_M"] < sizes["tiny-Q4_K_M.gguf"] and rows["F16"] < sizes["tiny-F16-00001-of-00002.gguf"] + sizes["tiny-F16-00002-of-00002.gguf"]
    assert ok(results, "gguf")["library"] == "gguf"


def test_tokens_open_gated_and_private_repos(results: dict[str, dict[str, Any]]) -> None:
    error(results, "gated-anonymous", "GatedModelError", "is gated: accept its conditions", 2)
    error(results, "gated-unapproved", "GatedModelError", "not on its access list", 2)
    assert ok(results, "gated-approved")["rows"][0]["total_bytes"] > 0
    error(results, "private-anonymous", "ModelNotFoundError", "If it is private, pass a token", 2)
    assert ok(results, "private-approved")["rows"][0]["total_bytes"] > 0


def test_fault_modes_give_messages_a_user_can_act_on(results: dict[str, dict[str, Any]]) -> None:
    error(results, "missing", "ModelNotFoundError", "No model 'estimator-test/does-not-exist' on the Hub", 2)
    error(results, "no-config", "NoConfigError", "no config.json", 2)
    error(results, "rate-limited", "HubRateLimitedError", "rate-limiting", 3)
    error(results, "server-error", "HubError", "HTTP 503", 3)
    error(results, "slow", "HubTimeoutError", "did not answer in time", 3)
    assert results["slow"]["seconds"] < 10
    error(results, "malformed", "MalformedConfigError", "not valid JSON", 2)
    error(results, "absurd", "AbsurdSizeError", "far beyond any real model", 2)
    error(results, "remote-code", "RemoteCodeRequiredError", "--trust-remote-code", 2)
    error(results, "bad-revision", "RevisionNotFoundError", "no revision 'no-such-branch'", 2)


def cli(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "estimator", *args], capture_output=True, text=True, cwd=REPO_ROOT, env=hub_env(url, **env), timeout=300)


def test_token_from_hf_token_and_from_the_login_cache(hub_server: str, tmp_path: Path) -> None:
    from_env = cli(hub_server, "estimator-test/gated-model", "--dtypes", "float32", "--format", "json", HF_TOKEN=USER)
    assert from_env.returncode == 0, from_env.stderr
    home = tmp_path / "home"
    home.mkdir()
    (home / "token").write_text(USER)
    from_cache = cli(hub_server, "estimator-test/gated-model", "--dtypes", "float32", "--format", "json", HF_HOME=str(home))
    assert from_cache.returncode == 0, from_cache.stderr
    assert json.loads(from_cache.stdout) == json.loads(from_env.stdout)
    refused = cli(hub_server, "estimator-test/gated-model", "--token", UNAPPROVED)
    assert refused.returncode == 2 and UNAPPROVED not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_cli_exit_status_3_when_the_hub_fails(hub_server: str) -> None:
    result = cli(hub_server, "estimator-test/server-error")
    assert result.returncode == 3 and result.stdout == "" and "try again later" in result.stderr


def test_stored_answer_imports_neither_torch_nor_transformers(hub_server: str) -> None:
    code = (
        "import sys\n"
        "from estimator import estimate\n"
        "row = estimate('meta-llama/Llama-3.1-8B', dtypes=['bfloat16']).rows[0]\n"
        "print(row.method, 'torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, env=hub_env(hub_server), timeout=120)
    assert result.stdout.split() == ["stored", "False", "False"], result.stderr[-2000:]


def test_gguf_only_repo_refuses_the_modes_it_does_not_compute(hub_server: str) -> None:
    """Issue 18: a GGUF-only repo asked for training is refused, not answered with load rows (inference: tests/test_gguf.py)."""
    refused = cli(hub_server, "estimator-test/gguf-only", "--mode", "training", "--format", "json")
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1 and "GGUF" in line and "--mode training is not available" in line and "--mode load or inference" in line


def test_gguf_only_options_say_what_was_computed(hub_server: str) -> None:
    for asked in ((), ("--dtypes", "float16", "int4")):
        done = cli(hub_server, "estimator-test/gguf-only", *asked, "--format", "json")
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert data["library"] == "gguf" and data["mode"] == "load"
        assert data["options"]["mode"] == "load" and data["options"]["revision"] == data["revision"]
        assert data["options"]["dtypes"] == [row["dtype"] for row in data["rows"]]
        assert sorted(data["options"]["dtypes"]) == ["F16", "Q4_K_M", "Q8_0"]
