"""The simulated CPU peak of a coverage-bench type's small config against the CPU allocator, with its media.

The model is the coverage bench's small config (``testkit.coverage.small_config``), fed what the estimator
feeds it (one image, or ``--audio-seconds`` of audio: ``estimator.peak.inputs.prompts.processors.media_inputs`` /
``estimator.peak.inputs.audio.features.audio_inputs``) with 16 text tokens. Truth: the model built inside ``torch.profiler``
(profile_memory), ``generate`` with 4 new tokens for inference (PI0: its ``sample_actions``), two AdamW steps with the model's loss for
training; the peak of "Total Allocated" over the work. Each measurement and simulation runs in a fresh process.
Writes nothing; prints one markdown row per case.

    .venv/bin/python -m bench.coverage_truth udop voxtral:10 granite_speech:10
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

_TEXT = 16
_NEW = 4


def _media(model_type: str, seconds: float | None) -> Any:
    from estimator.peak.inputs.audio.features import audio_simulated
    from estimator.peak.inputs.prompts.processors import Media

    return Media(audio_seconds=seconds) if audio_simulated(model_type) else Media(images=1)


def run(model_type: str, mode: str, kind: str, seconds: float | None) -> dict[str, Any]:
    """One measurement (``kind`` "truth") or simulation ("sim") in this process."""
    import warnings

    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile, record_function

    from estimator.peak.inputs.audio.features import audio_inputs, audio_simulated
    from estimator.peak.inputs.prompts.processors import media_inputs
    from testkit.coverage import small_config
    from testkit.peak_truth import train_or_infer
    from testkit.truth import trace_events, window_peak

    warnings.filterwarnings("ignore")
    _small, name, model, _level, reason = small_config(model_type)
    if model is None:
        raise SystemExit(f"{model_type}: no small config ({reason})")
    config, media = model.config, _media(model_type, seconds)
    if model_type == "pi0":  # its own provider (estimator.peak.inputs.vision.pi0), not a processor family
        from estimator.peak.inputs.vision.pi0 import _processed

        tensors = _processed(config, 1, _TEXT, None, 1)
        tensors.pop("image_tokens")
        made: Any = SimpleNamespace(tensors=tensors, description="1 camera image per prompt (PI0Processor)")
        media = None
    else:
        made = (audio_inputs if audio_simulated(model_type) else media_inputs)(config, media, batch_size=1, text_len=_TEXT)
    cls = getattr(transformers, name)
    del model
    if kind == "sim":
        from estimator.peak import simulate_peak

        with torch.device("meta"):
            meta = cls._from_config(config, dtype=torch.float32)
        r = simulate_peak(meta, mode=mode, device="cpu", seq_len=_TEXT, max_new_tokens=_NEW if mode == "inference" else 0,  # type: ignore[arg-type]
                          media=media)
        return {"peak_bytes": r.peak_bytes, "method": r.method, "inputs": made.description}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        torch.manual_seed(0)
        m = cls._from_config(config, dtype=torch.float32)
        inputs = {k: v.clone() for k, v in made.tensors.items()}
        with record_function("work"):
            train_or_infer(m, inputs, mode, _loss, _generate)
        del m, inputs
    return {"peak_bytes": window_peak(trace_events(prof), "work")}


def _loss(m: Any, inputs: dict[str, Any]) -> Any:
    """The model's own loss, with the text as labels where the inputs have none."""
    return m(**({"labels": inputs["input_ids"]} if "labels" not in inputs else {}), **inputs).loss


def _generate(m: Any, inputs: dict[str, Any]) -> Any:
    """``generate`` of ``_NEW`` tokens on the prompt (the inputs less any labels); PI0's ``sample_actions``."""
    import torch

    prompt = {k: v for k, v in inputs.items() if "labels" not in k}
    if "input_ids" in prompt and "attention_mask" not in prompt and not m.config.is_encoder_decoder:
        prompt["attention_mask"] = torch.ones_like(prompt["input_ids"])
    if hasattr(m, "sample_actions"):  # PI0: its actions, by its own denoising loop
        return m.sample_actions(**{k: v for k, v in prompt.items() if k != "actions"})
    # Higgs Audio V2's generate takes no text logits processors (min_new_tokens)
    fixed = {} if "audio_input_ids" in prompt else {"min_new_tokens": _NEW, "pad_token_id": 0}
    return m.generate(**prompt, max_new_tokens=_NEW, do_sample=False, **fixed)


def main(argv: list[str]) -> int:
    if argv == ["--smoke"]:  # one simulation, here, no measurement (this bench writes no file)
        sim = run("udop", "inference", "sim", None)
        print(f"smoke: udop inference simulated {sim.get('peak_bytes')} B ({sim.get('method')})")
        return 0 if sim.get("method") == "simulated" else 1
    if len(argv) == 5 and argv[0] == "--one":
        seconds = float(argv[4]) if float(argv[4]) > 0 else None
        print(json.dumps(run(argv[1], argv[2], argv[3], seconds)))
        return 0
    print("| type | mode | inputs | measured (bytes) | simulated (bytes) | error |\n|---|---|---|---:|---:|---:|")
    for case in argv:
        model_type, _, secs = case.partition(":")
        for mode in ("inference", "training"):
            got: dict[str, Any] = {}
            for kind in ("truth", "sim"):
                done = subprocess.run([sys.executable, "-m", "bench.coverage_truth", "--one", model_type, mode, kind, secs or "0"],
                                      capture_output=True, text=True, timeout=900)
                lines = done.stdout.strip().splitlines()
                got[kind] = json.loads(lines[-1]) if done.returncode == 0 and lines else {"error": done.stderr[-300:]}
            truth, sim = got["truth"], got["sim"]
            if "peak_bytes" in truth and sim.get("method") == "simulated":
                error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
                print(f"| {model_type} | {mode} | {sim['inputs'].split(' (')[0]} | {truth['peak_bytes']:,} | {sim['peak_bytes']:,} "
                      f"| {error:+.3%} |", flush=True)
            else:
                print(f"| {model_type} | {mode} | failed | {truth} | {sim} | |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
