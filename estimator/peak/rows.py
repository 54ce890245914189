"""Inference and training rows: the load figures of each dtype plus the simulated peak.

The peak comes from :func:`estimator.peak.simulate_peak`, which runs the model's own forward (and
backward and optimizer step) on fake tensors. What this version simulates, row by row:

- inference: float32, float16 and bfloat16 rows (prefill with the KV cache, as ``generate`` runs it); int8 and
  int4 rows as bitsandbytes runs them (:mod:`estimator.peak.sim.quantized`);
- training (:func:`recipe_for` turns the options into the step that is run; QLoRA for int4 rows
  with ``--lora-rank``):
  float32 rows in float32; 16-bit rows in mixed precision by default (float32 master weights,
  forward and loss under ``torch.autocast`` in the row's dtype) or entirely in 16 bits with
  ``--pure-16bit``; with ``--lora-rank`` the frozen base stays in the row's dtype and only the
  adapters train (float32 adapters, autocast, except with ``--pure-16bit``); every optimizer,
  gradient checkpointing; int4 and int8 rows with ``--lora-rank`` as (Q)LoRA. Other quantized rows (float8;
  int8 / int4 training without LoRA, pre-quantized checkpoints) get a null ``peak_bytes`` with a note saying why.
- inference of pre-quantized checkpoints whose layers run here (compressed-tensors, fp8:
  :mod:`estimator.peak.sim.prequant`): their float rows, the float8 row of an fp8 checkpoint and the int4 / int8 row
  of a compressed-tensors one, through the checkpoint's own quantized layers; GPTQ / AWQ on CUDA (float16 /
  bfloat16 rows and the int row of their width) with the Marlin layer modelled from its source
  (:mod:`estimator.peak.sim.prequant_marlin`); MXFP4 (gpt-oss) float rows, dequantized at load on CPU, on CUDA
  with triton_kernels' ``matmul_ogs`` modelled from its source (:mod:`estimator.peak.sim.prequant_mxfp4`);
  ``weights_held`` names the scheme and the kernel assumed.
- training of pre-quantized checkpoints (:mod:`estimator.peak.sim.prequant_lora`, :func:`prequant_training_row`): as
  transformers and peft train them (compressed-tensors and MXFP4 dequantized at load, fp8 dequantized on CPU and
  as stored on CUDA); GPTQ, AWQ and other methods get a null ``peak_bytes`` and one note saying why.

``device="cuda"`` swaps PyTorch's attention function for the duration of a simulation, so
simulations are serialised with a lock (the app serves requests from several threads).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from torch import nn

from estimator.build import torch_dtype
from estimator.build.rejections import check_runnable
from estimator.build.transformers_models import transformers_config
from estimator.errors import BadOptionError, Option, UnsupportedError
from estimator.load.rows import build, built_rows
from estimator.options import Device, DType, Library, Mode
from estimator.options.specs import DEFAULT_IMAGES
from estimator.peak.engine import simulate_peak
from estimator.peak.inputs.prompts.processors import Media, media_inputs
from estimator.peak.inputs.registry import Modality, modality_of, simulated_with, types_with
from estimator.peak.kernels.attention import attention_kernel, kernel_note, row_refusal, set_attention
from estimator.peak.parallel.simulate import simulate_parallel
from estimator.peak.parallel.tp import TPPlanError
from estimator.peak.sim.training import LoraTargetsError, Recipe
from estimator.result import Row
from estimator.source.limits import position_field

if TYPE_CHECKING:
    from estimator.peak.engine import Observe, PeakResult
    from estimator.peak.inputs.prompts.processors import Media
    from estimator.peak.sim.layer_trace import Periodicity
    from estimator.peak.sim.training import Recipe

if TYPE_CHECKING:
    from estimator.options import HardwareSpec, LoadSpec, ParallelSpec, WorkSpec
    from estimator.source.resolve import Resolved

    # per dtype row: the per-op cost counter for its simulation, and what turns the counted costs into the row's
    # speed answer and note (estimator.speed.transformers_speed.row_speed; this stage cannot import estimator.speed)
    # (the answer, its note, and the costs kept on the row as Row.speed_costs)
    RowSpeed = Callable[[DType], tuple[Observe | None, Callable[[PeakResult], tuple[dict[str, Any] | None, str | None, Any]]]]

_SIMULATION_LOCK = threading.Lock()


def simulation_lock() -> threading.Lock:
    """The lock every simulation holds: ``device="cuda"`` swaps PyTorch's attention function while it runs."""
    return _SIMULATION_LOCK

_SIMULATED_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)


def _why_not(dtype: DType, work: WorkSpec) -> str | None:
    """Why this row's peak is not simulated, or None when it is."""
    if dtype in _SIMULATED_DTYPES:
        return None
    if dtype in (DType.INT8, DType.INT4):  # bitsandbytes: estimator.peak.sim.quantized (QLoRA: estimator.peak.sim.qlora)
        if work.mode is Mode.TRAINING and work.training.lora_rank is None:
            return (f"{dtype.value}: bitsandbytes-quantized weights are not trained directly (transformers refuses a "
                    "purely quantized model); a LoRA rank (lora_rank: the CLI's --lora-rank, the page's LoRA rank field) simulates QLoRA; peak_bytes is null")
        return None
    return f"{dtype.value}: peaks of quantized models are not simulated yet; peak_bytes is null"


def recipe_for(dtype: DType, work: WorkSpec, compute: DType | None = None) -> tuple[DType, Recipe]:
    """The dtype the model is built in for this row's training step, and how the step runs.

    An int4 (int8) row with LoRA is QLoRA (LoRA on LLM.int8()): built in the compute dtype (``compute``, the
    ``bnb_compute_dtype``; bfloat16 when not given, QLoRA's usual setting), its Linear layers
    swapped for bitsandbytes' 4-bit ones, trained under autocast in that dtype."""

    training = work.training
    if dtype in (DType.INT4, DType.INT8):
        compute = compute or DType.BFLOAT16
        return compute, Recipe(
            optimizer=training.optimizer.value,
            autocast_dtype=None if training.pure_16bit or compute is DType.FLOAT32 else torch_dtype(compute),
            gradient_checkpointing=True,
            lora_rank=training.lora_rank,
            lora_targets=training.lora_targets,
            kbit=True,
            kbit_bits=4 if dtype is DType.INT4 else 8,
        )
    lora = training.lora_rank is not None
    mixed = dtype.is_16bit and not training.pure_16bit
    # Full fine-tuning in mixed precision keeps float32 master weights; LoRA keeps the frozen base as loaded.
    build = DType.FLOAT32 if mixed and not lora else dtype
    recipe = Recipe(
        optimizer=training.optimizer.value,
        autocast_dtype=torch_dtype(dtype) if mixed else None,
        gradient_checkpointing=training.gradient_checkpointing,
        lora_rank=training.lora_rank,
        lora_targets=training.lora_targets,
        adapters_in_float32=not (dtype.is_16bit and training.pure_16bit),
    )
    return build, recipe


@contextlib.contextmanager
def _lora_targets_worded(resolved: Resolved) -> Iterator[None]:

    try:
        yield
    except LoraTargetsError as exc:
        modules = sorted({name.rsplit(".", 1)[-1] for name in _linear_names(resolved)})[:12]
        raise BadOptionError([
            f"LoRA could not be applied to {resolved.name}: {str(exc).rstrip('.')}. Name the layers to adapt with ",
            Option("lora_targets"), f" (module names separated by commas; this model's Linear layers: {', '.join(modules) or 'none'}).",
        ], model_id=resolved.name, option="lora_targets") from None


def _linear_names(resolved: Resolved) -> list[str]:

    model = build(resolved, DType.FLOAT32)
    return [name for name, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d)) or type(m).__name__ == "Conv1D"]


def position_note(config: dict[str, Any], work: WorkSpec) -> str | None:
    """A note when the tokens of the step outrun the model's positions (``max_position_embeddings`` /
    ``n_positions``, ... as :func:`estimator.source.limits.max_positions` reads them, the limit the fit
    solver caps lengths at): fake tensors do not check the index, the real model would fail or degrade."""
    found = position_field(config)
    if found is None or work.shape.text_len + work.shape.max_new_tokens <= found[1]:
        return None
    key, limit = found
    return (f"warning: sequence length {work.shape.text_len:,}" + (f" + {work.shape.max_new_tokens:,} new tokens" if work.shape.max_new_tokens else "")
            + f" is longer than the model's {limit:,} positions ({key}): the real model would fail or need "
            "position scaling past them; the figures are for the length asked")


def peak_rows(resolved: Resolved, load: LoadSpec, work: WorkSpec, hardware: HardwareSpec,
              parallel: ParallelSpec | None = None, speed: RowSpeed | None = None,
              periodicities: dict[str, Periodicity] | None = None) -> tuple[Row, ...]:
    """Rows with ``peak_bytes`` and ``components`` for ``work.mode`` (inference or training);
    per GPU when ``parallel`` names a strategy (:func:`estimator.peak.parallel.simulate.simulate_parallel`).
    ``speed``: each simulated row's speed answer, counted in the same simulation (``RowSpeed``).
    ``periodicities``: per dtype (the row's ``dtype``), a holder for what the row's layer samples proved
    (:class:`~estimator.peak.sim.layer_trace.Periodicity`; the fit search's later shapes then run two samples).

    ``work``, ``hardware`` and ``parallel`` were checked by :func:`estimator.options.check_supported`.
    """

    if resolved.library not in (Library.TRANSFORMERS, Library.TIMM):
        raise UnsupportedError([
            Option("mode"), f" {work.mode.value} is simulated for transformers and timm models; "
            f"{resolved.library.value} models get load figures only (", Option("mode"), " load).",
        ])
    rows = []
    beyond = position_note(resolved.config, work) if work.shape.image_size is None else None
    for load_row in built_rows(resolved, load):
        dtype = DType.parse(load_row.dtype, option="dtypes")
        from estimator.peak.sim.quantized import refusal

        prequantized = prequantized_row(resolved, work, dtype, load_row)  # estimator.peak.sim.prequant
        trained = prequant_training_row(resolved, work, dtype, load_row)  # estimator.peak.sim.prequant_lora
        if prequantized and parallel is not None and parallel.strategy is not None:
            reason: str | None = (f"{dtype.value}: pre-quantized checkpoints are simulated on one device; under "
                                  f"{parallel.strategy} peak_bytes is null")
        elif prequantized:
            from estimator.peak.sim.prequant import cpu_refusal

            reason = cpu_refusal(resolved.config["quantization_config"], dtype.value,
                                 "cpu" if hardware.device is Device.CPU else "cuda") or row_refusal(dtype.value, _kernel(hardware))
        elif trained:
            reason = _training_refusal(resolved, work, dtype, hardware, parallel) or row_refusal(dtype.value, _kernel(hardware))
        else:
            reason = _why_not(dtype, work) or refusal(resolved, load_row, dtype, parallel) \
                or row_refusal(dtype.value, _kernel(hardware))  # estimator.peak.kernels.attention
        if reason is not None:
            rows.append(replace(load_row, notes=(*load_row.notes, reason)))
            continue
        if parallel is not None and parallel.strategy is not None:
            model, recipe = _model_and_recipe(resolved, load, work, dtype, "cpu" if hardware.device is Device.CPU else "cuda")
            rows.append(_parallel_row(resolved, load_row, model, work, hardware, parallel, recipe))
            continue
        observe, answer = speed(dtype) if speed is not None else (None, None)
        periodicity = None
        if periodicities is not None:
            from estimator.peak.sim.layer_trace import Periodicity

            periodicity = periodicities.setdefault(str(load_row.dtype), Periodicity())
        result = simulate_row(resolved, load, work, hardware, dtype, observe=observe, periodicity=periodicity)
        speed_answer, speed_note, costs = answer(result) if answer is not None else (None, None, None)
        held = load_row.weights_held
        trained_note: tuple[str, ...] = ()
        if trained:
            from estimator.peak.sim import prequant_lora

            built_in, _ = _prequant_plan(resolved, load, dtype)
            on = "cpu" if hardware.device is Device.CPU else "cuda"
            held = prequant_lora.held_label(resolved.config["quantization_config"], on, built_in.value)
            trained_note = (prequant_lora.note(resolved.config["quantization_config"], on, built_in.value),)
        if prequantized:
            from estimator.peak.sim.prequant import held_label

            built_in, _ = _prequant_plan(resolved, load, dtype)
            held = held_label(resolved.config["quantization_config"], "cpu" if hardware.device is Device.CPU else "cuda",
                              built_in.value)
        rows.append(replace(
            load_row,
            weights_held=held,
            speed=speed_answer,
            speed_costs=costs,
            peak_bytes=result.peak_bytes,
            components=dict(result.components),
            runtime_overhead=None if result.allocator_overhead is None else dict(result.allocator_overhead),
            outputs_kept_bytes=result.outputs_kept_bytes,
            method=result.method,
            notes=(*load_row.notes, *trained_note, *result.notes, *((beyond,) if beyond else ()),
                   *((speed_note,) if speed_note else ())),
        ))
    return tuple(rows)


def simulate_row(resolved: Resolved, load: LoadSpec, work: WorkSpec, hardware: HardwareSpec, dtype: DType,
                 observe: Observe | None = None, periodicity: Periodicity | None = None) -> PeakResult:
    """The simulated step of one dtype row (``peak_rows`` for one row; the fit solver calls it
    again with other batch sizes and lengths in ``work.shape``). Checked against a GPU, the caching allocator
    is replayed over every layer's allocations: the whole model's trace, written from the layer samples' where
    it is exactly periodic in the layers (:mod:`estimator.peak.sim.layer_trace`), else simulated. ``observe``: see
    :func:`~estimator.peak.engine.simulate_peak` (the per-op cost counter, :mod:`estimator.speed.trace`);
    ``periodicity``: one holder for the fit search's simulations of this row (see ``simulate_peak``)."""

    model, recipe = _model_and_recipe(resolved, load, work, dtype, "cpu" if hardware.device is Device.CPU else "cuda")
    used = set_attention(model, _kernel(hardware))  # the attention kernel (estimator.peak.kernels.attention)
    with _SIMULATION_LOCK, _lora_targets_worded(resolved), attention_kernel(_kernel(hardware)):
        result = simulate_peak(
            model,
            mode="training" if work.mode is Mode.TRAINING else "inference",
            device="cpu" if hardware.device is Device.CPU else "cuda",
            batch_size=work.shape.batch_size,
            seq_len=work.shape.text_len,
            image_size=work.shape.image_size,
            max_new_tokens=work.shape.max_new_tokens,
            recipe=recipe,
            # a GPU chosen: the allocator's figures, over the whole model's trace (written from the layer samples')
            allocator=hardware.fits_a_gpu,
            media=media_request(resolved, work),
            observe=observe,
            periodicity=periodicity,
        )
    note = kernel_note(used, _kernel(hardware))
    return result if note is None else replace(result, notes=(*result.notes, note))


def _kernel(hardware: HardwareSpec) -> str | None:
    return None if hardware.attn_implementation is None else hardware.attn_implementation.value


def image_tokens(resolved: Resolved, work: WorkSpec) -> int:
    """The image (and video) tokens each prompt of ``work`` carries (0 for text models and speech models): what
    the model's processor expands its images and video into, so that a context limit counts them too."""

    media = media_request(resolved, work)
    if media is None or (media.images == 0 and not media.video_frames):
        return 0
    config = transformers_config(resolved.config, model=resolved.name)
    return int(media_inputs(config, media, batch_size=1, text_len=1).tensors["input_ids"].shape[1]) - 1


def media_request(resolved: Resolved, work: WorkSpec) -> Media | None:
    """What each prompt carries besides text, for a model whose processor family is simulated with its
    inputs (:mod:`estimator.peak.inputs.prompts.processors`): ``images`` (default ``DEFAULT_IMAGES``) of ``image_size``;
    None for other models and for a vision-language prompt of text only (``images`` 0)."""

    shape = work.shape
    model_type = str(resolved.config.get("model_type") or "")
    preprocessor, processor = resolved.extra.get("preprocessor_config"), resolved.extra.get("processor_config")
    if shape.video_frames and not simulated_with(model_type, Modality.VIDEO):
        raise UnsupportedError([Option("video_frames"), f" shapes video-language models whose video processor is simulated "
                                f"({', '.join(types_with(Modality.VIDEO))}); {resolved.name} ({model_type}) is not one of them."],
                               option="video_frames")
    if shape.images and not simulated_with(model_type, Modality.IMAGES):
        raise UnsupportedError([Option("images"), f" shapes vision-language models whose processor is simulated "
                                f"({', '.join(types_with(Modality.IMAGES))}); {resolved.name} ({model_type}) is not one of them."],
                               option="images")
    if shape.audio_seconds is not None and not simulated_with(model_type, Modality.AUDIO):
        raise UnsupportedError([Option("audio_seconds"), f" shapes speech models whose feature extractor is simulated "
                                f"({', '.join(types_with(Modality.AUDIO))}); {resolved.name} ({model_type}) is not one of them."],
                               option="audio_seconds")
    modality = modality_of(model_type)
    if modality is Modality.AUDIO:
        return Media(audio_seconds=shape.audio_seconds, preprocessor=preprocessor, processor=processor)
    if modality is None:
        return None
    # a prompt with a video carries no image unless asked (--images)
    images = (0 if shape.video_frames else DEFAULT_IMAGES) if shape.images is None else shape.images
    if images == 0 and not shape.video_frames:
        return None
    return Media(images=images, image_size=shape.image_size, video_frames=shape.video_frames, preprocessor=preprocessor,
                 processor=processor, video_preprocessor=resolved.extra.get("video_preprocessor_config"))


def _model_and_recipe(resolved: Resolved, load: LoadSpec, work: WorkSpec, dtype: DType,
                      device: str = "cpu") -> tuple[nn.Module, Recipe | None]:
    """The meta model a row's step runs on, built in the dtype its recipe asks for, and the recipe (training only)."""

    built_in, recipe = recipe_for(dtype, work, load.bnb_compute_dtype) if work.mode is Mode.TRAINING else (dtype, None)
    if prequantized_row(resolved, work, dtype, None):
        built_in, recipe = _prequant_plan(resolved, load, dtype)
    elif prequant_training_row(resolved, work, dtype, None):  # trained as its scheme loads for training
        from estimator.peak.sim.prequant_lora import training_recipe

        built_in, recipe = recipe_for(_prequant_plan(resolved, load, dtype)[0], work)
        recipe = training_recipe(resolved.config["quantization_config"], device, recipe)
    elif work.mode is not Mode.TRAINING and dtype in (DType.INT8, DType.INT4):
        from estimator.peak.sim.quantized import inference_plan

        built_in, recipe = inference_plan(resolved, load, dtype)
    model = build(resolved, built_in, trust_remote_code=load.trust_remote_code)
    check_runnable(model, resolved.config, name=resolved.name)
    return model, recipe


def prequantized_row(resolved: Resolved, work: WorkSpec, dtype: DType, load_row: Row | None) -> bool:
    """Whether this row's inference runs the pre-quantized checkpoint's own layers (:mod:`estimator.peak.sim.prequant`):
    a checkpoint whose ``quantization_config`` is simulated there; its float rows (the dtype it is loaded in), its
    float8 row (an ``fp8`` checkpoint) and its int4 / int8 row (a compressed-tensors, GPTQ or AWQ checkpoint of that
    width, whose load row has figures). ``load_row`` None: the row is known to have figures (the fit solver's calls)."""
    from estimator.peak.sim.prequant import Scheme, scheme_of

    scheme = scheme_of(resolved.config.get("quantization_config"))
    if scheme is None or work.mode is Mode.TRAINING or (load_row is not None and load_row.total_bytes is None):
        return False
    if dtype in _SIMULATED_DTYPES:
        return True
    if dtype is DType.FLOAT8:
        return scheme is Scheme.FP8
    if scheme in (Scheme.GPTQ, Scheme.AWQ):
        bits = resolved.config["quantization_config"].get("bits", 4)
        return dtype is (DType.INT4 if bits == 4 else DType.INT8)
    return dtype in (DType.INT8, DType.INT4) and scheme is Scheme.COMPRESSED_TENSORS


def prequant_training_row(resolved: Resolved, work: WorkSpec, dtype: DType, load_row: Row | None) -> bool:
    """Whether this training row is a pre-quantized checkpoint's (a ``quantization_config`` other than bitsandbytes',
    whose int rows are QLoRA's), trained as :mod:`estimator.peak.sim.prequant_lora` says (or refused there, in one
    line): its float rows, and the row of its own width (an fp8 checkpoint's float8 row, a compressed-tensors one's
    int4 / int8 row) where the load row has figures."""
    from estimator.peak.sim.prequant import Scheme, scheme_of

    declared = resolved.config.get("quantization_config")
    if (work.mode is not Mode.TRAINING or not isinstance(declared, dict)
            or str(declared.get("quant_method") or "bitsandbytes") == "bitsandbytes"):
        return False
    if dtype in _SIMULATED_DTYPES:
        return True
    if load_row is not None and load_row.total_bytes is None:
        return False
    scheme = scheme_of(declared)
    if dtype is DType.FLOAT8:
        return scheme is Scheme.FP8
    return dtype in (DType.INT8, DType.INT4) and scheme is Scheme.COMPRESSED_TENSORS


def _training_refusal(resolved: Resolved, work: WorkSpec, dtype: DType, hardware: HardwareSpec,
                      parallel: ParallelSpec | None) -> str | None:
    """Why a pre-quantized checkpoint's training row has no peak (:func:`prequant_training_row`), else None."""
    from estimator.peak.sim import prequant_lora

    declared = resolved.config["quantization_config"]
    on = "cpu" if hardware.device is Device.CPU else "cuda"
    found = prequant_lora.refusal(declared, dtype.value, on, lora=work.training.lora_rank is not None)
    if found is None and prequant_lora.as_stored(declared, on) and parallel is not None and parallel.strategy is not None:
        return (f"{dtype.value}: a pre-quantized checkpoint trained as stored is simulated on one device; under "
                f"{parallel.strategy} peak_bytes is null")
    return found


def _prequant_plan(resolved: Resolved, load: LoadSpec, dtype: DType) -> tuple[DType, Recipe]:
    """The dtype a pre-quantized row's model is built in (a float row's own; else the dtype the checkpoint loads in:
    its floating tensors and what its layers compute in) and its recipe."""
    import json

    from estimator.load.rows import kept_dtype_of

    built_in = dtype if dtype in _SIMULATED_DTYPES else kept_dtype_of(resolved, load).dtype or DType.BFLOAT16
    return built_in, Recipe(prequantized=json.dumps(resolved.config["quantization_config"], sort_keys=True))


def _parallel_row(resolved: Resolved, load_row: Row, model: nn.Module, work: WorkSpec, hardware: HardwareSpec,
                  parallel: ParallelSpec, recipe: Recipe | None) -> Row:
    """One row per GPU under ``parallel.strategy``; a row the strategy cannot simulate gets a null peak and a note."""

    try:
        with _SIMULATION_LOCK, _lora_targets_worded(resolved):
            found = simulate_parallel(
                model, parallel, mode=work.mode.value, device="cpu" if hardware.device is Device.CPU else "cuda",
                batch_size=work.shape.batch_size, seq_len=work.shape.text_len, image_size=work.shape.image_size,
                max_new_tokens=work.shape.max_new_tokens, recipe=recipe,
            )
    except (TPPlanError, ValueError) as exc:
        if isinstance(exc, BadOptionError):
            raise
        return replace(load_row, notes=(*load_row.notes, f"{parallel.strategy}: not simulated for this model ({exc}); peak_bytes is null"))
    result = found.peak
    return replace(load_row, peak_bytes=result.peak_bytes, components=dict(result.components), method=result.method,
                   notes=(*load_row.notes, *result.notes), cpu_bytes=found.cpu_bytes)
