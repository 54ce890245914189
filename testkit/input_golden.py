"""Golden file of which workload and inputs each coverage type gets, nothing simulated.

For every ``model_type`` of transformers' registry: the coverage bench's task class and small config
(:func:`testkit.coverage.small_config`, built on the meta device only), the media the estimator asks
for a default inference request (:func:`estimator.peak.rows.media_request`: images, audio or none),
then the workload the engine picks (:func:`estimator.peak.engine.pick_workload`, media or text) and the
inputs its ``make_inputs`` makes under a fake mode: names, shapes and dtypes. Nothing is run through
the model, so the whole registry takes minutes, not the bench's ten.

The expected records are kept in ``tests/data/input_golden.json`` (as torchinfo keeps its expected
outputs): ``python -m testkit.input_golden --check`` compares every type against it (exit status 1
and the differences where any differ), ``--regenerate`` rewrites it, ``--types a b`` limits either to
those types. ``tests/test_input_golden.py`` checks a fixed sample in CI.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "data" / "input_golden.json"


def _tensor(value: Any) -> Any:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return [list(shape), str(dtype).removeprefix("torch.")]
    if isinstance(value, (list, tuple)):
        return [_tensor(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _tensor(v) for k, v in value.items()}
    return type(value).__name__ if not isinstance(value, (int, float, str, bool, type(None))) else value


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def record(model_type: str, *, seq_len: int = 32) -> dict[str, Any]:
    """The golden record of one type: class, level, media asked, workload (description, kind, flags,
    notes of inputs left out) and the inputs' names, shapes and dtypes; or why there is none."""
    import contextlib

    from torch._subclasses.fake_tensor import FakeTensorMode

    from estimator.options import Mode
    from estimator.options.specs import InputShape, WorkSpec
    from estimator.peak.engine import pick_workload
    from estimator.peak.rows import media_request
    from estimator.peak.sim.materialize import materialize
    from testkit.coverage import small_config

    small, name, model, level, reason = small_config(model_type, meta_only=True)
    if small is None:
        return {"class": name or None, "skipped": (reason or "")[:200]}
    out: dict[str, Any] = {"class": name, "level": level}
    work = WorkSpec(mode=Mode.INFERENCE, shape=InputShape(seq_len=seq_len))
    resolved = SimpleNamespace(config=small, extra={}, name=model_type)
    try:
        media = media_request(resolved, work)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - a refusal is part of the record
        out["media"] = _error(exc)
        return out
    out["media"] = None if media is None else ("audio" if media.images == 0 and not media.video_frames else "images")
    fake_mode = FakeTensorMode(static_shapes=True)
    try:
        workload, unfed = pick_workload(model, media, 1, seq_len, None)
    except Exception as exc:  # noqa: BLE001 - a model no workload fits: the record says why
        out["workload"] = _error(exc)
        return out
    out.update(kind=workload.kind.value, description=workload.description, full_first_step=workload.full_first_step,
               states_for_all=workload.states_for_all, context=workload.context is not None,
               unfed=[u[:120] for u in unfed])
    try:
        materialize(model, fake_mode)
        context = workload.context() if workload.context is not None else contextlib.nullcontext()
        with fake_mode, context:
            inputs = workload.make_inputs()
        out["inputs"] = {k: _tensor(v) for k, v in inputs.items()}
    except Exception as exc:  # noqa: BLE001 - inputs that cannot be made: the record says why
        out["inputs"] = _error(exc)
    finally:
        FakeTensorMode.cache_clear()
    return out


def generate(types: list[str]) -> dict[str, dict[str, Any]]:
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    found = {}
    for i, model_type in enumerate(types):
        try:
            found[model_type] = record(model_type)
        except Exception as exc:  # noqa: BLE001 - the generator's own failure is a record too
            found[model_type] = {"error": _error(exc)}
        print(f"{i + 1}/{len(types)} {model_type}", file=sys.stderr, flush=True)
    return found


def all_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


def differences(expected: dict[str, Any], found: dict[str, Any]) -> list[str]:
    return [f"{t}:\n  expected {json.dumps(expected.get(t), sort_keys=True)}\n  found    {json.dumps(found[t], sort_keys=True)}"
            for t in found if expected.get(t) != found[t]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regenerate", action="store_true", help=f"rewrite {GOLDEN.name}")
    parser.add_argument("--check", action="store_true", help=f"compare against {GOLDEN.name}")
    parser.add_argument("--types", nargs="*", help="only these model types")
    args = parser.parse_args(argv)
    types = args.types or all_types()
    found = json.loads(json.dumps(generate(types)))
    if args.regenerate:
        golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() and args.types else {}
        golden.update(found)
        lines = [f"{json.dumps(t)}: {json.dumps(golden[t], sort_keys=True)}" for t in sorted(golden)]  # one line per type
        GOLDEN.write_text("{\n" + ",\n".join(lines) + "\n}\n")
        print(f"{len(found)} records written to {GOLDEN}", file=sys.stderr)
        return 0
    diff = differences(json.loads(GOLDEN.read_text()), found)
    print("\n".join(diff) or f"{len(found)} of {len(found)} records equal", file=sys.stderr)
    print(f"{len(found) - len(diff)} of {len(found)} equal, {len(diff)} differ", file=sys.stderr)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
