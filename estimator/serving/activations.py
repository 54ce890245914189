"""vLLM's profile run on one rank, kernel by kernel: the torch peak it adds to the weights.

``Worker.determine_available_memory`` runs ``GPUModelRunner.profile_run`` once before it sizes the KV
cache and keeps the torch allocator's peak above the weights ("torch peak increase"). The run is
``_dummy_run(max_num_tokens)`` (``max_num_batched_tokens`` tokens in ``min(max_num_seqs,
max_num_batched_tokens)`` requests; no KV cache and no attention metadata yet, so the attention kernel
itself is skipped: only its ``torch.empty`` output is made) and, on the last pipeline stage,
``_dummy_sampler_run`` on each request's last hidden state. What is live at the two busiest moments:

**Forward, in one decoder layer** (vLLM's layers, compiled piecewise by torch.compile: the graph
between two attention calls holds its inputs until it returns): the attention output and the residual
it got, the new residual of the fused add + RMSNorm, then the merged ``gate_up_proj`` output
(``2 x intermediate / tp``) and the fused ``SiluAndMul`` / ``GeluAndMul`` output (``intermediate / tp``)
at once; an unfused MLP (Phi) holds its up projection and its activation. A mixture of experts holds
the normed input, the router's top-k ids and weights, the shared experts' output beside the routed
output; Triton's fused-MoE kernel takes its two workspaces (``workspace13``: tokens x top-k x
max(N/2, hidden), ``workspace2``: tokens x top-k x max(N, hidden), N the merged expert width per rank)
from vLLM's persistent workspace manager, so they stay allocated; MXFP4 experts (gpt-oss through
triton_kernels) allocate theirs inside the kernel and free them.

A recurrent mixer (Mamba, Mamba2, gated DeltaNet, short convolution) in the profile run: like the
attention kernel, vLLM's mixer op finds no metadata and skips its scan, so what the layer holds is its
input projections' output (``mixer_in / tp``) and the op's output buffer (``mixer_out / tp``) beside the
residuals; Falcon-H1, whose layers run attention and Mamba2 side by side, holds both.

**Sampler** (last stage): the model's output (tokens x hidden) and the gathered hidden states of the
requests with the ``torch.rand_like`` copy ``_dummy_sampler_run`` feeds the sampler instead, the logits in the model's dtype (``compute_logits``: requests x the 64-padded vocab, all-gathered
under TP), their float32 copy (``Sampler.forward``), and what the version's top-k/top-p sampler makes
(:mod:`estimator.serving.versions`, :func:`_sampler_extra`): in 0.19 the Triton top-k/top-p's per-SM
float32 rows, then the probabilities and ``random_sample``'s exponential draws.

**Kept for the run**: torch's cuBLAS workspace (the first matmul allocates it), and on a stage after
the first, the intermediate tensors it receives (hidden states and residual, allocated by the first
``_dummy_run``).

**The cold compile** (first stage, text models; :attr:`VLLMRules.combo_kernel_benchmark`): the model
compiles at this first call, and torch 2.10's Inductor, with the combo kernels vLLM 0.19 turns on,
benchmarks the kernels of each topological level of a piecewise graph on ``rand_strided`` copies of all
their buffer arguments at the traced sizes (``Scheduler.speedup_by_combo_kernel`` ->
``TritonScheduling.benchmark_fused_nodes`` -> the kernel module's ``get_args``), freed before the forward
runs. The first stage's first graph opens with the embedding gather fused into layer 0's input norm
(``LlamaModel.forward``: ``embed_input_ids``, then ``input_layernorm`` with ``residual = hidden_states``):
its arguments are the embedding table (``VocabParallelEmbedding``: the vocabulary padded to 64, split
over tensor-parallel ranks) and its two ``tokens x hidden`` outputs, the embeddings kept as the residual
and the normed rows (under tensor parallelism the all-reduce between them leaves the gather one output).
Nothing else of the run exists yet: not even the cuBLAS workspace (:func:`_compile_benchmark_bytes`).
An image-text-to-text model gets ``inputs_embeds`` from the runner instead (no gather in its graph).

**Image-text-to-text models** (``profile_run``'s multimodal branch, first stage): before the text run
vLLM encodes the most images one step's encoder budget holds (``max_num_batched_tokens`` over one
image's placeholder tokens; Gemma-3: 256) at the processor's largest size (one float32 dummy image
repeated, held until ``profile_run`` returns), and keeps their embeddings in the encoder cache until the
run ends; the encoder runs eagerly (:func:`_encoder_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.serving.shapes import LayerShape, ModelShape, VisionShape
from estimator.serving.versions import VLLMRules

__all__ = ["ProfileEstimate", "profile_peak"]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class ProfileEstimate:
    """One rank's profile run: the torch peak above the weights, and what it is made of."""

    peak_increase: int
    forward_bytes: int  # the busiest decoder layer's live tensors
    sampler_bytes: int  # the sampler phase's live tensors (0 off the last stage)
    kept_bytes: dict[str, int]  # allocated during the run and kept (cuBLAS workspace, MoE workspace, PP buffers)

    encoder_bytes: int = 0  # image-text-to-text: the dummy encoder run (first stage)
    compile_bytes: int = 0  # the cold compile's largest kernel benchmark (first stage, text models)
    phase: str = "forward"  # which moment decides the peak: compile, encoder, forward or sampler


def encoder_items(vision: VisionShape, tokens: int) -> int:
    """Images in vLLM's dummy encoder batch (``MultiModalBudget``): the encoder budget (``max_num_batched_tokens``,
    at least one image's tokens) over one image's tokens."""
    return max(1, max(tokens, vision.tokens_per_image) // vision.tokens_per_image)


def _pixel_batch(vision: VisionShape, items: int) -> int:
    """The dummy ``pixel_values`` batch: one processed dummy image repeated ``items`` times, float32 as the HF image
    processor makes it; ``profile_run`` holds it (``batched_dummy_mm_inputs``) until it returns."""
    return items * vision.channels * vision.image_size**2 * 4


def _encoder_bytes(vision: VisionShape, items: int, tp: int, act: int) -> int:
    """The dummy encoder run, eager (``profile_run`` -> ``embed_multimodal``): the pixels cast to the model's dtype,
    then in the busiest ViT layer the residual and the normed input beside the attention's merged QKV and output, or
    the MLP's ``fc1`` output and its activation (out of place)."""
    pixels = items * vision.channels * vision.image_size**2 * act
    rows = items * vision.patches
    attention = 2 * vision.hidden + 3 * vision.hidden // tp + vision.hidden // tp
    mlp = 2 * vision.hidden + 2 * vision.intermediate // tp
    return pixels + rows * max(attention, mlp) * act


def _compile_benchmark_bytes(shape: ModelShape, tokens: int, tp: int, act: int) -> int:
    """The embedding gather's benchmark harness in the cold compile: a random copy of this rank's embedding table
    (``round_up(vocab, 64) / tp`` rows) and of the kernel's outputs, ``tokens x hidden`` each (two where the gather
    is fused into the first norm, one under tensor parallelism); the token ids are negligible."""
    table = _round_up(shape.vocab, 64) // tp * shape.hidden * act
    return table + (2 if tp == 1 else 1) * tokens * shape.hidden * act


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _sampler_extra(rules: VLLMRules, requests: int, vocab: int, sms: int) -> int:
    """What vLLM's top-k/top-p sampling adds beside the float32 logits (:mod:`estimator.serving.versions`): with
    ``apply_top_k_top_p_triton`` (in place) its cached rows, one float32 ``vocab`` row per program, then the float32
    probabilities and exponential draws; with the PyTorch sort (few requests) the sorted values (4 bytes), their int64
    indices (8), the top-k mask (1), the sorted probabilities (4) and the top-p mask (1) per logit, freed before the
    probabilities and draws are made."""
    fp32 = requests * vocab * 4
    after = rules.sampler_fp32_copies * fp32
    if requests >= rules.topk_topp_triton_min_requests:
        rows = min(_next_power_of_2(min(sms, requests)), sms)
        return after + rows * vocab * 4
    return max(after, requests * vocab * (4 + 8 + 1 + 4 + 1))


def _moe_workspace(layer: LayerShape, tokens: int, hidden: int, tp: int, act: int) -> int:
    n = 2 * layer.moe_intermediate // tp
    return tokens * layer.topk * (max(n // 2, hidden) + max(n, hidden)) * act


def _layer_bytes(layer: LayerShape, tokens: int, hidden: int, tp: int, act: int, mxfp4: bool) -> int:
    held = tokens * (layer.attn_out // tp + 2 * hidden) * act  # attention output, residual in, new residual
    held += tokens * (layer.mixer_in + layer.mixer_out) // tp * act  # a recurrent mixer's projections and output
    if not layer.experts:
        width = layer.intermediate // tp
        return held + tokens * (3 * width if layer.gated else 2 * width) * act
    normed = tokens * hidden * act
    routing = tokens * layer.topk * (4 + 4 + 4) + tokens * layer.experts * act  # weights, ids, indices; router logits
    shared_i = layer.shared_intermediate // tp
    shared_peak = tokens * 3 * shared_i * act
    shared_out = tokens * hidden * act if shared_i else 0
    routed = tokens * hidden * act  # the experts' summed output
    if mxfp4:  # triton_kernels' matmul_ogs: gathered gate_up and activation rows, freed inside the op (the Triton
        # backend's intermediate per partition is rounded up to 64: mxfp4_round_up_hidden_size_and_intermediate_size)
        routed += tokens * layer.topk * 3 * _round_up(layer.moe_intermediate // tp, 64) * act
    return held + normed + routing + max(shared_peak, shared_out + routed)


def profile_peak(
    shape: ModelShape, *, rules: VLLMRules, act_bytes: int, tokens: int, requests: int, tp: int = 1,
    layers: range | None = None, first: bool = True, last: bool = True, mxfp4_experts: bool = False, sms: int = 132,
) -> ProfileEstimate:
    """The profile run's torch peak increase of one rank that holds ``layers`` (all by default) on a GPU of ``sms``
    multiprocessors (:mod:`estimator.serving.sms`; H100 SXM by default)."""
    own = [shape.layers[i] for i in (layers if layers is not None else range(len(shape.layers)))]
    hidden = shape.hidden
    kept = {"cublas_workspace": rules.cublas_workspace_bytes}
    moe = [layer for layer in own if layer.experts]
    if moe and not mxfp4_experts:
        kept["moe_workspace"] = max(_moe_workspace(layer, tokens, hidden, tp, act_bytes) for layer in moe)
    if not first:
        kept["intermediate_tensors"] = 2 * tokens * hidden * act_bytes
    forward = max((_layer_bytes(layer, tokens, hidden, tp, act_bytes, mxfp4_experts) for layer in own), default=0)
    sampler = 0
    if last:
        vocab = shape.vocab
        logits = requests * _round_up(vocab, 64) * act_bytes
        fp32 = requests * vocab * 4
        rows = requests * hidden * act_bytes  # the sampled rows, and the torch.rand_like of them the sampler is fed
        sampler = (tokens * hidden * act_bytes + 2 * rows + logits + (fp32 if act_bytes != 4 else 0)
                   + _sampler_extra(rules, requests, vocab, sms))
    encoder = 0
    if shape.vision is not None and first:  # the encoder outputs stay in the encoder cache through the text run
        items = encoder_items(shape.vision, tokens)
        encoder = _encoder_bytes(shape.vision, items, tp, act_bytes)
        kept["encoder_cache"] = items * shape.vision.tokens_per_image * hidden * act_bytes
        kept["mm_dummy_inputs"] = _pixel_batch(shape.vision, items)
    text_run = sum(kept.values()) + max(forward, sampler)
    # the encoder runs first: only the cuBLAS workspace, the pixel batch and its own outputs exist by then
    encoder_run = (kept["cublas_workspace"] + kept["encoder_cache"] + kept["mm_dummy_inputs"] + encoder) if encoder else 0
    # the compile comes before any kernel of the run (the first stage holds no received tensors)
    compile_run = (_compile_benchmark_bytes(shape, tokens, tp, act_bytes)
                   if rules.combo_kernel_benchmark and first and shape.vision is None else 0)
    moments = {"compile": compile_run, "encoder": encoder_run, "sampler": sum(kept.values()) + sampler if last else 0,
               "forward": sum(kept.values()) + forward}
    phase = max(moments, key=lambda k: moments[k])
    return ProfileEstimate(max(text_run, encoder_run, compile_run), forward, sampler, kept, encoder, compile_run, phase)
