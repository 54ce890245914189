"""The real peak of a tiny vision-language or speech model on CPU, fed its real processor's inputs.

``python -m testkit.multimodal_truth CASE MODE IMAGES`` (a protein case's IMAGES: the protein's residues) prints one JSON line: ``peak_bytes``, the
maximum "Total Allocated" of torch.profiler's memory events inside the window of the work, the model
built inside the profiled region in float32 (its weights are in the total). The inputs are what the
model's transformers processor returns for random images (or audio) run through it
(:func:`estimator.peak.inputs.prompts.processors.media_inputs`: the real image processor and processor classes, a
word-level stand-in tokenizer; a protein-text case: :func:`estimator.peak.inputs.other.protein.protein_inputs`). The work:

- inference: ``model.generate(**inputs, max_new_tokens=N, min_new_tokens=N, do_sample=False)``;
- training: two steps of forward with ``labels`` = the prompt's ids, backward,
  ``torch.optim.AdamW`` (CPU defaults) step and ``zero_grad(set_to_none=True)``.

Run it in a fresh process: the profiler's total also counts what earlier profiled code left alive.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from testkit.peak_truth import train_or_infer
from testkit.truth import trace_events, window_peak

_WORK = "multimodal_work"


def _media(case: Any, images: int, audio_seconds: float | None = None) -> Any:
    from estimator.peak.inputs.prompts.processors import Media

    if getattr(case, "extra", {}).get("video"):  # a case of testkit.video_cases: "images" are the one video's frames
        return Media(video_frames=images, image_size=case.image_size)
    return Media(images=images, image_size=case.image_size, audio_seconds=audio_seconds)


def _cases() -> dict[str, Any]:
    from testkit.audio_cases import all_cases
    from testkit.video_cases import VIDEO_CASES

    return {**all_cases(), **VIDEO_CASES}


def measure(case_name: str, mode: str, images: int, audio_seconds: float | None = None, autocast: torch.dtype | None = None) -> dict[str, Any]:
    """``autocast``: training in mixed precision, the float32 model's forward and loss under ``torch.autocast("cpu", autocast)``
    (what a bfloat16 row's training step is, ``Trainer(bf16=True)``)."""
    from estimator.peak.inputs.audio.features import audio_inputs
    from estimator.peak.inputs.prompts.processors import media_inputs
    from testkit.audio_encoder_truth import ENCODER_CASES, measure_forward

    if case_name in ENCODER_CASES:  # speech encoders / CTC: one forward, or the model's own loss
        return measure_forward(ENCODER_CASES[case_name], mode, _media(ENCODER_CASES[case_name], 0, audio_seconds))
    case = _cases()[case_name]
    torch.manual_seed(0)
    config = case.make_config()
    if case.extra.get("protein"):  # a protein of ``images`` residues and as many words of text (estimator.peak.inputs.other.protein)
        from estimator.peak.inputs.other.protein import protein_inputs

        made = protein_inputs(config, batch_size=case.batch_size, residues=images, text_len=images)
    else:
        make = audio_inputs if audio_seconds is not None else media_inputs
        made = make(config, _media(case, images, audio_seconds), batch_size=case.batch_size, text_len=case.seq_len)
    if mode == "training" and config.is_encoder_decoder:  # a loop passes the decoder inputs where the model cannot shift (Moonshine)
        from estimator.peak.inputs.prompts.media import _shifted_labels

        shifted = _shifted_labels(config, made)[0]
        made.tensors.update({} if shifted is None else {"decoder_input_ids": shifted})
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = case.build_on("cpu")
        inputs = {**{k: v.clone() for k, v in made.tensors.items()}, **_plain(model, made)}
        with record_function(_WORK):
            train_or_infer(model, inputs, mode, _loss if autocast is None else _autocast_loss(autocast),
                           lambda m, i: _generate(m, i, case.max_new_tokens))
        del model, inputs
    return {"peak_bytes": window_peak(trace_events(prof), _WORK), "inputs": made.description}


def _plain(model: Any, made: Any) -> dict[str, Any]:
    """The processor's Python values (Unlimited-OCR's tile counts and grids) the model's forward names as parameters."""
    import inspect

    named = inspect.signature(model.forward).parameters
    return {k: v for k, v in getattr(made, "plain", {}).items() if k in named}


def _loss(model: Any, inputs: dict[str, Any]) -> Any:
    """The model's own loss, with the text as labels where the inputs have none."""
    return model(**({"labels": inputs["input_ids"]} if "labels" not in inputs else {}), **inputs).loss


def _autocast_loss(dtype: torch.dtype) -> Callable[[Any, dict[str, Any]], Any]:
    def loss(model: Any, inputs: dict[str, Any]) -> Any:
        with torch.autocast("cpu", dtype=dtype):
            return _loss(model, inputs)

    return loss


def _generate(model: Any, inputs: dict[str, Any], n: int) -> Any:
    """``generate`` of exactly ``n`` new tokens on the prompt (the inputs less any labels)."""
    prompt = {k: v for k, v in inputs.items() if k != "labels"}
    if "input_ids" in prompt:
        prompt["attention_mask"] = torch.ones_like(prompt["input_ids"])
    out = model.generate(**prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    # a decoder-only model returns the prompt too; Whisper's (an encoder-decoder's) generate only the new tokens
    decoder_only = "input_ids" in prompt and not model.config.is_encoder_decoder
    assert out.shape[1] in ((prompt["input_ids"].shape[1] + n,) if decoder_only else (n, n + 1)), out.shape
    return out


def simulate(case_name: str, mode: str, images: int, audio_seconds: float | None = None, autocast: torch.dtype | None = None) -> dict[str, Any]:
    from estimator.peak import simulate_peak
    from estimator.peak.sim.training import Recipe
    from testkit.audio_encoder_truth import ENCODER_CASES

    case = {**_cases(), **ENCODER_CASES}[case_name]
    protein = bool(getattr(case, "extra", {}).get("protein"))  # the estimator's seq_len is the protein's residues and the text's words
    r = simulate_peak(case.build_on("meta"), mode=mode, device="cpu", batch_size=case.batch_size,  # type: ignore[arg-type]
                      seq_len=images if protein else case.seq_len, max_new_tokens=case.max_new_tokens if mode == "inference" else 0,
                      media=None if protein else _media(case, images, audio_seconds),
                      **({} if autocast is None else {"recipe": Recipe(autocast_dtype=autocast)}))
    return {"peak_bytes": r.peak_bytes, "components": r.components, "method": r.method, "notes": list(r.notes)}


if __name__ == "__main__":
    name, mode, images = sys.argv[1], sys.argv[2], int(sys.argv[3])
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 and float(sys.argv[4]) > 0 else None
    if len(sys.argv) > 5 and sys.argv[5] == "sim":
        print(json.dumps(simulate(name, mode, images, seconds)))
    else:
        print(json.dumps(measure(name, mode, images, seconds)))


# (kind, case, mode, images, audio seconds or 0): kind is "truth" or "sim"
Job = tuple[str, str, str, int, float]
# (case, mode, images, audio seconds) -> the (truth, sim) results of that row: the tests' ``truth_and_sim`` fixture
TruthAndSim = Callable[[str, str, int, float], tuple[dict[str, Any], dict[str, Any]]]

_PRELOAD = ["torch", "transformers", "estimator.peak", "estimator.peak.inputs.prompts.media", "estimator.peak.inputs.prompts.processors",
            "estimator.peak.inputs.audio.prompts", "estimator.peak.inputs.audio.encoders", "testkit.audio_encoder_truth", "testkit.multimodal_cases", "testkit.audio_cases", "testkit.multimodal_truth", "PIL", "torchvision"]


def _job(job: Job) -> tuple[Job, Any]:
    kind, case, mode, images, seconds = job
    try:
        run = measure if kind == "truth" else simulate
        value: Any = run(case, mode, images, seconds or None)
    except Exception as exc:  # noqa: BLE001 - reported by the test or bench that needs it
        value = f"{type(exc).__name__}: {exc}"
    return job, value


def run_jobs(jobs: list[Job], processes: int = 2) -> dict[Job, Any]:
    """Each measurement in its own fresh process forked from a server that has imported torch and
    transformers (the profiler's total must not see what earlier work left alive); the simulations in this
    process meanwhile (``testkit.peak_pool.measured_there_simulated_here``)."""
    import multiprocessing as mp

    from testkit.peak_pool import measured_there_simulated_here

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return measured_there_simulated_here(ctx, _job, jobs, processes)
