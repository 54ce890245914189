"""Storage a ``from_pretrained`` load keeps alive when it splits a fused checkpoint tensor.

transformers 5 loads some checkpoints through a weight conversion mapping
(``transformers.conversion_mapping``): a ``WeightConverter`` whose first operation is ``Chunk``
splits one fused checkpoint tensor (e.g. ``wqkv``) into several parameters (q, k, v). ``Chunk``
along dim 0 gives views of the fused tensor; a later operation that rewrites some of the chunks
(``PermuteForRope`` on ``permute_layer_names``, a transpose + reshape, so a copy) gives those their
own storage, while the untouched chunks stay views and keep the WHOLE fused storage alive. The
loaded model then holds the fused tensor plus the rewritten copies: the copies' bytes come on top
of the parameters' own bytes. Read from transformers' own mapping for the built model, never a
per-type constant.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from torch import nn


def _copied_targets(converter: Any) -> tuple[list[str], set[str]] | None:
    """(target patterns, those that get their own storage) of a Chunk converter; None when not one."""
    from transformers.core_model_loading import Chunk, PermuteForRope

    ops = list(getattr(converter, "operations", None) or [])
    targets = [str(t) for t in (getattr(converter, "target_patterns", None) or [])]
    if not ops or not isinstance(ops[0], Chunk) or len(targets) < 2:
        return None
    copied: set[str] = set()
    for op in ops[1:]:
        if isinstance(op, PermuteForRope):
            names = op.permute_layer_names
            copied |= {t for t in targets if names is None or any(n in t for n in names)}
        else:  # an operation this module does not model: count nothing rather than guess
            return None
    return targets, copied


def fused_view_bytes(model: nn.Module, checkpoint_names: list[str] | None = None) -> tuple[int, str | None]:
    """Bytes the fused checkpoint storages add to the model's parameter bytes, and a note saying why.

    For each parameter group that one Chunk converter fills (same name around the target pattern):
    when some chunks are copied and at least one stays a view, the copied chunks' bytes are extra.
    ``checkpoint_names``: the tensor names of the checkpoint's safetensors headers, when read; then a
    converter counts only when a name shows its fused source tensor. Without them (a config-only
    estimate) the checkpoint is taken in the format the model type's conversion mapping reads.
    """
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping

        conversions = get_model_conversion_mapping(model)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a model outside transformers' loader has no conversion
        return 0, None
    params = dict(model.named_parameters())
    extra, fused_names = 0, []
    for conv in conversions:
        found = _copied_targets(conv)
        if found is None:
            continue
        targets, copied = found
        if not copied or copied == set(targets):
            continue
        sources = [str(p) for p in (getattr(conv, "source_patterns", None) or [])]
        if checkpoint_names is not None and not any(re.search(p, n) for p in sources for n in checkpoint_names):
            continue
        scope = getattr(conv, "scope_prefix", None) or ""
        groups: dict[tuple[str, str], dict[str, int]] = {}
        for name, p in params.items():
            if scope and f".{scope}." not in f".{name}":  # the sub-model's path, wherever it sits in this build
                continue
            for t in targets:
                m = re.search(re.escape(t) if not any(c in t for c in "\\()[]*+?^$") else t, name)
                if m:
                    key = (name[: m.start()], name[m.end():])
                    groups.setdefault(key, {})[t] = p.numel() * p.element_size()
                    break
        for (prefix, suffix), sizes in groups.items():
            if set(sizes) != set(targets):
                continue
            extra += sum(sizes[t] for t in copied)
            fused_names.append(f"{prefix}{'|'.join(targets)}{suffix}")
    if not extra:
        return 0, None
    note = (f"total_bytes includes {extra:,} B of fused checkpoint storage kept alive by from_pretrained: {len(fused_names)} fused "
            f"tensor(s) (e.g. {fused_names[0]}) are split by transformers' conversion mapping (Chunk), the chunk(s) "
            "left as views keep the whole fused tensor while the rewritten ones get their own copies")
    return extra, note


def local_names(folder: Path) -> list[str] | None:
    """The tensor names of a local folder's safetensors checkpoint (its index, else ``model.safetensors``'s
    header); None when it holds none (a config-only folder)."""
    import json

    from estimator.source.stored import local_header

    index_path, single = folder / "model.safetensors.index.json", folder / "model.safetensors"
    if index_path.is_file():
        try:
            return [str(k) for k in json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
    if single.is_file():
        tensors = local_header(single)
        return [t.name for t in tensors] if tensors is not None else None
    return None
