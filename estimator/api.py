"""``estimate()``: the one entry point of the core. Returns an :class:`Estimate`; never prints."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from estimator import gguf, hub
from estimator.cache import LRUCache
from estimator.errors import HubError, UnsupportedError
from estimator.limits import check_config
from estimator.options import Device, DType, Library, Mode, Optimizer, parse_dtypes, positive_int
from estimator.reference import parse_reference
from estimator.resolve import Resolved, resolve_hub, resolve_local
from estimator.result import Estimate, Row

logger = logging.getLogger(__name__)

_CACHE: LRUCache[Estimate] = LRUCache(maxsize=256)
STORED_DTYPES = {DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.INT8, DType.INT4}


@dataclass(frozen=True)
class Options:
    """Every option, parsed and validated once."""

    library: Library
    dtypes: tuple[DType, ...]
    mode: Mode
    device: Device
    optimizer: Optimizer
    batch_size: int
    seq_len: int | None
    image_size: int | None
    max_new_tokens: int
    pure_16bit: bool
    gradient_checkpointing: bool
    lora_rank: int | None
    lora_targets: tuple[str, ...] | None
    gpu: str | None
    trust_remote_code: bool

    def shaping(self, revision: str | None) -> dict[str, Any]:
        """The options that shaped the result, by CLI name ('-' -> '_'), for ``Estimate.options``."""
        shaped: dict[str, Any] = {
            "library": self.library.value,
            "dtypes": [d.value for d in self.dtypes],
            "mode": self.mode.value,
            "revision": revision,
            "trust_remote_code": self.trust_remote_code,
        }
        if self.mode is not Mode.LOAD:
            from estimator.peakrows import DEFAULT_SEQ_LEN

            shaped.update(batch_size=self.batch_size, seq_len=self.seq_len or DEFAULT_SEQ_LEN, image_size=self.image_size, device=self.device.value)
        if self.mode is Mode.INFERENCE:
            shaped["max_new_tokens"] = self.max_new_tokens
        if self.mode is Mode.TRAINING:
            shaped.update(optimizer=self.optimizer.value, pure_16bit=self.pure_16bit, gradient_checkpointing=self.gradient_checkpointing)
        return shaped

    def key(self) -> tuple[Any, ...]:
        return tuple(sorted((k, str(v)) for k, v in self.__dict__.items()))


def parse_options(
    *, library: str = "auto", dtypes: Any = None, mode: str = "load", device: str = "cuda", optimizer: str = "adamw",
    batch_size: Any = 1, seq_len: Any = None, image_size: Any = None, max_new_tokens: Any = 0, pure_16bit: bool = False,
    gradient_checkpointing: bool = False, lora_rank: Any = None, lora_targets: Any = None, gpu: str | None = None,
    trust_remote_code: bool = False,
) -> Options:
    options = Options(
        library=Library.parse(library, option="library"),  # type: ignore[arg-type]
        dtypes=parse_dtypes(dtypes),
        mode=Mode.parse(mode, option="mode"),  # type: ignore[arg-type]
        device=Device.parse(device, option="device"),  # type: ignore[arg-type]
        optimizer=Optimizer.parse(optimizer, option="optimizer"),  # type: ignore[arg-type]
        batch_size=positive_int(batch_size, option="batch-size", maximum=1 << 20),
        seq_len=None if seq_len is None else positive_int(seq_len, option="seq-len", maximum=1 << 24),
        image_size=None if image_size is None else positive_int(image_size, option="image-size", maximum=1 << 16),
        max_new_tokens=positive_int(max_new_tokens, option="max-new-tokens", minimum=0, maximum=1 << 24),
        pure_16bit=bool(pure_16bit),
        gradient_checkpointing=bool(gradient_checkpointing),
        lora_rank=None if lora_rank is None else positive_int(lora_rank, option="lora-rank", maximum=1 << 16),
        lora_targets=None if not lora_targets else tuple(str(lora_targets).split(",")) if isinstance(lora_targets, str) else tuple(lora_targets),
        gpu=gpu or None,
        trust_remote_code=bool(trust_remote_code),
    )
    unsupported = []
    if options.lora_rank is not None:
        unsupported.append("--lora-rank")
    if options.gpu is not None:
        unsupported.append("--gpu")
    if unsupported:
        raise UnsupportedError(f"{', '.join(unsupported)} is not available yet.")
    if options.mode is Mode.TRAINING:
        from estimator.peakrows import check_supported

        check_supported(options)
    return options


def estimate(
    model: str, *, library: str = "auto", dtypes: Any = None, mode: str = "load", batch_size: Any = 1, seq_len: Any = None,
    image_size: Any = None, max_new_tokens: Any = 0, device: str = "cuda", optimizer: str = "adamw", pure_16bit: bool = False,
    gradient_checkpointing: bool = False, lora_rank: Any = None, lora_targets: Any = None, gpu: str | None = None,
    revision: str | None = None, token: str | None = None, trust_remote_code: bool = False, cross_check: bool = False,
    timeout: float = hub.DEFAULT_TIMEOUT_S,
) -> Estimate:
    """Estimate the memory ``model`` needs, per dtype. See ``docs/CONTRACT.md`` for every field.

    ``model`` is a Hub repo id, a Hub URL or a local folder with a config.json. ``token`` (else
    ``HF_TOKEN`` or the login cache) opens gated and private repos. ``cross_check`` also builds the
    model on the meta device when the answer came from safetensors headers, and reports a mismatch
    in ``notes``.
    """
    options = parse_options(
        library=library, dtypes=dtypes, mode=mode, device=device, optimizer=optimizer, batch_size=batch_size,
        seq_len=seq_len, image_size=image_size, max_new_tokens=max_new_tokens, pure_16bit=pure_16bit,
        gradient_checkpointing=gradient_checkpointing, lora_rank=lora_rank, lora_targets=lora_targets, gpu=gpu,
        trust_remote_code=trust_remote_code,
    )
    ref = parse_reference(model, revision=revision, endpoint=hub.endpoint() if "://" in model else None)
    if ref.path is not None:
        resolved = resolve_local(ref, options.library)
        return _estimate_resolved(resolved, options, cross_check=cross_check, token=token)

    assert ref.repo_id is not None
    try:
        info = hub.model_info(ref.repo_id, revision=ref.revision, token=token, timeout=timeout)
    except HubError:  # network, timeout, 5xx, 429 — not 404 or gated, which are InputErrors
        fallback = _from_catalog(ref.repo_id, ref.revision, options)
        if fallback is None:
            raise
        return fallback
    key = (info.id or ref.repo_id, info.sha, options.key(), cross_check)
    cached = _CACHE.get(key) if info.sha else None
    if cached is not None:
        logger.debug("cache hit for %s@%s", ref.repo_id, info.sha)
        return cached
    files = tuple(s.rfilename for s in (info.siblings or []))
    if options.library is Library.AUTO and gguf.is_gguf_only(files):
        result = gguf.gguf_estimate(info, options=options.shaping(info.sha), token=token, timeout=timeout)
        if info.sha:
            _CACHE.put(key, result)
        return result
    resolved = resolve_hub(ref, options.library, token=token, timeout=timeout, info=info)
    result = _estimate_resolved(resolved, options, cross_check=cross_check, token=token, timeout=timeout)
    if info.sha:
        _CACHE.put(key, result)
    return result


def clear_cache() -> None:
    """Forget every cached estimate (tests and the app's admin use it)."""
    _CACHE.clear()


def _from_catalog(repo_id: str, revision: str | None, options: Options) -> Estimate | None:
    """The Hub could not be reached: answer from the bundled catalog, saying so on every row.

    None when the catalog lacks the repo or holds another revision than the one asked for. The
    answer is not cached, so the next call tries the Hub again.
    """
    from estimator.catalog import catalog_entry, catalog_lookup, catalog_note

    entry = catalog_entry(repo_id)
    if entry is None or revision not in (None, "main", entry.revision):
        return None
    resolved = catalog_lookup(repo_id, options.library)
    if resolved is None:
        return None
    logger.info("the Hub could not be reached; answering %s from the bundled catalog", repo_id)
    result = _estimate_resolved(resolved, options, cross_check=False, token=None)
    note = catalog_note(entry)
    return replace(result, rows=tuple(replace(row, notes=(note, *row.notes)) for row in result.rows))


def _estimate_resolved(resolved: Resolved, options: Options, *, cross_check: bool, token: str | None, timeout: float = hub.DEFAULT_TIMEOUT_S) -> Estimate:
    check_config(resolved.config, model=resolved.name)
    rows: tuple[Row, ...] | None = None
    if resolved.source == "hub" and options.mode is Mode.LOAD and set(options.dtypes) <= STORED_DTYPES:
        from estimator import loadrows

        rows = loadrows.stored_rows(resolved, options, token=token, timeout=timeout, cross_check=cross_check)
    if rows is None and options.mode is not Mode.LOAD:
        from estimator.peakrows import peak_rows

        rows = peak_rows(resolved, options)
    if rows is None:
        from estimator import loadrows

        rows = loadrows.built_rows(resolved, options)
    return Estimate(
        model=resolved.name,
        revision=resolved.revision,
        library=resolved.library.value,
        architecture=_architecture(resolved),
        source=resolved.source,  # type: ignore[arg-type]
        mode=options.mode.value,
        options=options.shaping(resolved.revision if resolved.source == "hub" else None),
        rows=rows,
    )


def _architecture(resolved: Resolved) -> str | None:
    if resolved.library is Library.TIMM:
        value = resolved.config.get("architecture")
    else:
        architectures = resolved.config.get("architectures") or []
        value = architectures[0] if architectures else resolved.config.get("model_type") or resolved.config.get("_class_name")
    return value if isinstance(value, str) else None
