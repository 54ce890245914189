"""GGUF-only repos: one row per quantization file, from the files' GGUF headers, as llama.cpp runs them.

A GGUF file is the whole model in one quantization; there is no config.json to build from. Each
file's header (metadata and tensor infos) is read with HTTP Range requests and parsed with gguf-py's
tables (:mod:`estimator.gguf.header`); the tensor data are never downloaded. Rows are labelled with the
quantization named in the file name (``Q4_K_M``, ``Q8_0``, ``F16``...); the parts of a split file
(``-00001-of-00003.gguf``) make one row. ``mmproj`` files (vision projectors) are not models of
their own and get no row.

* ``load``: the weights, exact: the sum of the tensors' bytes (:mod:`estimator.gguf.weights`),
  what llama.cpp maps or copies into its model buffers;
* ``inference``: what llama.cpp allocates for one sequence of ``ctx`` tokens: the weights, the
  KV cache (exact, :mod:`estimator.gguf.kv_cache`), the compute buffer (a formula checked
  against llama.cpp, :mod:`estimator.gguf.compute`) and the output buffer (exact);
  with a GPU capacity or ``n_gpu_layers``, the split of layers between GPU and CPU
  (:mod:`estimator.gguf.offload`);
* ``training`` is refused (:class:`~estimator.errors.UnsupportedError`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from estimator.errors import BadOptionError, Option, UnsupportedError
from estimator.gguf import compute, kv_cache, placement
from estimator.gguf.header import FIRST_READ, GGUFHeader, read_header
from estimator.gguf.hparams import HParams, hparams
from estimator.gguf.weights import weights
from estimator.options import FlashAttn, GGUFSpec, Mode, Options
from estimator.result import Estimate, Row
from estimator.source import hub
from estimator.units import format_bytes

_QUANT = re.compile(r"(?i)(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32|FP16|FP32)(?=(?:-\d{5}-of-\d{5})?\.gguf$|[-_.])")
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})(?=\.gguf$)")
_WORKERS = 8
# the speed of one row (estimator.speed, passed in by estimator.api): (tensors, hparams, n_gpu_layers, n_ctx) -> (JSON, note)
SpeedFn = Callable[[tuple[Any, ...], HParams, int, int], "tuple[dict[str, Any], str]"]


def gguf_files(files: tuple[str, ...]) -> list[str]:
    return [name for name in files if name.lower().endswith(".gguf")]


def model_files(files: tuple[str, ...]) -> list[str]:
    """The GGUF files that are models (not ``mmproj`` vision projectors)."""
    return [name for name in gguf_files(files) if not name.rsplit("/", 1)[-1].lower().startswith("mmproj")]


def is_gguf_only(files: tuple[str, ...]) -> bool:
    """True when the repo has GGUF files and no config.json to build a model from (``estimator.api._gguf_only`` too)."""
    return bool(gguf_files(files)) and "config.json" not in files


def quantization_label(filename: str) -> str:
    """The quantization a GGUF file name states, upper-cased; the file name when none is stated."""
    stem = filename.rsplit("/", 1)[-1]
    match = _QUANT.search(stem)
    return match.group(1).upper() if match else _SHARD.sub("", stem)


def check_mode(repo_id: str, mode: Mode, *, revision: str | None = None) -> None:
    """Refuse a mode GGUF rows do not answer (training, serving: only load and llama.cpp inference are)."""
    if mode not in (Mode.LOAD, Mode.INFERENCE):
        raise UnsupportedError(
            [f"{repo_id} holds only GGUF files, and GGUF files are estimated for loading and inference (llama.cpp) only: ",
             Option("mode"), f" {mode.value} is not available for them. Ask for ", Option("mode"), " load or inference, or pick a repo "
             "of the same model with a config.json (safetensors weights)."],
            model_id=repo_id, revision=revision,
        )


def _groups(names: list[str], wanted: str | None, repo_id: str) -> dict[str, list[str]]:
    """Files by quantization label, the parts of a split in order; only ``wanted``'s group when given."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(quantization_label(name), []).append(name)
    for members in groups.values():
        members.sort()
    if wanted is None:
        return groups
    for label, members in groups.items():
        if wanted in members or wanted == label or wanted.upper() == label:
            return {label: members}
    listing = ", ".join(names) if len(names) <= 30 else ", ".join(names[:30]) + f" and {len(names) - 30} more"
    raise BadOptionError([Option("gguf_file"), f" {wanted!r} is not a GGUF file of {repo_id}; its files are {listing}."], model_id=repo_id)


def _headers(info: Any, names: list[str], sizes: dict[str, int], token: str | None, timeout: float) -> dict[str, GGUFHeader]:
    """Every file's header; the first read alone, the others in parallel, asked at once for as many bytes as its header took.

    The quantizations of one model share their metadata (vocabulary included), so their headers are
    about as long: one request each instead of three growing ones.
    """

    def one(name: str, first_read: int = FIRST_READ) -> GGUFHeader:
        def read(start: int, stop: int) -> bytes:
            return hub.read_range(info.id, name, start, stop, revision=info.sha, token=token, timeout=timeout)

        return read_header(name, sizes[name], read, first_read)

    first = one(names[0])
    size_hint = first.data_offset + (64 << 10)
    with ThreadPoolExecutor(max_workers=min(_WORKERS, max(1, len(names) - 1))) as pool:
        rest = list(pool.map(lambda name: one(name, size_hint), names[1:]))
    return dict(zip(names, [first, *rest], strict=True))


def _ctx_source(spec: GGUFSpec, context: int | None) -> str:
    if spec.ctx is not None:
        return ""
    return " (seq_len + max_new_tokens)" if context is not None else " (the model's training context, llama.cpp's default)"


def _ctx_kind(spec: GGUFSpec, context: int | None) -> str:
    """Where the context came from: "given" (--ctx), "prompt" (seq_len + max_new_tokens) or "training" (-c 0)."""
    return "given" if spec.ctx is not None else "prompt" if context is not None else "training"


def _type_summary(by_type: dict[str, int]) -> str:
    return ", ".join(f"{name} {format_bytes(size)}" for name, size in by_type.items())


def _row(label: str, members: list[str], headers: dict[str, GGUFHeader], mode: Mode, spec: GGUFSpec, capacity_bytes: int | None,
         gpu: str | None, context: int | None, speed: SpeedFn | None = None) -> tuple[Row, int]:
    parts = [headers[name] for name in members]
    w = weights(parts)
    file_bytes = sum(h.file_size for h in parts)
    header_bytes = file_bytes - w.total
    largest = max((*w.layers, w.output), default=None)
    notes = [
        f"GGUF: {', '.join(members)} ({format_bytes(file_bytes)}: tensors {w.total:,} bytes + header and alignment {header_bytes:,} bytes); "
        f"weights by type: {_type_summary(w.by_type)}",
    ]
    if mode is Mode.LOAD:  # the weights alone: no hyperparameters needed (a recurrent model loads too)
        notes.append("largest layer: the largest blk.N (or the output layer), the unit llama.cpp offloads; training is not estimated for GGUF files")
        return Row(dtype=label, total_bytes=w.total, largest_layer_bytes=largest, training_adam_bytes=None, method="stored", notes=tuple(notes)), 0
    hp = hparams(parts[0])
    n_ctx = context or hp.n_ctx_train
    if n_ctx <= 0:
        raise BadOptionError([f"{members[0]} states no context length; give one with ", Option("ctx"), "."])
    flash = spec.flash_attn is not FlashAttn.OFF
    if not flash and spec.type_v not in ("f16", "f32", "bf16"):
        raise BadOptionError([Option("cache_type"), f" {spec.type_v} quantizes the V cache, which llama.cpp allows only with flash attention; "
                              "drop ", Option("flash_attn"), " off or use f16."])
    kv = kv_cache.kv_cache(hp, n_ctx, type_k=spec.cache_type, type_v=spec.type_v, flash_attn=flash)
    bufs = compute.buffers(hp, kv, flash_attn=flash, type_k=spec.cache_type, type_v=spec.type_v)
    components = {"weights": w.total, "kv_cache": kv.total, "activations": bufs.compute, "output_buffer": bufs.output}
    swa = f"; sliding-window layers {sum(hp.is_swa)} of {hp.n_layer} hold {kv.swa_cells:,} cells" if kv.swa_cells else ""
    if not hp.has_kv_cache:
        swa += f"; {hp.arch} runs without a KV cache in llama.cpp (an encoder or diffusion model): the compute buffer is not checked for it"
    notes += [
        f"llama.cpp, one sequence: n_ctx {n_ctx:,}{_ctx_source(spec, context)} padded to {kv.cells:,} cells{swa}; KV cache K {spec.cache_type} {kv.k_bytes:,} + "
        f"V {spec.type_v} {kv.v_bytes:,} bytes{' (MLA: no V cache)' if hp.mla else ''}",
        f"activations = llama.cpp's compute buffer for a batch of {bufs.n_tokens} tokens (n_ubatch 512), flash attention "
        f"{'on' if flash else 'off'}{' (auto: on where the backend supports it, as CPU and CUDA do)' if spec.flash_attn is FlashAttn.AUTO else ''}: "
        "a formula checked against llama.cpp (docs/gguf.md); weights, KV cache and output buffer (logits) are exact",
    ]
    plan = placement.Plan(hp=hp, w=w, n_ctx=n_ctx, ctx_source=_ctx_kind(spec, context), type_k=spec.cache_type, type_v=spec.type_v,
                          flash_attn=flash, n_gpu_layers=spec.n_gpu_layers)
    offload_split = None
    if capacity_bytes is not None:  # the verdict on that GPU, the same sentence as the "fits on" table's (estimator.gguf.placement)
        answer = plan.answer(capacity_bytes)
        offload_split = answer.split
        notes.append(f"offload on {gpu or 'the GPU'} ({format_bytes(capacity_bytes)} usable): n_gpu_layers {offload_split.n_gpu_layers} of "
                     f"{offload_split.n_offloadable}: GPU {format_bytes(offload_split.gpu_bytes)}, CPU {format_bytes(offload_split.cpu_bytes)} "
                     f"(token embeddings stay on the CPU); {answer.text()}")
    elif spec.n_gpu_layers is not None:
        offload_split = plan.split(n_ctx, spec.n_gpu_layers)
        notes.append(f"offload: n_gpu_layers {offload_split.n_gpu_layers} of {offload_split.n_offloadable}: GPU "
                     f"{format_bytes(offload_split.gpu_bytes)}, CPU {format_bytes(offload_split.cpu_bytes)} (token embeddings stay on the CPU)")
    speed_answer = None
    if speed is not None:  # llama.cpp's speed on the hardware asked for, with this split (estimator.speed.llamacpp)
        tensors = tuple(t for part in parts for t in part.tensors)
        speed_answer, speed_note = speed(tensors, hp, -1 if offload_split is None else offload_split.n_gpu_layers, n_ctx)
        notes.append(speed_note)
    row = Row(
        dtype=label, total_bytes=w.total, largest_layer_bytes=largest, training_adam_bytes=None, method="formula",
        peak_bytes=sum(components.values()), components=components, notes=tuple(notes),
        offload=None if offload_split is None else offload_split.to_dict(), gguf_plan=plan, speed=speed_answer,
    )
    return row, n_ctx


def gguf_estimate(
    info: Any, *, options: Options, token: str | None, timeout: float, capacity_bytes: int | None = None, speed: SpeedFn | None = None,
) -> Estimate:
    """One row per quantization of a GGUF-only repo (``info``: its ``model_info``).

    ``capacity_bytes``: the usable memory of the GPU asked for (``options.hardware.gpu``), to split
    the layers by; ``options.gguf.n_gpu_layers`` fixes the split instead. ``speed``: llama.cpp's speed of
    each inference row on that hardware (``rows[].speed``), given by :mod:`estimator.api`.
    """
    check_mode(info.id, options.mode, revision=info.sha)
    _check_batch(options, info.id, info.sha)
    files = tuple(s.rfilename for s in (info.siblings or []))
    names = model_files(files)
    if not names:
        raise UnsupportedError(f"{info.id} holds only vision projector (mmproj) GGUF files; there is no language model to estimate.", model_id=info.id)
    groups = _groups(names, options.gguf.gguf_file, info.id)
    wanted = [name for members in groups.values() for name in members]
    sizes = hub.file_sizes(info.id, wanted, revision=info.sha, token=token, timeout=timeout)
    headers = _headers(info, wanted, sizes, token, timeout)
    return _estimate(info.id, info.sha, "hub", groups, headers, options, capacity_bytes, speed)


def local_gguf_files(path: Path) -> list[Path]:
    """The model GGUF files a local path names: the file itself, or a folder's ``*.gguf`` files (not ``mmproj``)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and p.name in model_files((p.name,)))


def local_gguf_estimate(path: Path, *, options: Options, capacity_bytes: int | None = None, speed: SpeedFn | None = None) -> Estimate:
    """As :func:`gguf_estimate` for a local ``.gguf`` file (one row) or a folder of them (one row per quantization);
    the headers are read from the disk, the tensor data never."""
    model = str(path)
    check_mode(model, options.mode)
    _check_batch(options, model, None)
    files = local_gguf_files(path)
    if not files:
        raise UnsupportedError(f"{model} holds no GGUF model file (only mmproj vision projectors, or none).", model_id=model)
    by_name = {p.name: p for p in files}
    groups = _groups(list(by_name), options.gguf.gguf_file, model)
    headers = {}
    for name in [name for members in groups.values() for name in members]:
        headers[name] = read_header(name, by_name[name].stat().st_size, _file_reader(by_name[name]))
    return _estimate(model, None, "local", groups, headers, options, capacity_bytes, speed)


def _file_reader(path: Path) -> Callable[[int, int], bytes]:
    def read(start: int, stop: int) -> bytes:
        with path.open("rb") as handle:
            handle.seek(start)
            return handle.read(stop - start)

    return read


def _check_batch(options: Options, model: str, revision: str | None) -> None:
    shape = options.work.shape
    if options.mode is Mode.INFERENCE and shape.batch_size != 1:  # before any header is read
        raise UnsupportedError([Option("batch_size"), f" {shape.batch_size}: GGUF inference is estimated for one sequence (llama.cpp's "
                                "default, -np 1); ask for 1."], model_id=model, revision=revision)


def _estimate(model: str, revision: str | None, source: Literal["hub", "local"], groups: dict[str, list[str]], headers: dict[str, GGUFHeader],
              options: Options, capacity_bytes: int | None, speed: SpeedFn | None = None) -> Estimate:
    mode, spec, shape = options.mode, options.gguf, options.work.shape
    wanted = [name for members in groups.values() for name in members]
    # the context: ctx, else the prompt and the tokens to generate (seq_len + max_new_tokens), else the model's own
    context = spec.ctx or (shape.seq_len + shape.max_new_tokens if shape.seq_len is not None else None)
    rows = []
    contexts = set()
    for label, members in groups.items():
        row, n_ctx = _row(label, members, headers, mode, spec, capacity_bytes, options.hardware.gpu, context, speed)
        rows.append(row)
        contexts.add(n_ctx)
    shaped: dict[str, Any] = {
        "library": options.load.library.value, "dtypes": list(groups), "mode": mode.value, "revision": revision,
        "trust_remote_code": options.load.trust_remote_code,
    }
    if spec.gguf_file is not None:
        shaped["gguf_file"] = spec.gguf_file
    if mode is Mode.INFERENCE:
        shaped.update(
            ctx=spec.ctx if spec.ctx is not None else (contexts.pop() if len(contexts) == 1 else None),
            cache_type=spec.cache_type, flash_attn=spec.flash_attn.value, n_gpu_layers=spec.n_gpu_layers,
        )
        if spec.cache_type_v is not None:
            shaped["cache_type_v"] = spec.cache_type_v
        if options.hardware.gpu is not None:
            shaped["gpu"] = options.hardware.gpu
    first = headers[wanted[0]]
    return Estimate(
        model=model, revision=revision, library="gguf", source=source, mode=mode, rows=tuple(rows), options=shaped,
        architecture=str(first.metadata.get("general.architecture") or "") or None,
    )
