"""GGUF-only repos: one row per quantization file, sized as the Hub declares each file.

A GGUF file is the whole model in one quantization (weights plus a small header), so loading it
takes about the file's size; there is no config.json to build from. Rows are labelled with the
quantization named in the file name (``Q4_K_M``, ``Q8_0``, ``F16``...). Sharded GGUF files
(``-00001-of-00003.gguf``) are summed per quantization.

Only loading is estimated: a request for inference or training is refused
(:class:`~estimator.errors.UnsupportedError`) rather than answered with load rows, and the
result's ``options`` say what was computed: mode ``load``, and as ``dtypes`` the quantizations of
the rows, whatever dtypes were asked (a GGUF file has one quantization; it is not converted).
"""

from __future__ import annotations

import re
from typing import Any

from estimator.errors import Option, UnsupportedError
from estimator.options import LoadSpec, Mode
from estimator.result import Estimate, Row
from estimator.source import hub

_QUANT = re.compile(r"(?i)(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32|FP16|FP32)(?=(?:-\d{5}-of-\d{5})?\.gguf$|[-_.])")
_SHARD = re.compile(r"-\d{5}-of-\d{5}(?=\.gguf$)")


def gguf_files(files: tuple[str, ...]) -> list[str]:
    return [name for name in files if name.lower().endswith(".gguf")]


def is_gguf_only(files: tuple[str, ...]) -> bool:
    """True when the repo has GGUF files and no config.json to build a model from."""
    return bool(gguf_files(files)) and "config.json" not in files


def quantization_label(filename: str) -> str:
    """The quantization a GGUF file name states, upper-cased; the file name when none is stated."""
    stem = filename.rsplit("/", 1)[-1]
    match = _QUANT.search(stem)
    return match.group(1).upper() if match else _SHARD.sub("", stem)


def check_mode(repo_id: str, mode: Mode, *, revision: str | None = None) -> None:
    """Refuse a mode GGUF rows do not answer yet (all but ``load``)."""
    if mode is not Mode.LOAD:
        raise UnsupportedError(
            [f"{repo_id} holds only GGUF files, and GGUF files are estimated for loading only: ", Option("mode"),
             f" {mode.value} is not available for them yet. Ask for ", Option("mode"), " load, or pick a repo of the same "
             "model with a config.json (safetensors weights)."],
            model_id=repo_id, revision=revision,
        )


def gguf_estimate(info: Any, *, load: LoadSpec, mode: Mode, token: str | None, timeout: float) -> Estimate:
    """One row per quantization file of a GGUF-only repo (``info``: its ``model_info``); ``load`` mode only."""
    check_mode(info.id, mode, revision=info.sha)
    files = tuple(s.rfilename for s in (info.siblings or []))
    names = gguf_files(files)
    sizes = hub.file_sizes(info.id, names, revision=info.sha, token=token, timeout=timeout)
    totals: dict[str, int] = {}
    members: dict[str, list[str]] = {}
    for name in names:
        label = quantization_label(name)
        totals[label] = totals.get(label, 0) + sizes[name]
        members.setdefault(label, []).append(name)
    rows = tuple(
        Row(
            dtype=label,
            total_bytes=total,
            largest_layer_bytes=None,
            training_adam_bytes=None,
            method="stored",
            notes=(f"GGUF: the declared size of {', '.join(members[label])}; largest layer and training are not given for GGUF files",),
        )
        for label, total in totals.items()
    )
    gguf_meta = getattr(info, "gguf", None) or {}
    options = {
        "library": load.library.value, "dtypes": list(totals), "mode": Mode.LOAD.value, "revision": info.sha,
        "trust_remote_code": load.trust_remote_code,
    }
    return Estimate(
        model=info.id, revision=info.sha, library="gguf", source="hub", mode=Mode.LOAD, rows=rows, options=options,
        architecture=gguf_meta.get("architecture") if isinstance(gguf_meta, dict) else None,
    )
