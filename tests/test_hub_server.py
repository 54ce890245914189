"""Tests of the Hub stand-in, driven through the REAL huggingface_hub, transformers and accelerate clients.

Client calls run in subprocesses (HF_ENDPOINT is read at import); most of them are batched into one
subprocess (tests/_hub_client_checks.py) whose per-check results the tests below assert on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.hub_process import REPO_ROOT, hub_env, start_hub_process, stop_hub_process
from tests.hub_server import HubStandIn

DATA = REPO_ROOT / "tests" / "hub_data"
ACCELERATE = Path(sys.executable).parent / "accelerate"


@pytest.fixture(scope="module")
def accelerate_bert(hub_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    """``accelerate estimate-memory bert-base-cased`` started early so that it overlaps with ``checks``."""
    cmd = [str(ACCELERATE), "estimate-memory", "bert-base-cased"] if ACCELERATE.exists() else [
        sys.executable, "-m", "accelerate.commands.accelerate_cli", "estimate-memory", "bert-base-cased"]
    env = hub_env(hub_server, tmp_path_factory.mktemp("hf_home"))
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def checks(
    hub_server: str, tmp_path_factory: pytest.TempPathFactory, accelerate_bert: subprocess.Popen[str]
) -> dict[str, Any]:
    """Results of tests/_hub_client_checks.py run once against the session server."""
    env = hub_env(hub_server, tmp_path_factory.mktemp("hf_home"))
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests" / "_hub_client_checks.py")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ok(checks: dict[str, Any], name: str) -> Any:
    """The value a check produced; fails with the recorded error otherwise."""
    result = checks[name]
    assert "ok" in result, f"{name}: {result}"
    return result["ok"]


def err(checks: dict[str, Any], name: str, exc: str, status: int | None) -> str:
    """Assert a check raised ``exc`` with HTTP ``status``; return the message."""
    result = checks[name]
    assert result.get("error") == exc and result.get("status") == status, f"{name}: {result}"
    return result["message"]


# ----------------------------------------------------------------------------- server process


def test_cli_prints_ready_line_and_stops_cleanly_on_sigterm() -> None:
    start = time.monotonic()
    proc, url = start_hub_process()
    assert time.monotonic() - start < 5
    with urllib.request.urlopen(f"{url}/api/models/openai-community/gpt2", timeout=5) as resp:
        assert json.load(resp)["id"] == "openai-community/gpt2"
    assert stop_hub_process(proc) == 0


def test_resolve_headers_range_and_no_xet(hub_server: str) -> None:
    url = f"{hub_server}/bigscience/bloom/resolve/main/model_00012-of-00072.safetensors"
    head = urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=5)
    size = int(head.headers["X-Linked-Size"])
    assert head.headers["Content-Length"] == str(size) and size > 4_000_000_000
    assert head.headers["X-Repo-Commit"] == "053d9cd9fbe814e091294f67fcfedb3397b954bb"
    assert len(head.headers["ETag"].strip('"')) == 64 and head.headers["Accept-Ranges"] == "bytes"
    assert not [h for h in head.headers if h.lower().startswith("x-xet")]
    resp = urllib.request.urlopen(urllib.request.Request(url, headers={"Range": f"bytes={size - 4}-{size + 10}"}), timeout=5)
    assert resp.status == 206 and resp.headers["Content-Range"] == f"bytes {size - 4}-{size - 1}/{size}"
    assert resp.read() == b"\0" * 4
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(urllib.request.Request(url, headers={"Range": f"bytes={size}-"}), timeout=5)
    assert info.value.code == 416
    cfg = urllib.request.urlopen(f"{hub_server}/openai-community/gpt2/resolve/main/config.json", timeout=5)
    assert cfg.headers["ETag"] == '"10c66461e4c109db5a2196bff4bb59be30396ed8"'  # git blob sha1 from the fixtures
    assert cfg.read() == (DATA / "models/openai-community/gpt2/config.json").read_bytes()


def test_legacy_redirect_is_relative_307(hub_server: str) -> None:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    for path, target in [
        ("/api/models/gpt2?expand=sha", "/api/models/openai-community/gpt2?expand=sha"),
        ("/roberta-base/resolve/main/config.json", "/FacebookAI/roberta-base/resolve/main/config.json"),
    ]:
        with pytest.raises(urllib.error.HTTPError) as info:
            opener.open(hub_server + path, timeout=5)
        assert info.value.code == 307 and info.value.headers["Location"] == target


# ----------------------------------------------------------------------------- huggingface_hub client


def test_model_info(checks: dict[str, Any]) -> None:
    gpt2 = ok(checks, "info_gpt2")
    assert gpt2["sha"] == "607a30d783dfa663caf39e06633721c8d4cfcd7e" and gpt2["library_name"] == "transformers"
    assert gpt2["config"]["model_type"] == "gpt2" and gpt2["safetensors"] == {"parameters": {"F32": 137022720}, "total": 137022720}
    assert "model.safetensors" in gpt2["siblings"] and "config.json" in gpt2["siblings"]
    assert ok(checks, "info_legacy_gpt2")["id"] == "openai-community/gpt2"
    assert ok(checks, "info_legacy_bert")["id"] == "google-bert/bert-base-cased"
    bloom = ok(checks, "info_bloom_blobs")
    assert bloom["safetensors"]["total"] == 176_247_271_424 and bloom["siblings"]["model_00012-of-00072.safetensors"] > 4e9
    assert ok(checks, "info_expand") == 8_030_261_248
    assert ok(checks, "info_by_sha") == "d04e592bb4f6aa9cfee91e2e20afa771667e1d4b"
    err(checks, "info_bad_revision", "RevisionNotFoundError", 404)
    assert ok(checks, "info_gated")["gated"] == "manual"
    assert ok(checks, "info_reconstructed")["model_type"] == "llama"


def test_special_repos_model_info(checks: dict[str, Any]) -> None:
    gguf = ok(checks, "info_gguf")
    assert gguf["library_name"] == "gguf" and "gguf" in gguf["tags"] and gguf["config"] is None
    assert gguf["gguf"]["architecture"] == "llama" and gguf["gguf"]["total"] > 0
    sizes = json.loads((Path(__file__).parent / "hub_data" / "gguf" / "manifest.json").read_text())["estimator-test/gguf-only"]
    assert gguf["siblings"]["tiny-Q4_K_M.gguf"] == sizes["tiny-Q4_K_M.gguf"]
    assert ok(checks, "tree_gguf")["tiny-F16-00001-of-00002.gguf"] == sizes["tiny-F16-00001-of-00002.gguf"]
    assert ok(checks, "meta_gguf")["size"] == sizes["tiny-Q4_K_M.gguf"]
    timm = ok(checks, "info_timm")
    assert timm["library_name"] == "timm" and timm["config"]["architecture"] == "resnet50"
    assert timm["config"]["pretrained_cfg"]["input_size"] == [3, 224, 224]
    remote = ok(checks, "info_remote_code")
    assert "auto_map" in remote["config"] and "custom_code" in remote["tags"]
    assert ok(checks, "paths_info") == {"unet": ["RepoFolder", None], "unet/config.json": ["RepoFile", 1680]}
    tree = ok(checks, "tree_minilm")
    assert tree["1_Pooling/config.json"] == 190 and tree["model.safetensors"] > 90_000_000


def test_downloads(checks: dict[str, Any]) -> None:
    models = DATA / "models"
    assert ok(checks, "dl_llama_config") == (models / "meta-llama/Llama-3.1-8B/config.json").read_text()
    assert ok(checks, "dl_legacy_bert_config") == (models / "google-bert/bert-base-cased/config.json").read_text()
    assert ok(checks, "dl_by_sha") == (models / "openai-community/gpt2/config.json").read_text()
    shard = ok(checks, "meta_bloom_shard")
    assert shard["commit"] == "053d9cd9fbe814e091294f67fcfedb3397b954bb" and len(shard["etag"]) == 64
    status, content_range, length = ok(checks, "range_request")
    assert status == 206 and content_range.startswith("bytes 0-7/") and length == 8


@pytest.mark.parametrize(
    "repo_id",
    ["bigscience/bloom", "mistralai/Mixtral-8x7B-v0.1", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-2-7b-hf",
     "huggyllama/llama-7b", "google/gemma-2b-it"],
)
def test_sharded_safetensors_match_index_total_size(checks: dict[str, Any], repo_id: str) -> None:
    summary = ok(checks, f"st:{repo_id}")
    index = json.loads((DATA / "models" / repo_id / "model.safetensors.index.json").read_text())
    assert summary["sharded"] and summary["files"] == len(set(index["weight_map"].values()))
    assert summary["data_bytes"] == summary["end_offsets"] == summary["total_size"] == index["metadata"]["total_size"]


# (published Hub parameter count, shard count, has lm_head.weight, has q/k/v biases)
RECONSTRUCTED = {
    "meta-llama/Llama-3.1-70B": (70_553_706_496, 30, True, False),
    "meta-llama/Llama-3.1-405B": (405_853_388_800, 191, True, False),
    "mistralai/Mistral-7B-v0.1": (7_241_732_096, 2, True, False),
    "google/gemma-7b": (8_537_680_896, 4, False, False),
    "meta-llama/Llama-3.2-3B": (3_212_749_824, 2, False, False),
    "Qwen/Qwen2.5-7B": (7_615_616_512, 4, True, True),
}


@pytest.mark.parametrize("repo_id", list(RECONSTRUCTED))
def test_reconstructed_sharded_safetensors(checks: dict[str, Any], repo_id: str) -> None:
    params, n_shards, lm_head, qkv_bias = RECONSTRUCTED[repo_id]
    summary = ok(checks, f"st:{repo_id}")
    index = json.loads((DATA / "reconstructed" / repo_id / "model.safetensors.index.json").read_text())
    assert summary["params"] == {"BF16": params} and summary["sharded"]
    assert summary["shards"] == [f"model-{k:05d}-of-{n_shards:05d}.safetensors" for k in range(1, n_shards + 1)]
    assert summary["data_bytes"] == summary["end_offsets"] == summary["total_size"] == index["metadata"]["total_size"]
    assert summary["total_size"] == 2 * params
    assert summary["layout"] == {"lm_head.weight": lm_head, "model.layers.0.self_attn.q_proj.bias": qkv_bias}
    assert not (DATA / "models" / repo_id / "model.safetensors.index.json").exists()  # exact copies untouched


def test_reconstructed_files_are_marked(checks: dict[str, Any]) -> None:
    marked = ok(checks, "info_reconstructed_files")
    assert marked["Qwen/Qwen2.5-7B"] == ["model-0000%d-of-00004.safetensors" % k for k in range(1, 5)] + [
        "model.safetensors.index.json"]  # config.json is an exact copy
    assert {"config.json", "model.safetensors.index.json", "model-00030-of-00030.safetensors"} <= set(
        marked["meta-llama/Llama-3.1-70B"])
    assert marked["meta-llama/Llama-3.1-8B"] is None


def test_safetensors_parameter_counts_match_hub_reference(checks: dict[str, Any]) -> None:
    assert ok(checks, "st:bigscience/bloom")["params"] == {"BF16": 176_247_271_424}
    assert ok(checks, "st:openai-community/gpt2")["params"] == {"F32": 137_022_720}
    assert ok(checks, "st:FacebookAI/roberta-base")["params"] == {"F32": 124_697_433, "I64": 514}
    assert ok(checks, "st:sentence-transformers/all-MiniLM-L6-v2")["params"] == {"F32": 22_713_216, "I64": 512}
    assert ok(checks, "st:meta-llama/Llama-3.1-8B")["params"] == {"BF16": 8_030_261_248}
    assert ok(checks, "st:google-bert/bert-base-cased")["params"] == {"F32": 108_932_934}
    assert ok(checks, "st:estimator-test/tiny-llama")["params"] == {"F32": 202_048}
    assert ok(checks, "st:timm/resnet50.a1_in1k")["params"]["F32"] > 25_000_000
    assert ok(checks, "st_sharded_endpoint") == [{"BF16": 46_702_792_704}, 19, {"total_size": 93_405_585_408}]
    assert ok(checks, "st_mismatch") == [100, 64]
    err(checks, "st_gated_anon", "GatedRepoError", 401)
    err(checks, "st_not_safetensors", "NotASafetensorsRepoError", None)


def test_access_fault_modes(checks: dict[str, Any]) -> None:
    assert "You must have access to it and be authenticated" in err(checks, "gated_anon", "GatedRepoError", 401)
    assert "you are not in the authorized list" in err(checks, "gated_unapproved", "GatedRepoError", 403)
    assert '"hidden_size": 64' in ok(checks, "gated_user")
    assert "Invalid username or password." in err(checks, "private_anon", "RepositoryNotFoundError", 401)
    err(checks, "private_unapproved", "RepositoryNotFoundError", 404)
    assert '"hidden_size": 64' in ok(checks, "private_user")
    err(checks, "private_info_anon", "RepositoryNotFoundError", 401)
    assert ok(checks, "private_info_user") is True
    err(checks, "unknown_anon", "RepositoryNotFoundError", 401)
    err(checks, "unknown_token", "RepositoryNotFoundError", 404)
    err(checks, "invalid_token", "HfHubHTTPError", 401)
    err(checks, "no_config", "RemoteEntryNotFoundError", 404)
    err(checks, "bad_revision_download", "RevisionNotFoundError", 404)
    assert "rate limit" in err(checks, "rate_limited", "HfHubHTTPError", 429)
    err(checks, "server_error", "HfHubHTTPError", 503)
    with pytest.raises(json.JSONDecodeError):
        json.loads(ok(checks, "malformed_config"))


def test_whoami_and_discussions(checks: dict[str, Any]) -> None:
    assert ok(checks, "whoami_user") == "standin-user"
    assert ok(checks, "whoami_unapproved") == "standin-unapproved"
    err(checks, "whoami_invalid", "HfHubHTTPError", 401)
    post = ok(checks, "discussion_post")
    assert post["num"] == 1 and post["author"] == "standin-user" and post["body"] == "estimate table"
    assert post["url"].endswith("/google-bert/bert-base-cased/discussions/1")
    assert checks["discussion_anon"]["status"] == 401
    assert ok(checks, "discussion_list") == [[1, "[AUTOMATED] Model Memory Requirements", "standin-user"]]
    assert ok(checks, "discussion_details") == "estimate table"
    posts = ok(checks, "standin_posts")
    assert [(p["repo"], p["title"], p["description"], p["token"]) for p in posts] == [
        ("google-bert/bert-base-cased", "[AUTOMATED] Model Memory Requirements", "estimate table", "hf_standin_user")
    ]


# ----------------------------------------------------------------------------- acceptance: transformers, accelerate


def test_transformers_autoconfig(checks: dict[str, Any]) -> None:
    assert ok(checks, "autoconfig_llama31") == {"class": "LlamaConfig", "layers": 32, "hidden": 4096}
    assert ok(checks, "autoconfig_legacy_bert") == {"class": "BertConfig", "layers": 12, "hidden": 768}


def test_accelerate_estimate_memory_bert_base_cased(accelerate_bert: subprocess.Popen[str]) -> None:
    stdout, stderr = accelerate_bert.communicate(timeout=180)
    assert accelerate_bert.returncode == 0, stderr[-3000:]
    assert "Memory Usage for loading `bert-base-cased`" in stdout
    row = next(line for line in stdout.splitlines() if "float32" in line)
    assert "413.18 MB" in row and "1.61 GB" in row


# ----------------------------------------------------------------------------- slow repo


def test_slow_repo_times_out_without_blocking_others(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HUB_STANDIN_SLOW_SECONDS", "4")
    script = """
import json, threading, time
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
api = HfApi()
out = {}
def slow():
    try:
        get_hf_file_metadata(hf_hub_url("estimator-test/slow", "config.json"))  # HF_HUB_ETAG_TIMEOUT=1
        out["slow"] = "no timeout"
    except Exception as e:
        out["slow"] = type(e).__name__
t0 = time.monotonic(); th = threading.Thread(target=slow); th.start(); time.sleep(0.2)
api.model_info("openai-community/gpt2"); out["fast_s"] = time.monotonic() - t0
th.join(); out["slow_s"] = time.monotonic() - t0
print(json.dumps(out))
"""
    with HubStandIn() as hub:
        env = hub_env(hub.url, tmp_path / "hf_home", HF_HUB_ETAG_TIMEOUT="1", HF_HUB_DOWNLOAD_TIMEOUT="1")
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["slow"] in ("ReadTimeout", "TimeoutException", "ConnectTimeout"), out
    # the gpt2 call is answered while the slow request is still pending (delay 4 s); the slow one times out at ~1 s
    assert out["fast_s"] < 3.0 and out["slow_s"] < 3.5, out


# ----------------------------------------------------------------------------- in-process API, test-only endpoints


def test_in_process_server_discussion_log_and_reset() -> None:
    def call(url: str, data: bytes | None = None, token: str | None = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    body = json.dumps({"title": " t ", "description": "d", "pullRequest": False}).encode()
    with HubStandIn() as hub:
        api = f"{hub.url}/api/models/FacebookAI/roberta-base/discussions"
        assert call(api, body)[0] == 401
        assert call(api, body, token="hf_not_a_token") == (401, {"error": "Invalid credentials in Authorization header"})
        created = call(api, body, token="hf_standin_unapproved")
        assert created == (200, {"num": 1, "url": {"api": "/api/models/FacebookAI/roberta-base/discussions/1"}})
        status, posts = call(f"{hub.url}/_standin/discussions")
        assert status == 200 and [(p["repo"], p["title"], p["description"], p["token"], p["author"]) for p in posts] == [
            ("FacebookAI/roberta-base", "t", "d", "hf_standin_unapproved", "standin-unapproved")
        ]
        assert call(f"{hub.url}/api/models/FacebookAI/roberta-base/discussions?p=0")[1]["count"] == 1
        assert call(f"{hub.url}/_standin/reset", b"")[0] == 200
        assert call(f"{hub.url}/_standin/discussions") == (200, [])
        assert call(f"{hub.url}/api/models/FacebookAI/roberta-base/discussions")[1]["count"] == 0
        expanded = call(f"{hub.url}/api/models/FacebookAI/roberta-base?expand[]=safetensors&expand[]=gated")[1]
        assert set(expanded) == {"_id", "id", "safetensors", "gated"}
        assert expanded["safetensors"] == {"parameters": {"F32": 124_697_433, "I64": 514}, "total": 124_697_947}
