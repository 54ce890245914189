"""The speed of a transformers row: its traced per-op costs (:mod:`estimator.speed.trace`) through the roofline.

The costs come from the row's own memory simulation (:func:`estimator.peak.rows.peak_rows` takes the
counter from :func:`row_speed`; nothing is simulated twice). Inference: time to first token (the
``prefill`` phase), prefill tokens/s, and decode tokens/s at the batch asked, at the end of the
generation (the traced step: ``seq_len + max_new_tokens - 1`` positions in the cache) and at its start
(``seq_len`` positions), derived from the traced step: its context-dependent ops (each attention kernel
and the cache's ``torch.cat`` copies just before it, ``DynamicLayer.update``) have their FLOPs and bytes
scaled by the positions they cover (the query and output of the attention kernel are scaled with them:
one token's, under 0.1 % of its bytes from 512 positions on). Training: the step (``train_forward`` +
``backward`` + ``optimizer``), tokens/s and model FLOPs utilisation.

Launches: transformers' ``generate`` runs eager PyTorch, so each kernel takes at least the launch floor
(``launch_hidden=False``); a training step's and a prefill's kernels are long enough that the floor
rarely binds, and it is applied the same way (eager PyTorch throughout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from estimator.options import Device, DType, Mode
from estimator.speed.cost import OpCost, Phase, PhaseCost
from estimator.speed.hardware import Hardware, find_hardware
from estimator.speed.roofline import Label, PhaseTime, phase_time
from estimator.speed.row_costs import phase_tokens
from estimator.speed.trace import CostTrace, TraceError, decode_context

if TYPE_CHECKING:
    from estimator.options import Options
    from estimator.peak.engine import Observe, PeakResult
    from estimator.peak.rows import RowSpeed
    from estimator.source.resolve import Resolved

__all__ = ["NOT_MEASURED", "RowCosts", "answer_on", "decode_at", "inference_answer", "kv_ops", "model_flops", "row_speed", "short_speed", "speed_cell", "training_answer"]

ENGINE = "transformers"
_ATTENTION_BACKWARD_MATMULS = 5  # flop_counter's SDPA backward: the scores recomputed + 4 gradient matmuls


def _is_attention(op: OpCost) -> bool:
    return "attention" in op.name and "backward" not in op.name


def kv_ops(decode: PhaseCost) -> frozenset[int]:
    """Indices of the decode step's ops that grow with the cache: each attention kernel and the ``cat`` ops
    directly before it (the cache's keys and values, ``DynamicLayer.update``). Empty where no fused or ATen
    attention kernel ran (an eager attention's matmuls are not told apart from the others)."""
    found: set[int] = set()
    for i, op in enumerate(decode.ops):
        if not _is_attention(op):
            continue
        found.add(i)
        j = i - 1
        while j >= 0 and decode.ops[j].name == "aten.cat.default" and i - j <= 2:
            found.add(j)
            j -= 1
    return frozenset(found)


def decode_at(decode: PhaseCost, traced_context: int, context: int) -> PhaseCost:
    """The decode step at ``context`` positions in the cache, from the step traced at ``traced_context``: the
    context-dependent ops (:func:`kv_ops`) scaled by ``(context + 1) / (traced_context + 1)`` (the positions the
    step's attention covers), the others as traced."""
    scale = (context + 1) / (traced_context + 1)
    kv = kv_ops(decode)
    ops = tuple(replace(op, flops=round(op.flops * scale), bytes_read=round(op.bytes_read * scale),
                        bytes_written=round(op.bytes_written * scale)) if i in kv else op
                for i, op in enumerate(decode.ops))
    return PhaseCost(decode.phase, ops, decode.tokens)


def _why_no_peak(hardware: Hardware, dtype: DType) -> str | None:
    if dtype is DType.BFLOAT16 and hardware.native_bf16 is False:
        return (f"{hardware.name} has no bfloat16 units (the data sheet states none; PyTorch emulates it), so its "
                "bfloat16 speed is not modelled: ask for float16 (--dtypes float16)")
    try:
        hardware.peak_flops(dtype.value)
    except ValueError:
        return f"{hardware.name} states no peak FLOP/s in the hardware table, so no speed is modelled"
    return None


NOT_MEASURED = "error not measured: no public runs of transformers' generate or training loop are compared here"
"""What a transformers row says in place of an error band: no measured runs of these engines are given to the bench
(``bench/speed_accuracy.py`` measures llama.cpp's), so no band is invented; ``measured_error`` is null."""


def _common(hardware: Hardware) -> dict[str, Any]:
    return {"engine": ENGINE, "hardware": hardware.name, "label": Label.ROOFLINE.value, "measured_error": None}


def inference_answer(costs: dict[Phase, PhaseCost], hardware: Hardware, *, batch: int, prompt: int, new_tokens: int,
                     launch_hidden: bool = False) -> tuple[dict[str, Any], str]:
    """The speed answer of one inference row (JSON ``rows[].speed``) and its note: time to first token and prefill
    tokens/s (``prefill``, or a plain ``forward``), decode tokens/s at the end of the generation (the traced step)
    and at its start (:func:`decode_at`)."""
    out = _common(hardware)
    first = costs.get(Phase.PREFILL) or costs.get(Phase.FORWARD)
    words = []
    pre: PhaseTime | None = None
    if first is not None:
        pre = phase_time(first, hardware, launch_hidden=launch_hidden)
        out.update(batch=batch, prompt_tokens=prompt, time_to_first_token_s=round(pre.seconds, 6),
                   prefill_tokens_per_second=round(pre.tokens_per_second, 1),
                   prefill_flops_per_token=first.flops // max(first.tokens, 1),
                   prefill_bytes_per_token=first.bytes_moved // max(first.tokens, 1), prefill_kernels=first.kernels)
        words.append(f"time to first token {pre.seconds * 1e3:,.2f} ms ({pre.tokens_per_second:,.0f} prompt tokens/s; "
                     f"{first.flops // max(first.tokens, 1):,} FLOPs a token)")
    decode = costs.get(Phase.DECODE)
    main = pre
    if decode is not None and new_tokens >= 1:
        end_context = decode_context(prompt, new_tokens)
        end = phase_time(decode, hardware, launch_hidden=launch_hidden)
        kv = kv_ops(decode)
        start = phase_time(decode_at(decode, end_context, prompt), hardware, launch_hidden=launch_hidden) if kv else None
        per = max(decode.tokens, 1)
        kv_read = sum(op.bytes_read for i, op in enumerate(decode.ops) if i in kv and _is_attention(op))
        copy = sum(op.bytes_read + op.bytes_written for i, op in enumerate(decode.ops) if i in kv and not _is_attention(op))
        out.update(generated_tokens=new_tokens, decode_context=end_context,
                   decode_tokens_per_second=round(end.tokens_per_second, 1),
                   decode_tokens_per_second_at_start=None if start is None else round(start.tokens_per_second, 1),
                   decode_step_s=round(end.seconds, 6), decode_launch_s=round(end.launch_seconds, 6),
                   decode_bytes_per_token=decode.bytes_moved // per, decode_kv_bytes_per_token=kv_read // per if kv else None,
                   decode_cache_copy_bytes_per_token=copy // per if kv else None,
                   decode_other_bytes_per_token=(decode.bytes_moved - kv_read - copy) // per if kv else None,
                   decode_flops_per_token=decode.flops // per, kernels_per_token=decode.kernels)
        at_start = "" if start is None else f" ({start.tokens_per_second:,.1f} at its start, context {prompt:,})"
        words.append(f"decode {end.tokens_per_second:,.1f} tokens/s at batch {batch} and context {end_context:,}{at_start}, "
                     f"reading {decode.bytes_moved // per:,} bytes a token "
                     + (f"(KV {kv_read // per:,}, cache copy {copy // per:,}, weights and activations "
                        f"{(decode.bytes_moved - kv_read - copy) // per:,})" if kv else
                        "(no attention kernel of its own to tell the KV read apart: attention ran as separate ops)")
                     + f" in {decode.kernels:,} kernels"
                     + ("" if launch_hidden else f" launched from eager PyTorch ({end.launch_seconds * 1e3:.2f} ms of launch floor a step)"))
        main = end
    if main is None:
        raise TraceError("no prefill, forward or decode phase was traced")
    out.update(bandwidth_bytes_s=main.bandwidth_bytes_s, peak_flops=(pre or main).peak_flops)
    note = (f"speed on {hardware.name} ({ENGINE}, roofline): " + "; ".join(words)
            + f"; at {main.bandwidth_bytes_s / 1e9:,.0f} GB/s and {(pre or main).peak_flops / 1e12:,.1f} TFLOP/s achievable ({NOT_MEASURED}; docs/speed.md)")
    return out, note


def model_flops(costs: dict[Phase, PhaseCost], *, checkpointed: bool = False, lora: bool = False) -> int | None:
    """A training step's model FLOPs: forward + backward as the model's math needs them, less what the hardware redoes.

    Without gradient checkpointing: the step's FLOPs less a fused attention backward's recompute of the scores (one
    of flop_counter's 5 SDPA-backward matmuls, ``2 x b x h x s x s x d``; docs/speed_trace.md). With it, the backward
    replays part of the forward (PyTorch's non-reentrant checkpoint stops replaying once the saved tensors are back,
    so not all of it): full fine-tuning's model FLOPs are then 3 x the forward's (each matmul's backward is its
    input and weight gradients, twice its forward; attention's too); with LoRA the frozen weights get no weight
    gradient and the replay is not told apart: ``None``. Equal to ``FlopCounterMode``'s count of the real step with
    eager attention and no checkpointing (``tests/test_speed_answers.py``)."""
    if checkpointed:
        return None if lora else 3 * costs[Phase.TRAIN_FORWARD].flops
    fused = sum(op.flops for op in costs[Phase.BACKWARD].ops if "attention" in op.name and "backward" in op.name)
    total = sum(c.flops for p, c in costs.items() if p in (Phase.TRAIN_FORWARD, Phase.BACKWARD, Phase.OPTIMIZER))
    return total - fused // _ATTENTION_BACKWARD_MATMULS


def training_answer(costs: dict[Phase, PhaseCost], hardware: Hardware, *, tokens: int, checkpointed: bool = False,
                    lora: bool = False, launch_hidden: bool = False) -> tuple[dict[str, Any], str]:
    """The speed answer of one training row: step time (forward + backward + optimizer step), tokens/s and model FLOPs
    utilisation (model FLOPs / step time / the achievable peak's data-sheet figure)."""
    times = {p: phase_time(costs[p], hardware, launch_hidden=launch_hidden)
             for p in (Phase.TRAIN_FORWARD, Phase.BACKWARD, Phase.OPTIMIZER)}
    step = sum(t.seconds for t in times.values())
    flops = sum(costs[p].flops for p in times)
    useful = model_flops(costs, checkpointed=checkpointed, lora=lora)
    forward = times[Phase.TRAIN_FORWARD]
    stated = hardware.peak_flops(_dtype_of(costs))
    mfu = useful / step / stated if step > 0 and useful is not None else None
    out = _common(hardware)
    out.update(step_tokens=tokens, step_s=round(step, 6), train_tokens_per_second=round(tokens / step, 1) if step else 0.0,
               step_forward_s=round(forward.seconds, 6), step_backward_s=round(times[Phase.BACKWARD].seconds, 6),
               step_optimizer_s=round(times[Phase.OPTIMIZER].seconds, 6),
               step_flops=flops, model_flops_per_step=useful, model_flops_utilization=None if mfu is None else round(mfu, 4),
               step_bytes=sum(costs[p].bytes_moved for p in times), step_kernels=sum(costs[p].kernels for p in times),
               bandwidth_bytes_s=forward.bandwidth_bytes_s, peak_flops=forward.peak_flops, stated_peak_flops=stated)
    note = (f"speed on {hardware.name} ({ENGINE}, roofline): a training step of {tokens:,} tokens {step * 1e3:,.2f} ms "
            f"(forward {forward.seconds * 1e3:,.2f}, backward {times[Phase.BACKWARD].seconds * 1e3:,.2f}, optimizer "
            f"{times[Phase.OPTIMIZER].seconds * 1e3:,.2f}), {tokens / step if step else 0:,.0f} tokens/s; {flops:,} FLOPs a step "
            + (f"({useful:,} model FLOPs: MFU {mfu:.1%} of {stated / 1e12:,.1f} TFLOP/s stated), " if useful is not None and mfu is not None
               else "(model FLOPs not told apart from gradient checkpointing's replay under LoRA: no MFU), ")
            + f"{out['step_bytes']:,} bytes moved; at {forward.bandwidth_bytes_s / 1e9:,.0f} GB/s and "
            f"{forward.peak_flops / 1e12:,.1f} TFLOP/s achievable ({NOT_MEASURED}; docs/speed.md)")
    return out, note


def _dtype_of(costs: dict[Phase, PhaseCost]) -> str:
    flops: dict[str, int] = {}
    for cost in costs.values():
        for op in cost.ops:
            flops[op.dtype] = flops.get(op.dtype, 0) + op.flops
    return max(flops, key=lambda d: flops[d]) if any(flops.values()) else "float32"


@dataclass(frozen=True)
class RowCosts:
    """What a row's speed is computed from, kept on the row (``Row.speed_costs``) so that any hardware's answer
    follows without simulating again (:func:`answer_on`; the "fits on" table's speed column)."""

    costs: dict[Phase, PhaseCost]
    dtype: DType
    mode: Mode
    batch: int
    prompt: int
    new_tokens: int
    checkpointed: bool = False
    lora: bool = False


def answer_on(row_costs: RowCosts, hardware: Hardware) -> tuple[dict[str, Any] | None, str]:
    """The speed answer and note of a row's costs on ``hardware`` (``None`` and the reason where it states no peak
    for the row's dtype)."""
    why = _why_no_peak(hardware, row_costs.dtype)
    if why is not None:
        return None, f"no speed: {why}"
    if row_costs.mode is Mode.TRAINING:
        return training_answer(row_costs.costs, hardware, tokens=row_costs.batch * row_costs.prompt,
                               checkpointed=row_costs.checkpointed, lora=row_costs.lora)
    answer, note = inference_answer(row_costs.costs, hardware, batch=row_costs.batch, prompt=row_costs.prompt,
                                    new_tokens=row_costs.new_tokens)
    if Phase.DECODE not in row_costs.costs:
        note += "; decode speed needs --max-new-tokens (1 or more): the decode step is then traced"
    return answer, note


def speed_cell(row_costs: RowCosts, hardware: Hardware) -> str:
    """A row's speed on ``hardware`` in a few words (:func:`short_speed` of :func:`answer_on`; the decode at the start
    of the generation is left out), or why there is none."""
    why = _why_no_peak(hardware, row_costs.dtype)
    if why is not None:
        return "no native bfloat16" if row_costs.dtype is DType.BFLOAT16 else "no peak stated"
    if row_costs.mode is Mode.TRAINING:
        answer, _ = answer_on(row_costs, hardware)
        return "" if answer is None else short_speed(answer)
    costs = {p: c for p, c in row_costs.costs.items() if p in (Phase.PREFILL, Phase.FORWARD)}
    decode = row_costs.costs.get(Phase.DECODE)
    parts = []
    if decode is not None and row_costs.new_tokens >= 1:
        parts.append(f"~{phase_time(decode, hardware, launch_hidden=False).tokens_per_second:,.1f} tok/s decode")
    first = costs.get(Phase.PREFILL) or costs.get(Phase.FORWARD)
    if first is not None:
        parts.append(f"TTFT {_seconds(phase_time(first, hardware, launch_hidden=False).seconds)}")
    return ", ".join(parts)


def short_speed(answer: dict[str, Any]) -> str:
    """A few words of a speed answer for a table cell or the summary line ("~42 tok/s decode, TTFT 0.12 s")."""
    comm = answer.get("communication")
    if "step_s" not in answer and "decode_tokens_per_second" not in answer and isinstance(comm, dict):  # a --strategy row
        return f"gradient sync {_seconds(comm['step_seconds'])} a step ({comm['strategy']}, {comm['gpus']} GPUs over {comm['link']})"
    if "step_s" in answer:
        mfu = answer["model_flops_utilization"]
        return (f"~{answer['train_tokens_per_second']:,.0f} tok/s training, step {_seconds(answer['step_s'])}"
                + ("" if mfu is None else f", MFU {mfu:.0%}"))
    parts = []
    if answer.get("engine") == "vllm" and answer.get("decode_tokens_per_second"):  # serving: summed over the concurrent sequences
        parts.append(f"~{answer['decode_tokens_per_second']:,.0f} tok/s decode over {answer['concurrency']:,} sequences")
    elif answer.get("decode_tokens_per_second"):
        parts.append(f"~{answer['decode_tokens_per_second']:,.1f} tok/s decode")
    if answer.get("time_to_first_token_s") is not None:
        parts.append(f"TTFT {_seconds(answer['time_to_first_token_s'])}")
    return ", ".join(parts)


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1e3:.1f} ms"


def row_speed(options: Options, resolved: Resolved) -> RowSpeed | None:
    """For :func:`estimator.peak.rows.peak_rows`: per dtype row, the counter to pass to its simulation and what
    turns the counted costs into the row's speed answer, note and :class:`RowCosts`; ``None`` without ``--gpu``
    naming known hardware (``--gpu-memory`` alone has no bandwidth), or in other modes than inference and training."""
    if options.hardware.gpu is None or options.mode not in (Mode.INFERENCE, Mode.TRAINING):
        return None
    hardware = find_hardware(options.hardware.gpu)
    work = options.work
    device = "cpu" if options.hardware.device is Device.CPU else "cuda"
    layers = resolved.config.get("num_hidden_layers")

    def for_row(dtype: DType) -> tuple[Observe | None, Callable[[PeakResult], tuple[dict[str, Any] | None, str | None, Any]]]:
        trace = CostTrace(layers=layers if isinstance(layers, int) else None, device=device)

        def finish(result: PeakResult) -> tuple[dict[str, Any] | None, str | None, Any]:
            try:
                if result.method != "simulated":
                    raise TraceError("the step was not simulated (a formula stood in for it)")
                costs = trace.phase_costs(phase_tokens(work))
                shape = work.shape
                training = work.mode is Mode.TRAINING
                lora = training and work.training.lora_rank is not None
                # QLoRA (int4 rows with LoRA) always checkpoints (estimator.peak.rows.recipe_for)
                checkpointed = training and (work.training.gradient_checkpointing or (lora and dtype is DType.INT4))
                row_costs = RowCosts(costs, dtype, work.mode, shape.batch_size, shape.text_len, shape.max_new_tokens,
                                     checkpointed, lora)
                answer, note = answer_on(row_costs, hardware)
                return answer, note, row_costs
            except (TraceError, KeyError, ValueError) as exc:
                return None, f"no speed: {exc}", None

        return trace.observe, finish

    return for_row
