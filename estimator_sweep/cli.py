"""``estimate-memory sweep`` (``python -m estimator sweep``): flags in, :func:`estimator_sweep.sweep` called, one summary out.

The grid takes the single estimate's option names, each accepting several values (space- or
comma-separated); ``--gpu`` and ``--gpu-memory`` may be repeated. Exit status as the single
estimate's: 0 done (failed estimates are rows, not a failed sweep), 2 bad input, 3 the Hub or the
cluster could not be reached, 1 a bug.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from estimator.messages import user_message
from estimator_sweep.grid import Grid
from estimator_sweep.references import ReferencesError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"estimate-memory sweep: {message} (see --help)\n")


class SweepInputError(ValueError):
    """A flag's value the sweep cannot take (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="estimate-memory sweep", description="Estimate many models over a grid of options on Ray; write a Parquet dataset.")
    what = p.add_argument_group("which models (one of)")
    what.add_argument("--models", metavar="FILE", help="one reference per line: Hub ids, Hub URLs, local folders ('#' starts a comment)")
    what.add_argument("--search", nargs="?", const="", default=None, metavar="TEXT",
                      help="the Hub's model list (HfApi.list_models), optionally matching TEXT")
    what.add_argument("--pipeline-tag", help="--search: only this pipeline tag (text-generation, fill-mask, ...)")
    what.add_argument("--search-library", help="--search: only this library on the Hub (transformers, timm, gguf, ...)")
    what.add_argument("--sort", default="downloads", help="--search: the Hub's sort key (default: downloads)")
    what.add_argument("--limit", default="100", help="--search: how many models (default: 100)")
    grid = p.add_argument_group("the grid (the single estimate's options; several values each)")
    grid.add_argument("--dtypes", nargs="+", help="float32 float16 bfloat16 float8 int8 int4 (default: float32 float16 int8 int4)")
    grid.add_argument("--modes", "--mode", nargs="+", default=["load"], help="load inference training serving (default: load)")
    grid.add_argument("--batch-size", nargs="+", default=["1"], help="inference and training (default: 1)")
    grid.add_argument("--seq-len", nargs="+", default=None, help="inference and training (default: the documented default)")
    grid.add_argument("--max-new-tokens", nargs="+", default=["0"], help="inference (default: 0)")
    grid.add_argument("--optimizer", nargs="+", default=["adamw"], help="training: adamw sgd adafactor adamw8bit (default: adamw)")
    grid.add_argument("--lora-rank", nargs="+", default=None, help="training: LoRA ranks; none or 0 = full fine-tuning (default: none)")
    grid.add_argument("--gradient-checkpointing", nargs="*", default=None, metavar="on|off",
                      help="training: bare flag = on; 'on off' = both (default: off)")
    grid.add_argument("--pure-16bit", action="store_true", help="training: keep 16-bit rows entirely in 16 bits")
    grid.add_argument("--device", default="cuda", help="cuda or cpu (default: cuda)")
    grid.add_argument("--cpu-threads", type=int, default=None, help="--device cpu: threads of the run simulated (default: this machine's torch threads)")
    grid.add_argument("--gpu", action="append", default=[], help="a GPU name; repeat for several (a row per GPU)")
    grid.add_argument("--gpu-memory", action="append", default=[], help="a GPU's memory, e.g. 24GiB; repeat for several")
    grid.add_argument("--library", default="auto", help="which library builds the models (default: auto)")
    run = p.add_argument_group("running")
    run.add_argument("--out", required=True, help="the dataset's folder (parts under DIR/data; a rerun resumes)")
    run.add_argument("--workers", default=None, help="local Ray: worker processes (default: every core)")
    run.add_argument("--ray-address", default=None, help="join this Ray cluster (default: RAY_ADDRESS, else a local one)")
    run.add_argument("--task-timeout", default="300", help="seconds one estimate may take (default: 300)")
    run.add_argument("--task-memory", default="8GiB", help="address space a task may use, e.g. 8GiB (default: 8GiB)")
    run.add_argument("--hub-retries", default="4", help="retries of a Hub call that got 429, 5xx or a timeout, with doubling backoff (default: 4)")
    run.add_argument("--timeout", default="10", help="seconds to wait for each Hub call (default: 10)")
    run.add_argument("--max-retries", default="3", help="times Ray reruns a task whose worker died (default: 3)")
    run.add_argument("--retry-failed", action="store_true", help="recompute parts holding any failed estimate (default: only Hub and limit failures)")
    run.add_argument("--push-to-hub", metavar="ORG/NAME", help="then upload the dataset to this Hub dataset repo (token: HF_TOKEN or the login)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    run.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    return p


def _split(values: Sequence[str] | None) -> list[str]:
    return [v for value in values or () for v in str(value).replace(",", " ").split()]


def _ints(values: Sequence[str] | None, flag: str, *, none_words: tuple[str, ...] = ()) -> list[int | None]:
    out: list[int | None] = []
    for v in _split(values):
        if v.lower() in none_words:
            out.append(None)
            continue
        try:
            number = int(v)
        except ValueError:
            raise SweepInputError(f"{flag} takes whole numbers; got {v!r}.") from None
        out.append(None if none_words and number == 0 else number)
    return out


def _number(value: str, flag: str, kind: type = float) -> float:
    try:
        number = kind(value)
    except ValueError:
        raise SweepInputError(f"{flag} takes a number; got {value!r}.") from None
    if number < 0:
        raise SweepInputError(f"{flag} must not be negative; got {value!r}.")
    return number


def _size(value: str, flag: str) -> int:
    text = value.strip().replace(" ", "")
    units = {"gib": 2**30, "mib": 2**20, "gb": 10**9, "mb": 10**6, "b": 1, "": 1}
    for unit in sorted(units, key=len, reverse=True):
        if text.lower().endswith(unit):
            try:
                return int(float(text[: len(text) - len(unit)]) * units[unit])
            except ValueError:
                break
    raise SweepInputError(f"{flag} takes a size such as 8GiB or 8000MB; got {value!r}.")


def _checkpointing(values: Sequence[str] | None) -> tuple[bool, ...]:
    if values is None:
        return (False,)
    words = _split(values) or ["on"]
    table = {"on": True, "true": True, "1": True, "yes": True, "off": False, "false": False, "0": False, "no": False}
    if any(w.lower() not in table for w in words):
        raise SweepInputError(f"--gradient-checkpointing takes on and/or off; got {' '.join(words)!r}.")
    return tuple(dict.fromkeys(table[w.lower()] for w in words))


def grid_from_args(args: argparse.Namespace) -> Grid:
    return Grid(
        dtypes=tuple(_split(args.dtypes)) or None, modes=tuple(m.lower() for m in _split(args.modes)),
        batch_sizes=tuple(int(b or 1) for b in _ints(args.batch_size, "--batch-size")),
        seq_lens=tuple(_ints(args.seq_len, "--seq-len", none_words=("auto", "default"))) if args.seq_len else (None,),
        max_new_tokens=tuple(int(n or 0) for n in _ints(args.max_new_tokens, "--max-new-tokens")),
        optimizers=tuple(_split(args.optimizer)), lora_ranks=tuple(_ints(args.lora_rank, "--lora-rank", none_words=("none",))) if args.lora_rank else (None,),
        gradient_checkpointing=_checkpointing(args.gradient_checkpointing), pure_16bit=args.pure_16bit, device=args.device,
        cpu_threads=args.cpu_threads, gpus=tuple(args.gpu), gpu_memories=tuple(args.gpu_memory), library=args.library,
    )


def references_from_args(args: argparse.Namespace) -> list[str]:
    from estimator_sweep.references import from_file, from_search

    if (args.models is None) == (args.search is None):
        raise SweepInputError("give the models: --models FILE (one reference per line) or --search [TEXT].")
    if args.models is not None:
        return from_file(Path(args.models))
    return from_search(args.search or None, pipeline_tag=args.pipeline_tag, library=args.search_library, sort=args.sort,
                       limit=int(_number(args.limit, "--limit", int)))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.debug:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from estimator_sweep.run import sweep
        from estimator_sweep.task import Limits

        grid = grid_from_args(args)
        limits = Limits(seconds=_number(args.task_timeout, "--task-timeout"), memory_bytes=_size(args.task_memory, "--task-memory"),
                        hub_retries=int(_number(args.hub_retries, "--hub-retries", int)), timeout=_number(args.timeout, "--timeout"))
        workers = int(_number(args.workers, "--workers", int)) if args.workers else None
        if workers == 0:
            raise SweepInputError("--workers must be at least 1.")
        references = references_from_args(args)
        report = sweep(references, out=args.out, grid=grid, workers=workers, ray_address=args.ray_address, limits=limits,
                       retry_failed=args.retry_failed, max_retries=int(_number(args.max_retries, "--max-retries", int)),
                       progress=None if args.no_progress else sys.stderr)
        print(f"{report.requested} models: {report.computed} estimated, {report.skipped} already there; {report.rows_written} rows written "
              f"({report.failed_rows} with an error) in {report.seconds:.1f} s on {report.workers} workers: {Path(args.out) / 'data'}")
        if args.push_to_hub:
            from estimator_sweep.card import push_to_hub

            url = push_to_hub(Path(args.out), args.push_to_hub, grid=grid)
            print(f"pushed: {url}")
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        if args.debug:
            import traceback

            traceback.print_exc()
        if isinstance(exc, SweepInputError | ReferencesError):
            message, status = str(exc), 2
        elif isinstance(exc, ImportError) and (exc.name or "").split(".")[0] in ("ray", "pyarrow"):
            message, status = (f"the sweep needs {(exc.name or '').split('.')[0]}: pip install 'model-memory-estimator[sweep]' "
                               "(or the pinned versions in requirements.txt)."), 2
        elif isinstance(exc, ConnectionError):
            message, status = f"could not reach the Ray cluster or the Hub: {exc}", 3
        else:
            message, status = user_message(exc)
        print(f"estimate-memory sweep: {message}", file=sys.stderr)
        return status
    return 0
