"""A load answer makes only the Hub requests it needs (issue 34, item 6), and names a tie for the largest layer
the same way every run."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from estimator.options import DType
from estimator.source.stored import stored_bytes, tensors_from_metadata
from testkit.hub_process import hub_env

ROOT = Path(__file__).resolve().parent.parent
LLAMA_SHA = "d04e592bb4f6aa9cfee91e2e20afa771667e1d4b"


def requests_of(url: str, *args: str, home: Path) -> tuple[dict[str, object], list[tuple[str, str]]]:
    urllib.request.urlopen(urllib.request.Request(f"{url}/_standin/reset", method="POST"), timeout=10).read()
    env = hub_env(url, home)
    env.pop("HF_HUB_DISABLE_TELEMETRY")  # as a user runs it: the CLI itself keeps telemetry off
    done = subprocess.run([sys.executable, "-m", "estimator", *args, "--json"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    with urllib.request.urlopen(f"{url}/_standin/requests", timeout=10) as response:
        made = [(r["method"], r["path"]) for r in json.loads(response.read())]
    return json.loads(done.stdout), made


def test_a_sharded_load_answer_makes_seven_requests(hub_server: str, tmp_path: Path) -> None:
    """model_info, then config.json beside the index and one header read per shard (the headers are read while the
    config is: the stand-in logs them in the order they end): no HEAD, no 404 probe, nothing twice."""
    answer, made = requests_of(hub_server, "meta-llama/Llama-3.1-8B", home=tmp_path / "hf")
    base = f"/meta-llama/Llama-3.1-8B/resolve/{LLAMA_SHA}/"
    shards = [("GET", base + f"model-0000{i}-of-00004.safetensors") for i in range(1, 5)]
    assert made[0] == ("GET", "/api/models/meta-llama/Llama-3.1-8B")
    assert sorted(made[1:]) == sorted([("GET", base + "config.json"), ("GET", base + "model.safetensors.index.json"), *shards])
    assert min(made.index(shard) for shard in shards) > made.index(("GET", base + "model.safetensors.index.json"))
    assert [row["total_bytes"] for row in answer["rows"]][:2] == [32_121_044_992, 16_060_522_496]
    # the same HF_HOME again: config and index come from the client's cache when it has them; never more requests
    _, again = requests_of(hub_server, "meta-llama/Llama-3.1-8B", home=tmp_path / "hf")
    assert len(again) <= len(made)


def test_a_single_file_load_answer_reads_only_its_header(hub_server: str, tmp_path: Path) -> None:
    _, made = requests_of(hub_server, "openai-community/gpt2", home=tmp_path / "hf")
    assert made[0] == ("GET", "/api/models/openai-community/gpt2")
    assert sorted(path.rsplit("/", 1)[1] for _, path in made[1:3]) == ["config.json", "model.safetensors"]
    assert all(method == "GET" for method, _ in made) and len(made) <= 4  # a large header may take a second range read


def test_a_sentence_transformers_load_answer_reads_its_header(hub_server: str, tmp_path: Path) -> None:
    """all-MiniLM-L6-v2 (issue 34: a minute, building the model with torch): model_info, modules.json and the
    Transformer's config.json, and the header of its model.safetensors; the rows come from that header."""
    answer, made = requests_of(hub_server, "sentence-transformers/all-MiniLM-L6-v2", home=tmp_path / "hf")
    assert made[0] == ("GET", "/api/models/sentence-transformers/all-MiniLM-L6-v2")
    assert sorted(path.rsplit("/", 1)[1] for _, path in made[1:]) == ["config.json", "model.safetensors", "modules.json"]
    assert answer["library"] == "sentence-transformers" and {row["method"] for row in answer["rows"]} == {"stored"}
    # the checkpoint's 22,713,216 float32 values and 512 int64 position_ids (tests/test_hub_server.py), as hf-mem counts them
    assert answer["rows"][0]["total_bytes"] == 22_713_216 * 4 + 512 * 8


def test_the_weight_file_names_are_the_clients() -> None:
    from huggingface_hub import constants

    from estimator.source import hub

    assert (hub.SAFETENSORS_SINGLE_FILE, hub.SAFETENSORS_INDEX_FILE) == (constants.SAFETENSORS_SINGLE_FILE, constants.SAFETENSORS_INDEX_FILE)


def _metadata(order: list[str]) -> SimpleNamespace:
    """A ``SafetensorsRepoMetadata`` stand-in whose files arrived in ``order`` (as get_safetensors_metadata's threads finish)."""
    def file(*names: str) -> SimpleNamespace:
        return SimpleNamespace(tensors={name: SimpleNamespace(dtype="BF16", shape=[64, 64]) for name in names})
    shards = {"model-00001-of-00002.safetensors": file("model.layers.0.mlp.weight", "model.layers.0.attn.weight"),
              "model-00002-of-00002.safetensors": file("model.layers.1.mlp.weight", "model.layers.1.attn.weight")}
    return SimpleNamespace(files_metadata={name: shards[name] for name in order})


@pytest.mark.parametrize("order", [["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
                                   ["model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"]])
def test_a_tie_for_the_largest_layer_is_named_the_same_whatever_order_the_headers_came(order: list[str]) -> None:
    stored = stored_bytes(tensors_from_metadata(_metadata(order)), DType.BFLOAT16)
    assert (stored.largest_layer_name, stored.largest_layer_bytes) == ("model.layers.0", 2 * 64 * 64 * 2)


def _st_resolved(files: tuple[str, ...]) -> object:
    from estimator.options import Library
    from estimator.source.reference import ModelRef
    from estimator.source.resolve import Resolved

    modules = [{"name": "0", "kind": "Transformer", "path": "", "config": {"architectures": ["BertModel"]}},
               {"name": "1", "kind": "Pooling", "path": "1_Pooling", "config": None},
               {"name": "2", "kind": "Dense", "path": "2_Dense", "config": {"in_features": 64, "out_features": 32}}]
    return Resolved(ref=ModelRef(repo_id="org/st"), source="hub", library=Library.SENTENCE_TRANSFORMERS, config={"architectures": ["BertModel"]},
                    revision="0" * 40, files=files, extra={"modules": modules})


def _header(**tensors: tuple[str, list[int]]) -> SimpleNamespace:
    return SimpleNamespace(metadata=None, sharded=False, files_metadata={"model.safetensors": SimpleNamespace(
        tensors={name: SimpleNamespace(dtype=dtype, shape=shape) for name, (dtype, shape) in tensors.items()})})


def test_a_sentence_transformer_with_a_dense_head_counts_each_modules_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Transformer's tensors under ``0.auto_model.``, the Dense module's own header under ``2.``; a Dense saved only as
    pytorch_model.bin sends the answer to the build."""
    from estimator.load import rows
    from estimator.options import parse_options

    headers = {"": _header(**{"embeddings.word_embeddings.weight": ("F32", [1000, 64]), "pooler.dense.weight": ("F32", [64, 64])}),
               "2_Dense": _header(**{"linear.weight": ("F32", [32, 64]), "linear.bias": ("F32", [32])})}
    asked: list[str] = []

    def metadata(repo_id: str, *, revision: str | None, token: str | None, timeout: float, files: tuple[str, ...], folder: str = "") -> object:
        asked.append(folder)
        return headers[folder] if f"{folder}/model.safetensors".lstrip("/") in files else None

    monkeypatch.setattr(rows.hub, "safetensors_metadata", metadata)
    spec = parse_options(dtypes=["float32", "float16"]).load
    answer = rows.stored_rows(_st_resolved(("model.safetensors", "2_Dense/model.safetensors", "modules.json")), spec,  # type: ignore[arg-type]
                              token=None, timeout=1.0, cross_check=False)
    assert answer is not None and asked == ["", "2_Dense"]
    elements = 1000 * 64 + 64 * 64 + 32 * 64 + 32
    assert [row.total_bytes for row in answer] == [elements * 4, elements * 2]
    assert answer[0].notes[0].endswith("largest layer: 0.auto_model.embeddings.word_embeddings")
    assert answer[0].training_adam_bytes == elements * 4 + elements * rows.ADAM_BYTES_FP32
    assert rows.stored_rows(_st_resolved(("model.safetensors", "2_Dense/pytorch_model.bin", "modules.json")), spec,  # type: ignore[arg-type]
                            token=None, timeout=1.0, cross_check=False) is None
