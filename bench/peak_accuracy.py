"""Benchmark: simulated peak vs the measured CPU peak, next to the usual rules of thumb.

``python -m bench.peak_accuracy [--out bench/results/peak_accuracy.md]`` from the repository root.
For every case of ``testkit/peak_cases.py`` and both modes it reports, on the same work (batch,
sequence length / image size, two AdamW steps in fp32 or generate's prefill):

- **measured**: the CPU allocator's peak from ``torch.profiler`` in a fresh process
  (``testkit/peak_truth.py``);
- **ours**: ``simulate_peak(..., device="cpu")``;
- **accelerate**: ``accelerate estimate-memory``'s rule, training = 4 x weights (weights, gradients,
  two Adam states), inference = 1.2 x weights;
- **torchinfo**: ``torchinfo.summary(...)``'s "Estimated Total Size" (inputs + 2 x every module's
  outputs + parameters), one number for both modes;
- **Transformer Math**: EleutherAI's "Transformer Math 101" (2023): training = weights (4 B/param)
  + gradients (4 B/param) + AdamW states (8 B/param) + activations per layer
  ``s*b*h*(34 + 5*a*s/h)`` bytes (Korthikanti et al. 2022, no recomputation); inference = 1.2 x
  weights. Only for transformers (it has no term for convolutions).

Errors are (estimate - measured) / measured. ``--smoke``: one case (llama_gqa), inference, nothing written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from testkit.peak_cases import CASES, PeakCase
from testkit.peak_pool import run_all

MODES = ["training", "inference"]


def _weights(model: torch.nn.Module) -> int:
    seen = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return sum(t.numel() * t.element_size() for t in seen.values())


def _cfg(config: Any, *names: str) -> int | None:
    for n in names:
        v = getattr(config, n, None)
        if isinstance(v, int):
            return v
    return None


def transformer_shape(model: torch.nn.Module, seq_len: int, batch_size: int) -> tuple[int, int, int, int, int] | None:
    """(s, b, h, a, L) as Transformer Math reads a config: encoder + decoder layers for
    encoder-decoders, patches + 1 tokens for ViT; None where there is no transformer config (timm)."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    h = _cfg(config, "hidden_size", "n_embd", "d_model")
    a = _cfg(config, "num_attention_heads", "n_head", "num_heads")
    layers = _cfg(config, "num_hidden_layers", "n_layer", "num_layers")
    if h is None or a is None or layers is None:
        return None
    if getattr(config, "is_encoder_decoder", False):
        layers = (_cfg(config, "encoder_layers", "num_layers") or 0) + (
            _cfg(config, "decoder_layers", "num_decoder_layers") or 0)
    s = seq_len
    if getattr(config, "image_size", None) and getattr(config, "patch_size", None):
        s = (config.image_size // config.patch_size) ** 2 + 1
    return s, batch_size, h, a, layers


def transformer_math(case: PeakCase, model: torch.nn.Module, mode: str) -> int | None:
    weights = _weights(model)
    if mode == "inference":
        return int(1.2 * weights)
    shape = transformer_shape(model, case.seq_len, case.batch_size)
    if shape is None:
        return None
    s, b, h, a, layers = shape
    activations = layers * s * b * h * (34 + 5 * a * s / h)
    return int(4 * weights + activations)


def torchinfo_total(case: PeakCase, model: torch.nn.Module) -> int | None:
    try:
        import torchinfo
    except ImportError:  # optional: the column shows n/a
        return None

    from estimator.peak.inputs.providers import workload_for
    from estimator.peak.workload import ModelKind

    wl = workload_for(model, batch_size=case.batch_size, seq_len=case.seq_len, image_size=case.image_size)
    inputs = wl.make_inputs()
    try:
        if wl.kind is ModelKind.TIMM_IMAGE:
            stats = torchinfo.summary(model, input_data=[inputs["pixel_values"]], verbose=0)
        else:
            stats = torchinfo.summary(model, input_data=inputs, verbose=0)
    except Exception:  # noqa: BLE001 - torchinfo cannot trace every model; shown as n/a
        return None
    return int(stats.total_input + stats.total_output_bytes + stats.total_param_bytes)


def _fmt(value: int | None, truth: int) -> str:
    if value is None:
        return "n/a"
    return f"{value / 2**20:.2f} ({(value - truth) / truth:+.0%})"


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("bench/results/peak_accuracy.md"))
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    cases, modes = list(CASES), list(MODES)
    if args.smoke:
        cases, modes = ["llama_gqa"], ["inference"]
    results = run_all(cases, modes)
    rows = ["| case | what | mode | measured MiB | ours MiB (error) | accelerate | torchinfo | Transformer Math |",
            "|---|---|---|---:|---:|---:|---:|---:|"]
    for name in cases:
        case = CASES[name]
        torch.manual_seed(0)
        model = case.build_on("cpu")
        info = torchinfo_total(case, model)
        for mode in modes:
            truth = results[("truth", name, mode)]
            sim = results[("sim", name, mode)]
            if not isinstance(truth, int) or not isinstance(sim, dict):
                rows.append(f"| {name} | {case.what} | {mode} | failed: {truth if not isinstance(truth, int) else sim} | | | | |")
                continue
            ours = sim["peak_bytes"]
            err = (ours - truth) / truth
            accel = (4 if mode == "training" else 1.2) * _weights(model)
            rows.append(
                f"| {name} | {case.what} | {mode} | {truth / 2**20:.2f} | {ours / 2**20:.2f} ({err:+.2%}) | "
                f"{_fmt(int(accel), truth)} | {_fmt(info, truth)} | "
                f"{_fmt(transformer_math(case, model, mode), truth)} |"
            )
    table = "\n".join(rows)
    header = (
        "# Peak memory: simulated vs measured on CPU\n\n"
        f"torch {torch.__version__}; produced by `python -m bench.peak_accuracy`. Measured = the "
        "maximum \"Total Allocated\" of torch.profiler's memory events while the work runs, "
        "in a fresh process with the model built inside the profiled region. MiB = 2^20 bytes; "
        "percentages are (estimate - measured) / measured.\n\n"
    )
    print(table)
    if args.smoke:
        return 0 if "failed" not in table else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(header + table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
