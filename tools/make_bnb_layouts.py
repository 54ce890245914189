"""Write ``estimator/quant/data/bnb_layouts.json``: which checkpoint tensors bitsandbytes quantizes, per architecture.

    python tools/make_bnb_layouts.py            # write the table, print the byte checks
    python tools/make_bnb_layouts.py --check    # fail if the committed table differs

The checkpoints are the Hub stand-in's safetensors repos (``tests/hub_data``: real configs, and the
tensor names and shapes of the real checkpoints' headers, legacy layouts included) and tiny models of
the architectures in ``tools.bnb_table.SAVED`` written by transformers' own ``save_pretrained``,
untied and tied. Each is classified with transformers' own loading code on a meta build and then
answered from the merged table; the answer must equal the meta-build path minus the tensors the
checkpoint does not fill, to the byte, for int8, int4 and int4 with double quantization, each
with the unquantized modules in float32, float16 and bfloat16 (:mod:`tools.bnb_table`), or the
script fails. Run it again after upgrading transformers: the table records the version it was made with and is not used with another.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Fixture repos that are not real checkpoint layouts.
EXCLUDED = {"estimator-test/tiny-llama-mismatch": "declares a tensor shape its config does not give (a cross-check fixture)"}


def stand_in_checkpoints() -> list:
    from estimator.source.stored import tensors_from_shapes
    from testkit.hub_repos import load_repos, load_shapes
    from tools.bnb_table import Checkpoint

    repos, _ = load_repos()
    checkpoints, seen = [], set()
    for repo in repos.values():
        shapes = repo.meta.get("shapes", repo.id.replace("/", "__"))
        if not repo.meta.get("safetensors") or repo.id in EXCLUDED or shapes in seen or "config.json" not in repo.files:
            continue
        config = json.loads(repo.files["config.json"].data or b"{}")
        if not isinstance(config.get("architectures"), list):
            continue  # timm and diffusers repos: no bitsandbytes rows
        seen.add(shapes)
        checkpoints.append(Checkpoint(name=repo.id, config=config, tensors=tensors_from_shapes(load_shapes(shapes))))
    return sorted(checkpoints, key=lambda c: c.name)


def render(table: dict) -> str:
    return json.dumps(table, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed table instead of writing it")
    args = parser.parse_args(argv)

    import transformers

    from estimator.quant.bnb_stored import TABLE_PATH
    from tools.bnb_table import make_table, saved_by_transformers

    with tempfile.TemporaryDirectory() as folder:
        checkpoints = stand_in_checkpoints() + saved_by_transformers(Path(folder))
        table, checks = make_table(checkpoints, transformers.__version__)
    for check in checks:
        answer = "build" if check.table_bytes is None else f"{check.table_bytes:,}"
        print(f"{check.checkpoint:45} {check.scheme.value:18} {check.load_dtype.value:8} table {answer:>18}  build {check.build_bytes:>18,}  "
              f"not in checkpoint {check.unfilled_bytes:,}")
    text = render(table)
    if args.check:
        current = TABLE_PATH.read_text(encoding="utf-8") if TABLE_PATH.exists() else ""
        if current != text:
            print(f"{TABLE_PATH.relative_to(ROOT)} is out of date: run python tools/make_bnb_layouts.py", file=sys.stderr)
            return 1
        print("up to date")
        return 0
    TABLE_PATH.parent.mkdir(parents=True, exist_ok=True)
    TABLE_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {TABLE_PATH.relative_to(ROOT)} ({len(table['layouts'])} layouts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
