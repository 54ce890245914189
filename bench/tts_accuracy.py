"""Simulated CPU peaks of text-to-speech models (estimator.peak.inputs.audio.tts) against the allocator.

FastSpeech 2 (inference: the duration predictor's output taken as 4 frames per token, written into the real
run's output too, so both runs expand the text the same way) and VITS (inference and its training step, the
backward of the waveform's sum), tiny configs, at two text lengths; each measurement and each simulation in a
fresh process, measured as ``testkit.peak_truth`` measures (``torch.profiler``'s "Total Allocated" maximum over
the work, the model built inside the profile; training: two AdamW steps). Writes ``bench/results/tts_accuracy.md``.

    .venv/bin/python -m bench.tts_accuracy
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results" / "tts_accuracy.md"

CONFIGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "fastspeech2": ("fastspeech2_conformer", "FastSpeech2ConformerModel", {
        "hidden_size": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_num_attention_heads": 2,
        "decoder_num_attention_heads": 2, "encoder_linear_units": 64, "decoder_linear_units": 64, "vocab_size": 100,
        "num_mel_bins": 20, "speech_decoder_postnet_layers": 2, "speech_decoder_postnet_units": 32,
        "duration_predictor_channels": 32, "pitch_predictor_channels": 32, "energy_predictor_channels": 32}),
    "vits": ("vits", "VitsModel", {
        "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "ffn_dim": 64, "vocab_size": 40,
        "flow_size": 32, "upsample_initial_channel": 32, "spectrogram_bins": 33, "prior_encoder_num_flows": 2,
        "duration_predictor_filter_channels": 32, "duration_predictor_num_flows": 2}),
}
GRID = [("fastspeech2", "inference", 16), ("fastspeech2", "inference", 64),
        ("vits", "inference", 16), ("vits", "inference", 64), ("vits", "training", 16), ("vits", "training", 64)]


def _model(name: str, device: str) -> Any:
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type, cls, settings = CONFIGS[name]
    config = CONFIG_MAPPING[model_type](**settings)
    config.architectures = [cls]
    if device == "meta":
        from estimator.build.transformers_models import build_transformers

        return build_transformers(config.to_dict(), torch.float32, model=name)
    torch.manual_seed(0)
    return getattr(transformers, cls)._from_config(config, dtype=torch.float32)


def _job(job: tuple[str, str, str, int]) -> tuple[tuple[str, str, str, int], Any]:
    kind, name, mode, tokens = job
    try:
        if kind == "sim":
            from estimator.peak import simulate_peak

            r = simulate_peak(_model(name, "meta"), mode=mode, device="cpu", batch_size=1, seq_len=tokens)  # type: ignore[arg-type]
            return job, {"peak": r.peak_bytes, "method": r.method, "notes": list(r.notes)}
        from torch.profiler import ProfilerActivity, profile, record_function

        from estimator.peak.inputs.providers import workload_for
        from testkit.peak_truth import run_work
        from testkit.truth import trace_events, window_peak

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            model = _model(name, "cpu")
            wl = workload_for(model, batch_size=1, seq_len=tokens)
            inputs = wl.make_inputs()
            with record_function("tts_work"):
                run_work(model, wl, inputs, mode)
            del model, inputs
        return job, {"peak": window_peak(trace_events(prof), "tts_work")}
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return job, f"{type(exc).__name__}: {exc}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    if parser.parse_args(argv).smoke:  # the first row's simulation only, here, nothing written
        _, sim = _job(("sim", *GRID[0]))
        print(f"smoke: {GRID[0]} simulated: {sim if not isinstance(sim, dict) else sim['peak']}")
        return 0 if isinstance(sim, dict) and sim["method"] == "simulated" else 1
    jobs = [(kind, *row) for row in GRID for kind in ("truth", "sim")]
    with mp.get_context("spawn").Pool(2, maxtasksperchild=1) as pool:
        found = dict(pool.map(_job, jobs, chunksize=1))
    lines = ["# Text-to-speech peaks: simulated vs the CPU allocator", "", "`.venv/bin/python -m bench.tts_accuracy` "
             "(tiny configs in the script; the duration predictor's output taken as 4 frames per token in both runs).", "",
             "| model | mode | text tokens | measured (bytes) | simulated (bytes) | error |", "|---|---|---:|---:|---:|---:|"]
    for name, mode, tokens in GRID:
        truth, sim = found[("truth", name, mode, tokens)], found[("sim", name, mode, tokens)]
        if isinstance(truth, dict) and isinstance(sim, dict) and sim["method"] == "simulated":
            error = (sim["peak"] - truth["peak"]) / truth["peak"]
            lines.append(f"| {name} | {mode} | {tokens} | {truth['peak']:,} | {sim['peak']:,} | {error:+.2%} |")
        else:
            lines.append(f"| {name} | {mode} | {tokens} | {truth} | {sim if not isinstance(sim, dict) else sim['notes'][:1]} | |")
    print("\n".join(lines))
    OUT.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
