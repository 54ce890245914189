"""vLLM's profile run, simulated: the peak of one forward over ``max_num_batched_tokens`` tokens.

Before it sizes the KV cache, vLLM V1 runs the model once on dummy data and takes the torch peak
above the weights as the activation memory every later step may need
(``Worker.determine_available_memory`` -> ``GPUModelRunner.profile_run``): ``_dummy_run`` over
``max_num_tokens = max_num_batched_tokens`` tokens spread over ``min(max_num_seqs,
max_num_batched_tokens)`` requests, without a KV cache (it is allocated after profiling), then
``_dummy_sampler_run``: the logits of each request's last token and the sampler on them.

Here the model's own transformers code runs that work on fake tensors under the project's engine
(:func:`~estimator.peak.steps.simulate_step`, CUDA's kernel choices): ``input_ids`` of
``1 x max_num_batched_tokens`` (vLLM flattens the batch into one token dimension), no cache,
``logits_to_keep = num_reqs`` (one row of logits per request), then vLLM V1's sampler on them as its
dummy run drives it (:func:`_sampler`).
Decoders with many alike layers are simulated with 2, 3 and 4 layers and extrapolated
(:mod:`estimator.peak.layers`). What differs from vLLM's own forward (fused kernels, its attention
backends) is in docs/serving.md.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.cache import LRUCache
from estimator.peak.components import Component
from estimator.peak.inputs import ModelKind, Workload
from estimator.peak.layers import SAMPLE_LAYERS, extrapolate, layer_count
from estimator.peak.materialize import materialize
from estimator.peak.steps import simulate_step
from estimator.peak.tracker import PeakSnapshot

Device = Literal["cpu", "cuda"]
logger = logging.getLogger(__name__)

__all__ = ["ProfilePeak", "profile_run", "profile_workload"]


@dataclass(frozen=True)
class ProfilePeak:
    """The profile run's peak: all live bytes, the weights among them, and what held it."""

    peak_bytes: int
    weights_bytes: int
    components: dict[str, int]
    notes: tuple[str, ...]

    @property
    def above_weights(self) -> int:
        """vLLM's "torch peak increase": what the run adds to the loaded weights."""
        return self.peak_bytes - self.weights_bytes


# Profile runs by (model class, full config, dtype, tokens, requests, device): a plan asked again with
# another GPU, utilization, max_model_len or cache dtype runs the same profile run.
_PROFILES: LRUCache[ProfilePeak] = LRUCache(maxsize=64)


def profile_workload(model: nn.Module, num_tokens: int, num_reqs: int) -> Workload:
    """The profile run's work as a :class:`~estimator.peak.inputs.Workload` (its ``infer``)."""
    vocab = int(getattr(model.config.get_text_config(), "vocab_size", 1000) or 1000)  # type: ignore[union-attr, operator]

    def make_inputs() -> dict[str, torch.Tensor]:
        return {"input_ids": torch.randint(0, vocab, (1, num_tokens))}

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        out = m(input_ids=x["input_ids"], use_cache=False, logits_to_keep=num_reqs)
        logits = out.logits[0]
        del out
        return _sampler(logits)

    def no_training(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError("the profile run is inference only")

    return Workload(ModelKind.TEXT_BASE, make_inputs, no_training, infer,
                    f"input_ids 1x{num_tokens}, no cache, logits of {num_reqs} requests, sampler")


def _sampler(logits: torch.Tensor) -> torch.Tensor:
    """vLLM V1's sampler in its dummy run (``GPUModelRunner._dummy_sampler_run``: temperature 0.5,
    ``top_p`` 0.9 and ``top_k`` vocab - 1 on every request, "to reflect the accurate memory usage"):
    ``Sampler.forward`` in float32, ``apply_top_k_top_p`` (sort, masks, softmax, cumsum, scatter) and
    ``random_sample`` (exponential noise), as in ``vllm/v1/sample/ops/topk_topp_sampler.py``."""
    n, vocab = logits.shape
    logits = logits.to(torch.float32)
    greedy = logits.argmax(dim=-1)
    logits.div_(torch.full((n, 1), 0.5))
    k = torch.full((n,), vocab - 1, dtype=torch.long)
    p = torch.full((n,), 0.9)
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    top_k_mask = logits_sort.gather(1, (logits_sort.size(1) - k).unsqueeze(dim=1))
    logits_sort.masked_fill_(logits_sort < top_k_mask, -float("inf"))
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
    top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
    top_p_mask[:, -1] = False
    logits_sort.masked_fill_(top_p_mask, -float("inf"))
    logits = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
    del logits_sort, logits_idx, probs_sort, probs_sum, top_p_mask, top_k_mask
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    noise = torch.empty_like(probs).exponential_()
    return torch.where(greedy >= 0, probs.div_(noise).argmax(dim=-1), greedy)


def _simulate(model: nn.Module, num_tokens: int, num_reqs: int, device: Device) -> tuple[dict[str, PeakSnapshot], tuple[str, ...]]:
    fake_mode = FakeTensorMode(static_shapes=True)
    workload = profile_workload(model, num_tokens, num_reqs)
    materialize(model, fake_mode)
    step = simulate_step(model, workload, fake_mode, mode="inference", device=device)
    return step.phases, step.notes


def profile_run(model: nn.Module, *, max_num_batched_tokens: int, max_num_seqs: int, device: Device = "cuda") -> ProfilePeak:
    """Simulate vLLM's profile run of ``model`` (built on meta in the serving dtype; consumed).
    ``device="cpu"`` runs CPU's kernels instead of CUDA's (the truth tests measure it on CPU)."""
    num_reqs = min(max_num_seqs, max_num_batched_tokens)
    config: Any = model.config
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    key = (type(model).__qualname__, config.to_json_string(use_diff=False), getattr(config, "_attn_implementation", None),
           str(dtype), max_num_batched_tokens, num_reqs, device)
    cached = _PROFILES.get(key)
    if cached is not None:
        return cached
    n_layers = layer_count(model)
    found = None
    try:
        if n_layers is not None:
            try:
                found = extrapolate(model, n_layers, lambda m: _simulate(m, max_num_batched_tokens, num_reqs, device))
            except Exception:  # the full simulation below reports the failure
                logger.debug("layer extrapolation of the profile run failed", exc_info=True)
        if found is None:
            phases, notes = _simulate(model, max_num_batched_tokens, num_reqs, device)
    finally:  # once per plan, not per sample: the samples share the dispatch cache's entries
        FakeTensorMode.cache_clear()  # the dispatch cache is process-wide and unbounded
        gc.collect(1)  # the young generations: a full collection costs ~0.45 s in a process that imported transformers
    if found is not None:
        phases, notes = found
        notes = (*notes, f"{n_layers} alike layers: simulated with {SAMPLE_LAYERS} layers, extrapolated (exactly linear)")
    snap = phases["forward"]
    weights = snap.components.get(Component.WEIGHTS.value, 0)
    note = (f"profile run (vLLM's profile_run): {max_num_batched_tokens:,} tokens in {num_reqs:,} requests, no KV cache, "
            f"then the sampler; simulated peak {snap.peak_bytes:,} bytes, {snap.peak_bytes - weights:,} above the weights")
    result = ProfilePeak(snap.peak_bytes, weights, dict(snap.components), (*notes, note))
    _PROFILES.put(key, result)
    return result
