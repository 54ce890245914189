"""The bundled catalog: its data, and the fallback when the Hub cannot be reached.

"No network at all" is a Hub endpoint on a loopback port that was bound and closed, so every
connection is refused, in a subprocess with an empty Hub cache.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from estimator import api
from estimator.errors import HubError, HubTimeoutError, ModelNotFoundError
from estimator.options import Library
from estimator.source import hub
from estimator.source.catalog import (
    catalog_entry,
    catalog_ids,
    catalog_index,
    catalog_lookup,
    read_catalog_json,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "hub_data"  # the project's copies of ../shared/hub-fixtures (models/, models_unverified/)
LLAMA_31_8B_PARAMETERS = 8_030_261_248  # published: the Hub's safetensors metadata of meta-llama/Llama-3.1-8B (BF16)
LLAMA_31_8B_REVISION = "d04e592bb4f6aa9cfee91e2e20afa771667e1d4b"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_no_network_at_all_answers_from_the_catalog(tmp_path: Path) -> None:
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_OFFLINE", None)
    command = [sys.executable, "-m", "estimator", "meta-llama/Llama-3.1-8B", "--dtypes", "float16", "int4", "--timeout", "5"]
    table = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert table.returncode == 0, table.stderr
    assert "source: catalog" in table.stdout
    assert f"answered from the bundled catalog snapshot (2026-11-22, revision {LLAMA_31_8B_REVISION[:12]}" in table.stdout
    data = json.loads(subprocess.run([*command, "--format", "json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False).stdout)
    assert data["source"] == "catalog" and data["revision"] == LLAMA_31_8B_REVISION
    for row in data["rows"]:
        assert "because the Hub could not be reached" in row["notes"][0]
    float16 = data["rows"][0]
    # 2 bytes per published parameter, plus the float32 rotary inv_freq buffers (well under a KiB)
    assert 0 <= float16["total_bytes"] - 2 * LLAMA_31_8B_PARAMETERS < 1024


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def model_info(repo_id: str, **kwargs: object) -> None:
        calls.append(repo_id)
        raise HubTimeoutError(f"The Hub did not answer in time for {repo_id}.", model_id=repo_id)

    monkeypatch.setattr(hub, "model_info", model_info)
    api.clear_cache()
    return calls


def test_catalog_answers_are_not_cached(unreachable: list[str]) -> None:
    for _ in range(2):
        result = api.estimate("gpt2", dtypes=["float32"])
        assert result.source == "catalog" and result.model == "openai-community/gpt2"
    assert unreachable == ["gpt2", "gpt2"]  # the Hub is asked again each time
    assert len(api._CACHE._data) == 0


def test_reconstructed_entries_say_so(unreachable: list[str]) -> None:
    row = api.estimate("meta-llama/Llama-3.1-70B", dtypes=["bfloat16"]).row("bfloat16")
    assert "RECONSTRUCTED" in row.notes[0] and "Hub revision unknown" in row.notes[0]


def test_not_in_catalog_or_other_revision_reraises(unreachable: list[str]) -> None:
    with pytest.raises(HubError, match="did not answer in time"):
        api.estimate("someone/not-bundled", dtypes=["float32"])
    with pytest.raises(HubError, match="did not answer in time"):
        api.estimate("meta-llama/Llama-3.1-8B", revision="0123456789abcdef0123456789abcdef01234567", dtypes=["float32"])


def test_not_found_is_not_answered_from_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    def model_info(repo_id: str, **kwargs: object) -> None:
        raise ModelNotFoundError(f"{repo_id} does not exist on the Hub.", model_id=repo_id)

    monkeypatch.setattr(hub, "model_info", model_info)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        api.estimate("meta-llama/Llama-3.1-8B", dtypes=["float32"])


def test_catalog_pipeline_and_sentence_transformer(unreachable: list[str]) -> None:
    sdxl = api.estimate("stabilityai/stable-diffusion-xl-base-1.0", dtypes=["float16"])
    assert sdxl.library == "diffusers" and "unet (UNet2DConditionModel)" in sdxl.rows[0].notes[1]
    minilm = catalog_lookup("sentence-transformers/all-MiniLM-L6-v2")
    assert minilm is not None and minilm.library is Library.SENTENCE_TRANSFORMERS and minilm.source == "catalog"


def test_index_lists_every_bundled_file() -> None:
    index = catalog_index()
    data = ROOT / "estimator" / "source" / "catalog" / "data"
    listed = {f"{repo.replace('/', '__')}/{name}" for repo, entry in index["models"].items() for name in entry["files"]}
    on_disk = {str(p.relative_to(data)) for p in data.rglob("*.json") if p.name != "index.json"}
    assert listed == on_disk
    for alias, target in index["aliases"].items():
        assert target in index["models"], alias
    for repo in catalog_ids():
        entry = catalog_entry(repo)
        assert entry is not None
        assert entry.reconstructed or entry.files  # every exact entry has its Hub files
        assert isinstance(read_catalog_json(entry, entry.files[0]), (dict, list))


def test_exact_entries_are_byte_copies_of_the_fixtures() -> None:
    for repo in catalog_ids():
        entry = catalog_entry(repo)
        assert entry is not None
        folder = FIXTURES / ("models_unverified" if entry.reconstructed else "models") / repo
        if entry.reconstructed and not folder.is_dir():
            continue  # reconstructed here from published hyper-parameters (bert-base-uncased)
        for name in entry.files:
            bundled = ROOT / "estimator" / "source" / "catalog" / "data" / entry.folder / name
            assert bundled.read_bytes() == (folder / name).read_bytes(), f"{repo}/{name}"
