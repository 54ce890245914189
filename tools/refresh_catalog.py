"""Refresh the bundled catalog (``estimator/source/catalog/data``) from the Hub.

    python tools/refresh_catalog.py                 # every entry in index.json
    python tools/refresh_catalog.py gpt2 org/name   # these repos (new ones are added)
    python tools/refresh_catalog.py --dry-run       # say what would change, write nothing

For each repo: ``model_info`` gives the current commit and the file list; the config files an
estimate reads (``config.json``, ``model_index.json`` and each component's ``config.json``,
``modules.json`` and the sentence-transformers module configs, ``scheduler_config.json``) are
downloaded at that commit and replace the bundled copies; the entry records the commit as its
``revision`` and is no longer ``reconstructed``. A repo the Hub cannot give (network, gated
without a token, gone) keeps its current entry, and the script says so. Weights, tokenizers and
checkpoint indexes are never bundled. Uses ``HF_ENDPOINT`` and ``HF_TOKEN`` like every
huggingface_hub program.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "estimator" / "source" / "catalog" / "data"
TOP_LEVEL = {"config.json", "model_index.json", "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"}
IN_FOLDER = {"config.json", "scheduler_config.json"}


def config_files(siblings: list[str]) -> list[str]:
    """The repo files an estimate reads: top-level configs and one level of component configs."""
    chosen = []
    for name in siblings:
        parts = name.split("/")
        if (len(parts) == 1 and name in TOP_LEVEL) or (len(parts) == 2 and parts[1] in IN_FOLDER):
            chosen.append(name)
    return sorted(chosen)


def library_of(info: Any, files: list[str]) -> str:
    if info.library_name in ("transformers", "timm", "diffusers", "sentence-transformers"):
        return str(info.library_name)
    if "model_index.json" in files:
        return "diffusers"
    if "modules.json" in files:
        return "sentence-transformers"
    return "transformers"


def refresh(repo_id: str, index: dict[str, Any], *, data: Path, token: str | None, dry_run: bool) -> str:
    """Refresh one entry in ``index`` (and its files on disk); returns a line for the log."""
    from huggingface_hub import HfApi, hf_hub_download

    info = HfApi().model_info(repo_id, token=token)
    siblings = [s.rfilename for s in info.siblings or []]
    files = config_files(siblings)
    if not files:
        return f"{repo_id}: skipped, no config files in the repo"
    old = index["models"].get(repo_id, {})
    if old.get("revision") == info.sha and not old.get("reconstructed") and old.get("files") == files:
        return f"{repo_id}: up to date at {info.sha}"
    if dry_run:
        return f"{repo_id}: would refresh {old.get('revision')} -> {info.sha} ({len(files)} files)"
    folder = data / repo_id.replace("/", "__")
    staging = folder.with_name(folder.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    for name in files:
        path = hf_hub_download(repo_id, name, revision=info.sha, token=token)
        json.loads(Path(path).read_text(encoding="utf-8"))  # refuse to bundle a file that is not JSON
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, staging / name)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    index["models"][repo_id] = {
        "revision": info.sha,
        "library": library_of(info, files),
        "reconstructed": False,
        "files": files,
        "source": f"Hub files at revision {info.sha}",
        "snapshot": dt.date.today().isoformat(),
    }
    return f"{repo_id}: refreshed to {info.sha}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repos", nargs="*", help="repo ids (default: every entry of the catalog)")
    parser.add_argument("--token", default=None, help="Hub token for gated repos (default: HF_TOKEN or the login cache)")
    parser.add_argument("--dry-run", action="store_true", help="report what would change; write nothing")
    parser.add_argument("--data", type=Path, default=DATA, help="the catalog's data folder (default: the package's)")
    args = parser.parse_args(argv)

    index_path = args.data / "index.json"
    index = json.loads(index_path.read_text(encoding="utf-8"))
    repos = args.repos or list(index["models"])
    failures = 0
    for repo_id in repos:
        repo_id = index.get("aliases", {}).get(repo_id, repo_id)
        try:
            print(refresh(repo_id, index, data=args.data, token=args.token, dry_run=args.dry_run))
        except Exception as exc:  # noqa: BLE001 - one repo's failure must not stop the others
            failures += 1
            print(f"{repo_id}: kept the bundled entry ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})", file=sys.stderr)
    if not args.dry_run and failures < len(repos):
        index["models"] = dict(sorted(index["models"].items()))
        index_path.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return 1 if failures == len(repos) else 0


if __name__ == "__main__":
    raise SystemExit(main())
