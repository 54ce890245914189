"""``estimate()``: the one entry point of the core. Returns an :class:`Estimate`; never prints."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from estimator.cache import LRUCache
from estimator.errors import HubError
from estimator.load import gguf
from estimator.options import DType, Library, Mode, Options, parse_options, seconds
from estimator.result import Estimate, Row
from estimator.source import hub
from estimator.source.limits import check_config
from estimator.source.reference import ModelRef, parse_reference
from estimator.source.resolve import Resolved, resolve_hub, resolve_local

logger = logging.getLogger(__name__)

_CACHE: LRUCache[Estimate] = LRUCache(maxsize=256)
STORED_DTYPES = {DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.INT8, DType.INT4}


def estimate(
    model: str | ModelRef, *, library: str = "auto", dtypes: Any = None, mode: str = "load", batch_size: Any = 1, seq_len: Any = None,
    image_size: Any = None, max_new_tokens: Any = 0, device: str = "cuda", optimizer: str = "adamw", pure_16bit: bool = False,
    gradient_checkpointing: bool = False, lora_rank: Any = None, lora_targets: Any = None, gpu: str | None = None,
    revision: str | None = None, token: str | None = None, trust_remote_code: bool = False, cross_check: bool = False,
    timeout: float = hub.DEFAULT_TIMEOUT_S, bnb_compute_dtype: str | None = None,
) -> Estimate:
    """Estimate the memory ``model`` needs, per dtype. See ``docs/CONTRACT.md`` for every field.

    ``model`` is a Hub repo id, a Hub URL or a local folder with a config.json, or a
    :class:`~estimator.source.reference.ModelRef` already parsed (the app parses what its visitors
    type with ``parse_hub_reference``, which never looks at the disk; ``revision``, when given,
    replaces the ref's). ``token`` (else ``HF_TOKEN`` or the login cache) opens gated and private
    repos. ``cross_check`` also builds the model on the meta device when the answer came from
    safetensors headers, and reports a mismatch in ``notes``.

    Answers from the Hub are cached by (repo, commit, options), never by token, and a cached answer
    goes only to a caller who has just been shown to have access: ``model_info`` of a private repo
    is itself refused without access, and for a gated repo (whose ``model_info`` is public) one
    small ``hub.check_access`` request with the caller's token comes before any answer, cached or
    not. A public repo's repeat costs the one ``model_info`` call.
    """
    options = parse_options(
        library=library, dtypes=dtypes, mode=mode, device=device, optimizer=optimizer, batch_size=batch_size,
        seq_len=seq_len, image_size=image_size, max_new_tokens=max_new_tokens, pure_16bit=pure_16bit,
        gradient_checkpointing=gradient_checkpointing, lora_rank=lora_rank, lora_targets=lora_targets, gpu=gpu,
        trust_remote_code=trust_remote_code, bnb_compute_dtype=bnb_compute_dtype,
    )
    timeout = seconds(timeout, option="timeout")  # how long each Hub call may take; not part of the answer
    if isinstance(model, ModelRef):
        ref = model if revision is None else replace(model, revision=revision)
    else:
        ref = parse_reference(model, revision=revision, endpoint=hub.endpoint() if "://" in model else None)
    if ref.path is not None:
        resolved = resolve_local(ref, options.load.library)
        return _estimate_resolved(resolved, options, cross_check=cross_check, token=token)

    assert ref.repo_id is not None
    try:
        info = hub.model_info(ref.repo_id, revision=ref.revision, token=token, timeout=timeout)
    except HubError:  # network, timeout, 5xx, 429 — not 404 or gated, which are InputErrors
        fallback = _from_catalog(ref.repo_id, ref.revision, options)
        if fallback is None:
            raise
        return fallback
    repo_id = info.id or ref.repo_id
    if info.gated:
        # model_info of a gated repo is public, and the client's own file cache may hold its config
        # from an earlier caller: only this check says the caller may read it (before any answer).
        hub.check_access(repo_id, revision=ref.revision, token=token, timeout=timeout)
    key = (repo_id, info.sha, options, cross_check)
    cached = _CACHE.get(key) if info.sha else None
    if cached is not None:
        logger.debug("cache hit for %s@%s", ref.repo_id, info.sha)
        return cached
    files = tuple(s.rfilename for s in (info.siblings or []))
    if options.load.library is Library.AUTO and gguf.is_gguf_only(files):
        result = gguf.gguf_estimate(info, load=options.load, mode=options.mode, token=token, timeout=timeout)
        if info.sha:
            _CACHE.put(key, result)
        return result
    resolved = resolve_hub(ref, options.load.library, token=token, timeout=timeout, info=info)
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
    from estimator.source.catalog import catalog_entry, catalog_lookup, catalog_note

    entry = catalog_entry(repo_id)
    if entry is None or revision not in (None, "main", entry.revision):
        return None
    resolved = catalog_lookup(repo_id, options.load.library)
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
        from estimator.load import rows as loadrows

        rows = loadrows.stored_rows(resolved, options.load, token=token, timeout=timeout, cross_check=cross_check)
    if rows is None and options.mode is not Mode.LOAD:
        from estimator.peak.rows import peak_rows

        rows = peak_rows(resolved, options.load, options.work, options.hardware)
    if rows is None:
        from estimator.load import rows as loadrows

        rows = loadrows.built_rows(resolved, options.load)
    return Estimate(
        model=resolved.name,
        revision=resolved.revision,
        library=resolved.library.value,
        architecture=_architecture(resolved),
        source=resolved.source,
        mode=options.mode,
        options=options.shaping(resolved.revision if resolved.source == "hub" else None),
        rows=rows,
    )


def _architecture(resolved: Resolved) -> str | None:
    if resolved.library is Library.TIMM:
        value = resolved.config.get("architecture")
    else:
        architectures = resolved.config.get("architectures")
        first = architectures[0] if isinstance(architectures, list) and architectures else None
        value = first or resolved.config.get("model_type") or resolved.config.get("_class_name")
    return value if isinstance(value, str) else None
