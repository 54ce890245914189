"""The real CPU peak of models fed two kinds of input at once (:mod:`estimator.peak.inputs.vision.pair`).

``python -m testkit.pair_truth CASE [MODE]`` prints one JSON line, ``{mode: {"peak_bytes": ...}}``: measured as
:mod:`testkit.peak_truth` measures (``torch.profiler`` with ``profile_memory``, the model built inside
the profile, the peak of the allocator's "Total Allocated" inside the work's window; training = two
steps of the workload's loss, backward, ``torch.optim.AdamW`` with its defaults, ``zero_grad(set_to_none=True)``;
inference = one ``no_grad`` forward), on the inputs ``workload_for`` makes, real tensors here.
Run it in a fresh process (a mode's model and inputs are freed before the next mode's profile starts). :func:`simulate` is the estimator's answer for the same case.

Cases (fp32, batch 2, 32 tokens):

- ``clip``: a two-tower :class:`~transformers.CLIPModel` (96-pixel images, 16-pixel patches) with its
  contrastive loss (``return_loss=True``);
- ``layoutlmv3``: :class:`~transformers.LayoutLMv3Model` with ``bbox`` and the page's ``pixel_values``
  (64 pixels, 16-pixel patches; coordinate and shape embedding sizes that add up to the hidden size);
- ``bros``: :class:`~transformers.BrosModel` with normalised ``bbox``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["CASES", "PairCase", "measure", "simulate"]

_SMALL: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}


@dataclass(frozen=True)
class PairCase:
    build: Callable[[], nn.Module]  # under the current default device, fp32
    batch_size: int = 2
    seq_len: int = 32


def _clip() -> nn.Module:
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig(text_config={**_SMALL, "vocab_size": 1000, "max_position_embeddings": 77},
                        vision_config={**_SMALL, "image_size": 96, "patch_size": 16}, projection_dim=64)
    return CLIPModel._from_config(config, dtype=torch.float32)


def _layoutlmv3() -> nn.Module:
    from transformers import LayoutLMv3Config, LayoutLMv3Model

    config = LayoutLMv3Config(**_SMALL, vocab_size=1000, max_position_embeddings=130, coordinate_size=8,
                              shape_size=16, input_size=64, patch_size=16)
    return LayoutLMv3Model._from_config(config, dtype=torch.float32)


def _bros() -> nn.Module:
    from transformers import BrosConfig, BrosModel

    config = BrosConfig(**_SMALL, vocab_size=1000, max_position_embeddings=128)
    return BrosModel._from_config(config, dtype=torch.float32)


CASES: dict[str, PairCase] = {"clip": PairCase(_clip), "layoutlmv3": PairCase(_layoutlmv3), "bros": PairCase(_bros)}


def measure(case_name: str, mode: str) -> dict[str, Any]:
    """The allocator's peak of the case's work, and the workload's description."""
    from testkit.peak_truth import measure_workload

    case = CASES[case_name]
    measured = measure_workload(case.build, mode, batch_size=case.batch_size, seq_len=case.seq_len)
    return {"peak_bytes": measured.peak_bytes, "description": measured.workload.description}


def simulate(case_name: str, mode: str) -> dict[str, Any]:
    """The estimator's CPU peak for the case (the model built on meta)."""
    from estimator.peak import simulate_peak

    case = CASES[case_name]
    with torch.device("meta"):
        model = case.build()
    r = simulate_peak(model, mode=mode, device="cpu", batch_size=case.batch_size,  # type: ignore[arg-type]
                      seq_len=case.seq_len)
    return {"peak_bytes": r.peak_bytes, "method": r.method, "notes": list(r.notes), "components": r.components}


if __name__ == "__main__":  # CASE [MODE]: without a mode, inference then training, each in its own profile
    modes = sys.argv[2:] or ["inference", "training"]
    print(json.dumps({mode: measure(sys.argv[1], mode) for mode in modes}))
