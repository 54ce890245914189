"""tools/refresh_catalog.py against the Hub stand-in (skipped where the stand-in is not in the tree)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "estimator" / "source" / "catalog" / "data"




def test_refresh_updates_revisions_and_keeps_failures(hub_server: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    env = {"HF_ENDPOINT": hub_server, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "refresh_catalog.py"), "--data", str(data), "gpt2", "google-bert/bert-base-cased", "someone/not-there"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "openai-community/gpt2: up to date" in done.stdout
    assert "google-bert/bert-base-cased: refreshed to" in done.stdout
    assert "someone/not-there: kept the bundled entry" in done.stderr
    index = json.loads((data / "index.json").read_text())
    bert = index["models"]["google-bert/bert-base-cased"]
    assert bert["revision"] and not bert["reconstructed"] and bert["files"] == ["config.json"]
    assert (data / "google-bert__bert-base-cased" / "config.json").read_bytes() == (DATA / "google-bert__bert-base-cased" / "config.json").read_bytes()
    assert "someone/not-there" not in index["models"]
