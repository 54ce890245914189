"""Tiny speech encoders / CTC models and the real CPU peak of their forward-only work.

The cases are ``AutoConfig.for_model`` shrunk (hidden 32-64, 2 layers), built in float32 with the task class
(``Wav2Vec2ForCTC``, ``ParakeetForCTC``); LayerDrop 0 (it skips layers at random; the simulation is the step
that skips none). The inputs are what :mod:`estimator.peak.inputs.audio.encoders` makes with the model's own feature
extractor for random audio (and a transcript as CTC labels). The work, measured as
:mod:`testkit.multimodal_truth` measures (``torch.profiler``'s "Total Allocated" maximum, the model built
inside the profile):

- inference: one forward under ``no_grad`` (what ``estimator.peak.inputs.audio.encoders.run_inference`` runs);
- training: two steps of the model's own CTC loss, backward, ``torch.optim.AdamW`` (CPU defaults) step and
  ``zero_grad(set_to_none=True)``.

Measured (``bench/multimodal_accuracy.py``): ParakeetForCTC and AST exact in both modes at both lengths;
Wav2Vec2ForCTC exact in inference, training -19% (2 s) / -4.3% (6 s): oneDNN's backward of its strided
1-d convolutions (Conv1d(32, 32, 3, stride 2) on 6,399 frames) holds a scratch buffer (2,523,184 B there,
37,936 B above the input at 3,000 frames: not linear in the length) that is not modelled.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from testkit.multimodal_cases import MultimodalCase
from testkit.peak_truth import train_or_infer
from testkit.truth import trace_events, window_peak

__all__ = ["ENCODER_CASES", "ENCODER_SECONDS", "measure_forward"]

_WORK = "audio_encoder_work"

_NEMOTRON_AUDIO = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4}

ENCODER_CASES: dict[str, MultimodalCase] = {c.name: c for c in [
    MultimodalCase("wav2vec2_ctc", "wav2vec2", {
        "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "conv_dim": [32, 32, 32, 32, 32, 32, 32], "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4,
        "vocab_size": 32, "layerdrop": 0.0}, cls="Wav2Vec2ForCTC"),
    MultimodalCase("parakeet_ctc", "parakeet_ctc", {
        "encoder_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                           "subsampling_conv_channels": 32, "num_mel_bins": 80, "layerdrop": 0.0},
        "vocab_size": 64, "pad_token_id": 63}, cls="ParakeetForCTC"),
    MultimodalCase("ast", "audio-spectrogram-transformer", {
        "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "max_length": 256, "num_labels": 5}, cls="ASTForAudioClassification"),
    # Nemotron 3 speaker diarization (its base model: the audio tower on NemotronAsrStreaming's 128-bin features) and
    # Nemotron 3.5 Transcribe's audio model (ASR encoder in chunks of 500 encoder frames, and the diarization model)
    MultimodalCase("nemotron3_diarization", "nemotron3_diarization", {
        "audio_config": _NEMOTRON_AUDIO, "head_config": {"hidden_size": 64, "audio_hidden_size": 64}},
        cls="Nemotron3DiarizationModel"),
    MultimodalCase("nemotron3_5_transcribe_audio", "nemotron3_5_transcribe_audio", {
        "asr_config": {**_NEMOTRON_AUDIO},
        "diarization_config": {"audio_config": _NEMOTRON_AUDIO, "head_config": {"hidden_size": 64, "audio_hidden_size": 64}}},
        cls="Nemotron3_5TranscribeAudioModel"),
]}

# the two clip lengths each case is measured at (seconds)
ENCODER_SECONDS: dict[str, tuple[float, float]] = {"wav2vec2_ctc": (2.0, 6.0), "parakeet_ctc": (4.0, 12.0), "ast": (1.0, 5.0),
                                                       "nemotron3_diarization": (4.0, 12.0),
                                                       "nemotron3_5_transcribe_audio": (4.0, 45.0)}  # 45 s: two chunks


def measure_forward(case: MultimodalCase, mode: str, media: Any) -> dict[str, Any]:
    """The allocator's peak of ``case``'s forward-only work on ``media`` (see the module docstring)."""
    from estimator.peak.inputs.audio.encoders import feed, run_inference, training_loss
    from estimator.peak.inputs.audio.features import audio_inputs

    torch.manual_seed(0)
    made = audio_inputs(case.make_config(), media, batch_size=case.batch_size, text_len=case.seq_len)
    fed = feed(case.build_on("meta"), made)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = case.build_on("cpu")
        inputs = {k: v.clone() for k, v in {**fed.forward, **fed.extra}.items()}
        with record_function(_WORK):
            train_or_infer(model, inputs, mode, lambda m, i: training_loss(m, i, fed.contrastive), run_inference)
        del model, inputs
    return {"peak_bytes": window_peak(trace_events(prof), _WORK), "inputs": made.description}
