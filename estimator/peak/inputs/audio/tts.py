"""Inputs of the text-to-speech models whose output length is data: FastSpeech 2 and VITS.

Both read text ids and expand each token into as many spectrogram frames as their duration predictor says
(FastSpeech 2's ``length_regulator``, VITS's monotonic alignment). The durations come from the trained
weights, so no fake run can know them; the real run's memory after the expansion (the decoder's, the
flow's and the vocoder's activations) grows with them. Here each token lasts :data:`FRAMES_PER_TOKEN`
frames, the alignment FastSpeech 2's training workload feeds as ``duration_labels`` (at VITS's
16 kHz / 256-sample frames, about 15.6 tokens a second of speech, the rate of read speech in characters):
the duration predictor runs as in the real model, and its output is taken as those durations (a known
value, :mod:`estimator.peak.fakes.known_values`, inside a simulation; the same durations written into its
output in a real run, so that a truth measurement runs the same alignment). The notes say so.

- FastSpeech 2 (and with its HiFi-GAN vocoder): ``input_ids`` and ``attention_mask``; training adds the
  alignment (``duration_labels``) and the mel, pitch and energy targets it trains on; inference is one
  forward in eval mode (the predicted durations, as above).
- Bark (no forward of its own; a user runs ``BarkModel.generate``): see :func:`_bark`.
- VITS: ``input_ids`` and ``attention_mask``; inference one forward; training: transformers' VitsModel
  refuses labels (``NotImplementedError``: no training loss), so the step is the backward of the sum of
  its waveform through the same forward (fine-tuning through the generator), durations as above.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from estimator.peak.fakes.known_values import know, known_value
from estimator.peak.inputs.generic import ordinary_token
from estimator.peak.inputs.other.models import Found
from estimator.peak.sim.prefill import prefill_kwargs

__all__ = ["FRAMES_PER_TOKEN", "tts_inputs"]

FRAMES_PER_TOKEN = 4  # spectrogram frames each input token lasts (see the module docstring)
_HOOKED = "_estimator_duration_hook"


def tts_inputs(model: nn.Module, batch_size: int, seq_len: int) -> Found | None:
    """The inputs of a text-to-speech model of this module, else None."""
    config: Any = model.config
    maker = {"fastspeech2_conformer": _fastspeech2, "fastspeech2_conformer_with_hifigan": _fastspeech2,
             "vits": _vits, "dia": _dia, "bark": _bark}.get(str(getattr(config, "model_type", "")))
    return maker(config, batch_size, seq_len) if maker is not None else None


def _assume(output: torch.Tensor, value: float) -> torch.Tensor:
    """``output`` holding ``value`` everywhere: a fake one known to (the simulation), a real one filled with it."""

    if isinstance(output, torch._subclasses.fake_tensor.FakeTensor):
        with _disable_current_modes():
            real = torch.full(tuple(output.shape), value, dtype=output.dtype)
        return know(output, real)
    if not output.requires_grad:
        return torch.full_like(output, value)
    return output + (torch.full_like(output, value) - output).detach()  # the values, and the graph behind them kept


def _durations(kind: str, value: float, *, eval_only: bool) -> Any:
    """A ``prepare`` that makes every duration predictor of the model (class name ending ``kind``) output
    ``value`` (``eval_only``: in eval mode only, where the model expands the text by them)."""

    def hook(module: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor | None:
        return None if eval_only and module.training else _assume(out, value)

    def prepare(m: nn.Module) -> None:
        for module in m.modules():
            if type(module).__name__.endswith(kind) and not getattr(module, _HOOKED, False):
                module.register_forward_hook(hook)
                setattr(module, _HOOKED, True)

    return prepare


_aten = torch.ops.aten
_COMPARISONS = frozenset({_aten.ge.Scalar, _aten.le.Scalar, _aten.gt.Scalar, _aten.lt.Scalar,
                          _aten.ge.Tensor, _aten.le.Tensor, _aten.gt.Tensor, _aten.lt.Tensor})


class _InsideTailBound(TorchDispatchMode):
    """Inside VITS's stochastic duration predictor, in a simulation: every comparison of its activations holds.

    Its rational-quadratic spline flows ask which values lie inside ``tail_bound`` (5) and index by that mask,
    and check that a discriminant is not negative: the predictor's noise is drawn from N(0, noise_scale_duration)
    (0.8), inside the bound, so the spline runs on every value, as it does in the real run; its bin search's
    comparisons are known true as well (which bin changes the values gathered, not their shapes)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:

        out = func(*args, **(kwargs or {}))
        if func in _COMPARISONS and isinstance(out, torch._subclasses.fake_tensor.FakeTensor) and known_value(out) is None:
            with _disable_current_modes():
                real = torch.ones(tuple(out.shape), dtype=torch.bool)
            know(out, real)
        return out


def _inside_tail_bound(m: nn.Module) -> None:
    """Run every stochastic duration predictor of ``m`` under :class:`_InsideTailBound` where its weights are fake."""
    for module in m.modules():
        if type(module).__name__ == "VitsStochasticDurationPredictor" and "forward" not in vars(module):
            original = module.forward

            def forward(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                fake = any(isinstance(p, torch._subclasses.fake_tensor.FakeTensor) for p in m.parameters())
                if not fake:
                    return _original(*args, **kwargs)
                with _InsideTailBound():
                    return _original(*args, **kwargs)

            module.forward = forward


def _text(config: Any, b: int, n: int) -> dict[str, np.ndarray]:

    return {"input_ids": np.full((b, n), ordinary_token(config, int(config.vocab_size)), np.int64),
            "attention_mask": np.ones((b, n), np.int64)}


def _fastspeech2(config: Any, b: int, n: int) -> Found:
    """Training: the text ids with an alignment (``duration_labels``, :data:`FRAMES_PER_TOKEN` frames per
    token) and the mel, pitch and energy targets; inference: the predicted durations taken as that alignment
    (the predictor outputs whole frames in eval mode)."""
    config = getattr(config, "model_config", None) or config  # FastSpeech2ConformerWithHifiGan: the acoustic model's config
    frames = n * FRAMES_PER_TOKEN
    mel = int(config.num_mel_bins)
    arrays: dict[str, np.ndarray] = {
        **_text(config, b, n),
        "duration_labels": np.full((b, n), FRAMES_PER_TOKEN, np.int64),
        "spectrogram_labels": np.zeros((b, frames, mel), np.float32),
        "pitch_labels": np.zeros((b, n, 1), np.float32), "energy_labels": np.zeros((b, n, 1), np.float32)}
    return Found(arrays, f"input_ids {b}x{n}; inference: the duration predictor's output taken as {FRAMES_PER_TOKEN} mel frames "
                         f"per token ({frames} frames; real durations come from the trained weights and scale the decoder's "
                         f"memory); training: duration_labels ({FRAMES_PER_TOKEN} frames per token), spectrogram_labels "
                         f"{b}x{frames}x{mel}, pitch_labels, energy_labels",
                 prepare=_durations("DurationPredictor", FRAMES_PER_TOKEN, eval_only=True),
                 infer_drops=("duration_labels", "spectrogram_labels", "pitch_labels", "energy_labels"),
                 known_floats=("spectrogram_labels",))  # its padding (-100) is asked: none here


def _vits(config: Any, b: int, n: int) -> Found:
    """``input_ids`` and ``attention_mask``; the duration predictor's log-durations taken as
    ``log(FRAMES_PER_TOKEN - 0.5)`` per token, which VITS rounds up (``ceil(exp(.))``) to :data:`FRAMES_PER_TOKEN`
    frames at its default speaking rate."""
    frames = n * FRAMES_PER_TOKEN
    hop = math.prod(int(r) for r in config.upsample_rates)
    rate = int(config.sampling_rate)
    return Found(_text(config, b, n),
                 f"input_ids {b}x{n}, attention_mask; the duration predictor's output taken as {FRAMES_PER_TOKEN} spectrogram "
                 f"frames per token ({frames} frames: a waveform of {frames * hop / rate:g} s at {rate} Hz; real durations come "
                 "from the trained weights and scale the flow's and vocoder's memory); training: VitsModel has no loss "
                 "(labels raise NotImplementedError), the backward of its waveform's sum",
                 prepare=_vits_prepare)


def _vits_prepare(m: nn.Module) -> None:
    _durations("DurationPredictor", math.log(FRAMES_PER_TOKEN - 0.5), eval_only=False)(m)
    _inside_tail_bound(m)


DIA_SECONDS = 10.0  # the clip a Dia training sample holds (the length other speech models are fed without a window)


def _dia(config: Any, b: int, n: int) -> Found:
    """Dia (text to dialogue audio over DAC codes). Training: ``n`` text bytes and the codes of
    :data:`DIA_SECONDS` s of audio as ``DiaProcessor(..., output_labels=True)`` lays them out: the clip's DAC
    frames (its feature extractor's padding, ``prod(downsampling_ratios)`` samples a frame), an end-of-audio
    frame, a BOS frame, delayed per channel by ``delay_pattern`` (the processor's own ``build_indices`` /
    ``apply_audio_delay``), the labels the shifted codes (``(B * channels, frames)``, -100 at BOS and padding).
    Inference: ``generate``'s first step in text-to-speech mode: the encoder on the text, then the decoder on
    one BOS frame with a cache (classifier-free guidance, which doubles the batch, where the model's generation
    config sets ``guidance_scale``)."""
    import torch
    from transformers import DacConfig
    from transformers.models.dia.feature_extraction_dia import DiaFeatureExtractor
    from transformers.models.dia.processing_dia import DiaProcessor

    decoder = config.decoder_config
    channels, delays = int(decoder.num_channels), list(config.delay_pattern)
    bos, pad, eos = int(decoder.bos_token_id), int(decoder.pad_token_id), int(decoder.eos_token_id)
    extractor = DiaFeatureExtractor()
    rate = int(extractor.sampling_rate)
    clip = [np.zeros(int(DIA_SECONDS * rate), np.float32)] * b
    padding_mask = extractor(clip, sampling_rate=rate, return_tensors="pt")["padding_mask"]
    frames = int(padding_mask.shape[-1]) // math.prod(DacConfig().downsampling_ratios)
    rng = np.random.default_rng(0)
    codes = torch.from_numpy(rng.integers(0, eos, (b, frames, channels)))
    codes = torch.nn.functional.pad(codes, (0, 0, 0, 1), value=eos)
    codes = torch.nn.functional.pad(codes, (0, 0, 1, 0), value=bos)
    length = frames + 2 + max(delays)
    prefill = torch.full((b, length, channels), pad, dtype=torch.long)
    prefill[:, : frames + 2] = codes
    delayed = DiaProcessor.apply_audio_delay(prefill, pad, bos, DiaProcessor.build_indices(b, length, channels, delays))
    labels = delayed.clone()[:, 1:]
    labels[(labels == pad) | (labels == bos)] = -100
    text = int(config.encoder_config.vocab_size)
    arrays = {"input_ids": np.full((b, n), ordinary_token(config.encoder_config, text), np.int64),
              "attention_mask": np.ones((b, n), np.int64),
              "decoder_input_ids": delayed[:, :-1].numpy(), "decoder_attention_mask": np.ones((b, length - 1), np.int64),
              "labels": labels.transpose(1, 2).reshape(b * channels, -1).numpy()}

    def infer(m: nn.Module, x: dict[str, Any]) -> Any:

        scale = getattr(getattr(m, "generation_config", None), "guidance_scale", None)
        ids, mask = x["input_ids"], x["attention_mask"]
        if scale is not None and scale != 1:  # DiaGenerationMixin: the unconditioned half, zeros
            ids, mask = torch.cat([ids, torch.zeros_like(ids)]), mask.repeat(2, 1)
        encoder_outputs = m.get_encoder()(input_ids=ids, attention_mask=mask)  # type: ignore[operator]
        start = torch.full((ids.shape[0], 1, channels), bos, dtype=torch.long)
        return m(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=start,
                 decoder_attention_mask=torch.ones((ids.shape[0], 1), dtype=torch.long), **prefill_kwargs(m))

    return Found(arrays, f"input_ids {b}x{n} (text bytes); training: the DAC codes of a {DIA_SECONDS:g} s clip at {rate} Hz "
                         f"({frames} frames, {channels} channels, delayed by the delay pattern as DiaProcessor lays them out): "
                         f"decoder_input_ids {b}x{length - 1}x{channels}, labels {b * channels}x{length - 1}; inference: "
                         "generate's first step (the encoder, then the decoder on one BOS frame with a cache; classifier-free "
                         "guidance doubles the batch where the generation config sets guidance_scale)",
                 infer=infer, seq2seq=True)


BARK_SECONDS = 10.0  # the speech Bark is asked for (its semantic model writes up to 768 tokens: about 15 s)


def _bark(config: Any, b: int, n: int) -> Found:
    """Bark: ``BarkModel.generate``'s phases, each the first forward of its sub-model, with the generation
    configs' defaults (transformers' ``Bark*GenerationConfig``), no history prompt, for :data:`BARK_SECONDS` s of
    speech: the semantic model's prefill (the processor's 256 text ids, offset into the text vocabulary, plus the
    256 padded history embeddings, and the infer token: 257 positions, with a cache); the coarse model's prefill
    (``max_coarse_input_length`` semantic ids and the infer token); the fine model on its 1,024-frame buffer of 8
    codebooks, once per codebook it predicts; the codec's decoder on the clip's fine codes (75 frames a second).
    Each phase keeps only token ids for the next; the later decoding steps (one position at a time, the caches
    growing) are not simulated. Training: BarkModel has no forward (its sub-models refuse labels)."""
    import torch
    from transformers.models.bark.generation_configuration_bark import (
        BarkCoarseGenerationConfig,
        BarkFineGenerationConfig,
        BarkSemanticGenerationConfig,
    )

    semantic_cfg, coarse_cfg, fine_cfg = BarkSemanticGenerationConfig(), BarkCoarseGenerationConfig(), BarkFineGenerationConfig()
    text = int(semantic_cfg.max_input_semantic_length)
    frames = round(float(coarse_cfg.coarse_rate_hz) * BARK_SECONDS)
    arrays = {"input_ids": np.zeros((b, text), np.int64), "attention_mask": np.ones((b, text), np.int64)}

    def infer(m: nn.Module, x: dict[str, Any]) -> Any:
        from transformers import DynamicCache

        bark: Any = m
        semantic, vocab = bark.semantic, int(bark.semantic.config.input_vocab_size)
        offset = min(int(semantic_cfg.text_encoding_offset), vocab - 1)
        ids = (x["input_ids"] + offset).clamp(max=vocab - 1)
        history = torch.full((ids.shape[0], text), min(int(semantic_cfg.semantic_pad_token), vocab - 1), dtype=torch.long)
        infer_token = torch.full((ids.shape[0], 1), min(int(semantic_cfg.semantic_infer_token), vocab - 1), dtype=torch.long)
        embeds = torch.cat([semantic.input_embeds_layer(ids) + semantic.input_embeds_layer(history),
                            semantic.input_embeds_layer(infer_token)], dim=1)
        out = semantic(inputs_embeds=embeds, use_cache=True, past_key_values=DynamicCache())
        del out, embeds
        coarse, coarse_vocab = bark.coarse_acoustics, int(bark.coarse_acoustics.config.input_vocab_size)
        coarse_ids = torch.full((ids.shape[0], int(coarse_cfg.max_coarse_input_length) + 1),
                                min(int(coarse_cfg.coarse_semantic_pad_token), coarse_vocab - 1), dtype=torch.long)
        out = coarse(input_ids=coarse_ids, use_cache=True, past_key_values=DynamicCache())
        del out, coarse_ids
        buffer = torch.zeros((ids.shape[0], int(fine_cfg.max_fine_input_length), int(fine_cfg.n_fine_codebooks)), dtype=torch.long)
        for codebook in range(int(coarse_cfg.n_coarse_codebooks), int(fine_cfg.n_fine_codebooks)):
            out = bark.fine_acoustics(codebook, buffer)
            del out
        codes = torch.zeros((ids.shape[0], int(fine_cfg.n_fine_codebooks), frames), dtype=torch.long)
        return bark.codec_decode(codes)

    def train(m: nn.Module, x: dict[str, Any]) -> Any:
        raise NotImplementedError("Bark training is not simulated: BarkModel has no forward and transformers' Bark "
                                  "sub-models refuse labels ('Training is not implemented yet')")

    return Found(arrays, f"input_ids {b}x{text} (the processor's padded text); inference: generate's phases for "
                         f"{BARK_SECONDS:g} s of speech, each its sub-model's first forward: the semantic prefill ({text + 1} "
                         f"positions), the coarse prefill ({int(coarse_cfg.max_coarse_input_length) + 1}), the fine model "
                         f"on {int(fine_cfg.max_fine_input_length)} frames per predicted codebook, the codec decoding "
                         f"{frames} frames (later decoding steps not simulated); training: BarkModel has no forward",
                 infer=infer, train=train)
