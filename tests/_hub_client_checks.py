"""Client-side half of tests/test_hub_server.py: drive the REAL huggingface_hub / transformers against the stand-in.

Run in a subprocess whose environment comes from ``conftest.hub_env`` (HF_ENDPOINT must be set before the
import). Prints one JSON object (``{check_name: result}``) on the last stdout line; each check records
either its observed values or the exception class name, status code and message.
"""

from __future__ import annotations

import json
import math
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from huggingface_hub import (
    HfApi,
    get_hf_file_metadata,
    get_safetensors_metadata,
    hf_hub_download,
    hf_hub_url,
)
from huggingface_hub.utils import get_session

FIXTURES = Path(__file__).resolve().parent / "hub_data"
USER, UNAPPROVED = "hf_standin_user", "hf_standin_unapproved"
INDEXED = [
    "bigscience/bloom",
    "mistralai/Mixtral-8x7B-v0.1",
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-2-7b-hf",
    "huggyllama/llama-7b",
    "google/gemma-2b-it",
]
RECONSTRUCTED = [  # served with a reconstructed model.safetensors.index.json (tests/hub_data/reconstructed/)
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B",
    "mistralai/Mistral-7B-v0.1",
    "google/gemma-7b",
    "meta-llama/Llama-3.2-3B",
    "Qwen/Qwen2.5-7B",
]
SINGLE = [
    "google-bert/bert-base-cased",
    "openai-community/gpt2",
    "FacebookAI/roberta-base",
    "sentence-transformers/all-MiniLM-L6-v2",
    "estimator-test/tiny-llama",
    "timm/resnet50.a1_in1k",
]
DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8}

api = HfApi()
results: dict[str, Any] = {}


def check(name: str, fn: Callable[[], Any]) -> None:
    """Record ``fn()``'s result, or the exception it raised."""
    try:
        results[name] = {"ok": fn()}
    except Exception as err:  # noqa: BLE001 - the exception type IS the result
        response = getattr(err, "response", None)
        results[name] = {
            "error": type(err).__name__,
            "status": getattr(response, "status_code", None),
            "message": str(err),
        }


def safetensors_summary(repo_id: str) -> dict[str, Any]:
    meta = get_safetensors_metadata(repo_id)
    data_bytes = sum(
        math.prod(t.shape) * DTYPE_SIZE[t.dtype] for f in meta.files_metadata.values() for t in f.tensors.values()
    )
    end_offsets = sum(max(t.data_offsets[1] for t in f.tensors.values()) for f in meta.files_metadata.values())
    return {
        "params": meta.parameter_count,
        "sharded": meta.sharded,
        "files": len(meta.files_metadata),
        "data_bytes": data_bytes,
        "end_offsets": end_offsets,
        "total_size": (meta.metadata or {}).get("total_size"),
        "shards": sorted(meta.files_metadata),
        "layout": {k: k in meta.weight_map for k in ("lm_head.weight", "model.layers.0.self_attn.q_proj.bias")},
    }


def info_summary(repo_id: str, **kwargs: Any) -> dict[str, Any]:
    info = api.model_info(repo_id, **kwargs)
    return {
        "id": info.id,
        "sha": info.sha,
        "library_name": info.library_name,
        "gated": info.gated,
        "private": info.private,
        "config": info.config,
        "tags": info.tags,
        "safetensors": None if info.safetensors is None else {"parameters": info.safetensors.parameters, "total": info.safetensors.total},
        "gguf": info.gguf,
        "siblings": {s.rfilename: s.size for s in info.siblings or []},
    }


def tree_sizes(repo_id: str, **kwargs: Any) -> dict[str, int | None]:
    return {e.path: getattr(e, "size", None) for e in api.list_repo_tree(repo_id, **kwargs)}


def download_text(repo_id: str, filename: str, **kwargs: Any) -> str:
    return Path(hf_hub_download(repo_id, filename, **kwargs)).read_text()


def file_meta(repo_id: str, filename: str, **kwargs: Any) -> dict[str, Any]:
    meta = get_hf_file_metadata(hf_hub_url(repo_id, filename), **kwargs)
    return {"commit": meta.commit_hash, "etag": meta.etag, "size": meta.size}


def post_discussion(repo_id: str, token: Any) -> dict[str, Any]:
    d = api.create_discussion(repo_id, "[AUTOMATED] Model Memory Requirements", description="estimate table", token=token)
    return {"num": d.num, "author": d.author, "title": d.title, "url": d.url, "body": d.events[0].content}


def main() -> None:
    # model_info, legacy redirects, revisions
    check("info_gpt2", lambda: info_summary("openai-community/gpt2"))
    check("info_legacy_gpt2", lambda: info_summary("gpt2"))
    check("info_legacy_bert", lambda: info_summary("bert-base-cased"))
    check("info_bloom_blobs", lambda: info_summary("bigscience/bloom", files_metadata=True))
    check("info_expand", lambda: api.model_info("meta-llama/Llama-3.1-8B", expand=["safetensors", "sha"]).safetensors.total)
    check("info_by_sha", lambda: api.model_info("meta-llama/Llama-3.1-8B", revision="d04e592bb4f6aa9cfee91e2e20afa771667e1d4b").sha)
    check("info_bad_revision", lambda: api.model_info("meta-llama/Llama-3.1-8B", revision="no-such-branch"))
    check("info_gated", lambda: info_summary("estimator-test/gated-model"))
    check("info_gguf", lambda: info_summary("estimator-test/gguf-only", files_metadata=True))
    check("info_timm", lambda: info_summary("timm/resnet50.a1_in1k"))
    check("info_remote_code", lambda: info_summary("estimator-test/remote-code"))
    check("info_reconstructed", lambda: api.model_info("meta-llama/Llama-3.1-70B").config)
    check("tree_minilm", lambda: tree_sizes("sentence-transformers/all-MiniLM-L6-v2", recursive=True))
    check("tree_gguf", lambda: tree_sizes("estimator-test/gguf-only"))
    check("paths_info", lambda: {e.path: [type(e).__name__, getattr(e, "size", None)] for e in api.get_paths_info(
        "stabilityai/stable-diffusion-xl-base-1.0", ["unet", "unet/config.json", "missing.txt"])})
    # downloads
    check("dl_llama_config", lambda: download_text("meta-llama/Llama-3.1-8B", "config.json"))
    check("dl_legacy_bert_config", lambda: download_text("bert-base-cased", "config.json"))
    check("dl_by_sha", lambda: download_text("openai-community/gpt2", "config.json", revision="607a30d783dfa663caf39e06633721c8d4cfcd7e"))
    check("meta_bloom_shard", lambda: file_meta("bigscience/bloom", "model_00012-of-00072.safetensors"))
    check("meta_gguf", lambda: file_meta("estimator-test/gguf-only", "tiny-Q4_K_M.gguf"))
    check("range_request", lambda: (lambda r: [r.status_code, r.headers.get("content-range"), len(r.content)])(
        get_session().get(hf_hub_url("openai-community/gpt2", "model.safetensors"), headers={"Range": "bytes=0-7"})))
    # safetensors metadata
    for repo_id in INDEXED + RECONSTRUCTED + SINGLE:
        check(f"st:{repo_id}", lambda repo_id=repo_id: safetensors_summary(repo_id))
    check("info_reconstructed_files", lambda: {r: get_session().get(f"{api.endpoint}/api/models/{r}").json().get(
        "standin_reconstructed") for r in ["Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-8B"]})
    check("st_sharded_endpoint", lambda: (lambda m: [m.parameter_count, len(m.files_metadata), m.metadata])(
        api.get_sharded_safetensors_metadata("mistralai/Mixtral-8x7B-v0.1")))
    check("st_mismatch", lambda: get_safetensors_metadata("estimator-test/tiny-llama-mismatch")
          .files_metadata["model.safetensors"].tensors["model.layers.1.mlp.up_proj.weight"].shape)
    check("st_gated_anon", lambda: safetensors_summary("estimator-test/gated-model"))
    check("st_not_safetensors", lambda: safetensors_summary("estimator-test/no-config"))
    # fault modes
    check("gated_anon", lambda: download_text("estimator-test/gated-model", "config.json"))
    check("gated_unapproved", lambda: download_text("estimator-test/gated-model", "config.json", token=UNAPPROVED))
    check("gated_user", lambda: download_text("estimator-test/gated-model", "config.json", token=USER))
    check("private_anon", lambda: download_text("estimator-test/private-model", "config.json"))
    check("private_unapproved", lambda: download_text("estimator-test/private-model", "config.json", token=UNAPPROVED))
    check("private_user", lambda: download_text("estimator-test/private-model", "config.json", token=USER))
    check("private_info_anon", lambda: api.model_info("estimator-test/private-model"))
    check("private_info_user", lambda: api.model_info("estimator-test/private-model", token=USER).private)
    check("unknown_anon", lambda: download_text("nobody/no-such-model", "config.json"))
    check("unknown_token", lambda: api.model_info("nobody/no-such-model", token=USER))
    check("invalid_token", lambda: api.model_info("openai-community/gpt2", token="hf_bogus"))
    check("no_config", lambda: download_text("estimator-test/no-config", "config.json"))
    check("bad_revision_download", lambda: download_text("openai-community/gpt2", "config.json", revision="nope"))
    check("rate_limited", lambda: api.model_info("estimator-test/rate-limited"))
    check("server_error", lambda: api.model_info("estimator-test/server-error"))
    check("malformed_config", lambda: download_text("estimator-test/malformed-config", "config.json"))
    # whoami + discussions
    check("whoami_user", lambda: api.whoami(token=USER)["name"])
    check("whoami_unapproved", lambda: api.whoami(token=UNAPPROVED)["name"])
    check("whoami_invalid", lambda: api.whoami(token="hf_bogus"))
    check("discussion_post", lambda: post_discussion("google-bert/bert-base-cased", USER))
    check("discussion_anon", lambda: post_discussion("google-bert/bert-base-cased", False))
    check("discussion_list", lambda: [(d.num, d.title, d.author) for d in api.get_repo_discussions("google-bert/bert-base-cased")])
    check("discussion_details", lambda: api.get_discussion_details("google-bert/bert-base-cased", 1).events[0].content)
    check("standin_posts", lambda: get_session().get(api.endpoint + "/_standin/discussions").json())
    # transformers acceptance
    def auto_config(repo_id: str) -> dict[str, Any]:
        import transformers

        cfg = transformers.AutoConfig.from_pretrained(repo_id)
        return {"class": type(cfg).__name__, "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size}

    check("autoconfig_llama31", lambda: auto_config("meta-llama/Llama-3.1-8B"))
    check("autoconfig_legacy_bert", lambda: auto_config("bert-base-cased"))
    print(json.dumps(results))


if __name__ == "__main__":
    try:
        main()
    except Exception:  # pragma: no cover - surfaced by the test through stderr
        traceback.print_exc()
        sys.exit(1)
