"""Load bytes of a model whose checkpoint transformers splits from a fused tensor (estimator.load.fused).

Truth: the real small model saved and loaded back with ``from_pretrained`` on CPU, its unique
parameter and buffer storages counted (``testkit.truth.storage_bytes``): the chunk left a view keeps
the whole fused checkpoint tensor alive. Both checkpoint layouts are checked: the fused one
transformers saves, and one stored under the unfused names (no fused tensor, so nothing extra).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from estimator import estimate
from testkit.coverage import small_config
from testkit.truth import storage_bytes

TYPE = "gradium_phonon_tts"  # its fused self_attn.in_proj: Chunk, then PermuteForRope on q and k only


def _load_bytes(folder: Path) -> int | None:
    return estimate(str(folder), dtypes=["float32"], mode="load").row("float32").total_bytes


def test_fused_checkpoint_load_is_exact(tmp_path: Path) -> None:
    warnings.filterwarnings("ignore")
    small, _, model, _, reason = small_config(TYPE)
    assert small is not None, reason
    fused = tmp_path / "fused"
    model.save_pretrained(fused)
    real = type(model).from_pretrained(fused, dtype=torch.float32)
    truth = storage_bytes(real)
    plain = sum(p.numel() * p.element_size() for p in real.parameters()) + sum(
        b.numel() * b.element_size() for b in real.buffers())
    assert truth > plain  # the fused storage really is kept alive
    assert _load_bytes(fused) == truth  # safetensors header names show the fused tensor
    config_only = tmp_path / "config_only"
    config_only.mkdir()
    (config_only / "config.json").write_text((fused / "config.json").read_text())
    row = estimate(str(config_only), dtypes=["float32"], mode="load").row("float32")
    assert row.total_bytes == truth
    assert any("fused checkpoint storage" in note for note in row.notes)


def test_unfused_checkpoint_keeps_no_fused_storage(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    warnings.filterwarnings("ignore")
    small, _, model, _, reason = small_config(TYPE)
    assert small is not None, reason
    fused = tmp_path / "fused"
    model.save_pretrained(fused)
    unfused = tmp_path / "unfused"
    unfused.mkdir()
    (unfused / "config.json").write_text(json.dumps(json.loads((fused / "config.json").read_text())))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(unfused / "model.safetensors"),
              metadata={"format": "pt"})
    real = type(model).from_pretrained(unfused, dtype=torch.float32)
    truth = storage_bytes(real)
    row = estimate(str(unfused), dtypes=["float32"], mode="load").row("float32")
    assert row.total_bytes == truth
    assert not any("fused checkpoint storage" in note for note in row.notes)
