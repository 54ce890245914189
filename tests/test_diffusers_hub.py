"""Hub repos of the new kinds through the Hub stand-in (the session stand-in of tests/conftest.py).

A diffusers pipeline (SDXL), a sentence-transformers repo (all-MiniLM-L6-v2) and the int rows of a
Hub transformers repo go through ``resolve_hub`` and ``hf_hub_download``, and must give the same
bytes as the same files read from the bundled catalog (checked against real loads elsewhere); the
transformers int rows, read from safetensors headers, lack only the buffers no checkpoint stores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "estimator" / "source" / "catalog" / "data"

SCRIPT = r"""
import json, sys
from estimator import estimate
model, library, dtypes = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
print(json.dumps(estimate(model, library=library, dtypes=dtypes).to_dict()))
"""




def _estimate(endpoint: str, home: Path, model: str, dtypes: str, library: str = "auto") -> dict:
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HOME": str(home), "PYTHONPATH": str(ROOT), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("HF_TOKEN", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, model, library, dtypes], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("repo", "library", "folder"),
    [
        ("stabilityai/stable-diffusion-xl-base-1.0", "diffusers", "stabilityai__stable-diffusion-xl-base-1.0"),
        ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers", "sentence-transformers__all-MiniLM-L6-v2"),
    ],
)
def test_hub_repo_equals_its_files_read_locally(hub_server: str, tmp_path: Path, repo: str, library: str, folder: str) -> None:
    from estimator import estimate

    hub = _estimate(hub_server, tmp_path / "hf", repo, "float16,int4")
    assert hub["source"] == "hub" and hub["library"] == library and hub["revision"]
    local = estimate(str(CATALOG / folder), dtypes=["float16", "int4"])
    assert [r["total_bytes"] for r in hub["rows"]] == [r.total_bytes for r in local.rows]


def test_hub_transformers_int_rows(hub_server: str, tmp_path: Path) -> None:
    from estimator import estimate

    hub = _estimate(hub_server, tmp_path / "hf", "meta-llama/Llama-3.1-8B", "bfloat16,int8,int4")
    assert hub["rows"][0]["method"] == "stored"
    local = estimate(str(CATALOG / "meta-llama__Llama-3.1-8B"), dtypes=["int8", "int4"])
    # The Hub answer reads the checkpoint's headers (method "stored", docs/quantization.md): the rotary
    # buffers the model makes and no checkpoint stores are not in it; the local answer is a meta build.
    import torch

    from estimator.build import build_transformers
    from testkit.truth import unsaved_bytes

    model = build_transformers(json.loads((CATALOG / "meta-llama__Llama-3.1-8B" / "config.json").read_text()), torch.float16, model="llama")
    unsaved = unsaved_bytes(model)
    assert unsaved == 512
    assert [r["total_bytes"] for r in hub["rows"][1:]] == [r.total_bytes - unsaved for r in local.rows]
    assert all(r["method"] == "stored" and r["training_adam_bytes"] is None for r in hub["rows"][1:])
    assert all(r.method == "exact" for r in local.rows)
