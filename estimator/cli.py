"""``estimate-memory`` / ``python -m estimator``: parse arguments, call the core, print the result.

Errors are one line on standard error (the full traceback with ``--debug``); exit status 0 on
success, 2 for bad input or a documented refusal, 3 when the Hub or network failed, 1 for a bug.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from estimator.messages import user_message
from estimator.options import OutputFormat


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, as the contract says
        self.exit(2, f"estimate-memory: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="estimate-memory",
        description="How much memory a Hugging Face model needs to load, run and train, per dtype, without downloading weights.",
        epilog="Many models at once, on Ray, into a Parquet dataset: estimate-memory sweep --help (docs/sweep.md).",
    )
    parser.add_argument("model", help="Hub repo id (org/name or a legacy id like gpt2), Hub URL, a local folder with a config.json, or a local .gguf file")
    parser.add_argument("--library", "--library_name", default="auto", help="auto, transformers, timm, diffusers, sentence-transformers (default: auto)")
    parser.add_argument("--dtypes", nargs="+", default=None, help="float32 float16 bfloat16 float8 int8 int4, space- or comma-separated; short names too: "
                                                                     "fp32 fp16 bf16 fp8 8bit 4bit/nf4 (default: float32 float16 int8 int4)")
    parser.add_argument("--bnb-compute-dtype", default=None,
                        help="int8/int4 rows: the dtype= you pass to from_pretrained with bitsandbytes, float32, float16 or bfloat16 "
                             "(default: auto, the checkpoint's dtype, as transformers loads it)")
    parser.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    parser.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN or the login cache)")
    parser.add_argument("--trust-remote-code", "--trust_remote_code", action="store_true", help="allow running the model repo's own code")
    parser.add_argument("--mode", default="load", help="load, inference, training or serving (default: load)")
    parser.add_argument("--batch-size", default=1, help="batch size (default: 1)")
    parser.add_argument("--seq-len", default=None, help="sequence length for text models")
    parser.add_argument("--image-size", default=None, help="image size for vision models (default: from the config); vision-language "
                                                           "models: the images' size in pixels (default: the processor's resolution)")
    parser.add_argument("--images", default=None, help="vision-language models: images per prompt (default: 1; 0 for text only)")
    parser.add_argument("--video-frames", default=0, help="models that take video: frames of one video per prompt (default: 0)")
    parser.add_argument("--audio-seconds", default=None, help="speech models: seconds of audio per sample (default: the feature extractor's window)")
    parser.add_argument("--max-new-tokens", default=0, help="inference: KV cache also for this many generated tokens")
    parser.add_argument("--device", default="cuda", help="cuda or cpu (default: cuda)")
    parser.add_argument("--attn-implementation", default=None, help="attention kernel of the simulated step: eager, sdpa, "
                        "flash_attention_2 (CUDA, 16-bit) or flex_attention (default: transformers' default for the model)")
    parser.add_argument("--cpu-threads", default=None, help="--device cpu: threads of the run simulated (default: this machine's torch threads)")
    parser.add_argument("--optimizer", default="adamw", help="adamw, sgd, adafactor, adamw8bit (default: adamw)")
    parser.add_argument("--pure-16bit", action="store_true", help="training: keep 16-bit rows entirely in 16 bits")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="training: recompute activations")
    parser.add_argument("--lora-rank", default=None, help="training: LoRA rank")
    parser.add_argument("--lora-targets", default=None, help="training: comma-separated module names for LoRA")
    parser.add_argument("--gpu", default=None, help="a GPU name (T4, L4, A10G, RTX 4090, A100-80GB, H100-80GB, H200, B200, ...): "
                                                    "whether each row fits it, and the largest batch and context that do (GGUF repos: how many layers llama.cpp can offload to it)")
    parser.add_argument("--gpu-memory", default=None, help="instead of --gpu: a GPU's memory, e.g. 24GiB or 80GB")
    gguf = parser.add_argument_group("GGUF files (llama.cpp)")
    gguf.add_argument("--ctx", default=None, help="context length, llama.cpp's -c (default: the model's training context, as llama.cpp's -c 0)")
    gguf.add_argument("--cache-type", default="f16", help="KV cache type for K and V, llama.cpp's -ctk/-ctv: f16 f32 bf16 q8_0 q4_0 q4_1 iq4_nl q5_0 q5_1 (default: f16)")
    gguf.add_argument("--cache-type-v", default=None, help="V cache type when it differs from --cache-type (llama.cpp's -ctv)")
    gguf.add_argument("--flash-attn", default="auto", help="on, off or auto, llama.cpp's -fa (default: auto)")
    gguf.add_argument("--n-gpu-layers", default=None, help="layers on the GPU, llama.cpp's -ngl; all or -1 for every layer (default: as many as fit --gpu, else 0)")
    gguf.add_argument("--gguf-file", default=None, help="one GGUF file (or its quantization, e.g. Q4_K_M) of the repo (default: every file, one row each)")
    serving = parser.add_argument_group("serving (--mode serving; vLLM's options and defaults)")
    serving.add_argument("--gpu-memory-utilization", default=0.9, help="share of the GPU's memory vLLM may use (default: 0.9)")
    serving.add_argument("--max-model-len", default=None, help="tokens per request (default: the config's max_position_embeddings)")
    serving.add_argument("--max-num-seqs", default=None, help="requests per step (default: vLLM's, 1024 on GPUs of 70 GiB or more but A100, else 256)")
    serving.add_argument("--max-num-batched-tokens", default=None,
                         help="tokens per step, the profile run's size (default: vLLM's, 8192 on GPUs of 70 GiB or more but A100, else 2048)")
    serving.add_argument("--kv-cache-dtype", default="auto", help="auto (the model's dtype) or fp8 (default: auto)")
    serving.add_argument("--block-size", default=16, help="tokens per KV-cache block (default: 16)")
    serving.add_argument("--tensor-parallel-size", default=1, help="vLLM's tensor parallel size: the plan is per rank (default: 1)")
    serving.add_argument("--pipeline-parallel-size", default=1,
                         help="vLLM's pipeline parallel size: a plan per stage, the cache sized from the smallest (default: 1)")
    serving.add_argument("--quantization", default=None, help="none or fp8: vLLM's --quantization of a 16-bit checkpoint "
                         "(a checkpoint's own quantization_config is read from it) (default: none)")
    serving.add_argument("--vllm-version", default=None, help="the vLLM version whose start-up accounting to follow (default: 0.19)")
    parser.add_argument("--gpus", default=1, help="GPUs per node (default: 1); more than 1 needs --strategy")
    parser.add_argument("--nodes", default=1, help="nodes (default: 1)")
    parser.add_argument("--strategy", default=None, help="ddp, zero1, zero2, zero3, fsdp (training) or tp (inference): figures per GPU")
    parser.add_argument("--offload", default="none", help="ZeRO: none, optimizer or optimizer+params (default: none)")
    parser.add_argument("--format", default="table", help="table, json, csv or markdown (default: table)")
    parser.add_argument("--count-gpus", action="store_true",
                        help="also: the fewest GPUs of --gpu (or --gpu-memory) that fit this training (--strategy, default fsdp), inference or serving request")
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="the same as --format json")
    parser.add_argument("--cross-check", action="store_true", help="also build the model on meta and compare with the checkpoint's headers")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each Hub call (default: 10)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks, debug logs and the libraries' own warnings (off otherwise)")
    return parser


def _resume_collector() -> None:
    """Turn the cyclic garbage collector back on where :func:`run` paused it."""
    global _COLLECTOR_PAUSED
    if _COLLECTOR_PAUSED:
        _COLLECTOR_PAUSED = False
        gc.enable()


def quiet_libraries(*, debug: bool) -> None:
    """Without ``--debug``, the libraries' own warnings stay off standard error (transformers', peft's, torch's,
    accelerate's and bitsandbytes' ``logging`` records below ERROR, torch's own loggers (``TORCH_LOGS=-all``) and every
    ``warnings.warn``): what bears on an answer is in its notes, and a failure is the one line below. ``--debug`` shows them all, with debug logs.
    Also no progress bars, and no Hub telemetry (the agent-harness list huggingface_hub fetches is not part of the
    answer: docs/benchmarks.md, "Hub requests per answer"). Variables the user set win."""
    logging.basicConfig(level=logging.DEBUG if debug else logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    if debug:
        return
    warnings.simplefilter("ignore")
    for name, value in (("TRANSFORMERS_VERBOSITY", "error"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                        ("HF_HUB_DISABLE_TELEMETRY", "1"), ("PYTHONWARNINGS", "ignore"),
                        ("TORCH_LOGS", "-all")):  # torch's own loggers at ERROR (torchao's import warns through them)
        os.environ.setdefault(name, value)


_COLLECTOR_PAUSED = False  # set by run(): this process's cyclic garbage collector is off until a simulation needs it


def run() -> NoReturn:
    """The process entry (``estimate-memory``, ``python -m estimator``): :func:`main`, in a process whose cyclic garbage
    collector does not run while a load answer imports and reads headers (its collections then find no garbage and
    cost about 20 ms of a 0.25 s answer), nor at exit (its last collections walk every object the imports made, about
    40 ms): docs/benchmarks.md. A simulation, which makes garbage cycles, turns the collector back on (:func:`main`)."""
    global _COLLECTOR_PAUSED
    _COLLECTOR_PAUSED = gc.isenabled()
    gc.disable()
    try:
        status = main()
    finally:
        gc.freeze()  # what is left is the OS's to free at exit
    sys.exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sweep"]:  # `estimate-memory sweep ...`; a Hub model named so: https://huggingface.co/sweep, a folder: ./sweep
        from estimator_sweep.cli import main as sweep_main

        _resume_collector()
        return sweep_main(argv[1:])
    args = build_parser().parse_args(argv)
    quiet_libraries(debug=args.debug)
    if str(args.mode).strip().lower() != "load" or args.count_gpus:
        _resume_collector()
    try:
        from estimator.api import estimate
        from estimator.report import render

        output_format = OutputFormat.parse(args.format, option="format")
        result = estimate(
            args.model, library=args.library, dtypes=args.dtypes, mode=args.mode, batch_size=args.batch_size,
            seq_len=args.seq_len, image_size=args.image_size, max_new_tokens=args.max_new_tokens, device=args.device, cpu_threads=args.cpu_threads,
            images=args.images, video_frames=args.video_frames, audio_seconds=args.audio_seconds,
            optimizer=args.optimizer, pure_16bit=args.pure_16bit, gradient_checkpointing=args.gradient_checkpointing,
            lora_rank=args.lora_rank, lora_targets=args.lora_targets, gpu=args.gpu, gpu_memory=args.gpu_memory, revision=args.revision,
            token=args.token, trust_remote_code=args.trust_remote_code, cross_check=args.cross_check, timeout=args.timeout,
            bnb_compute_dtype=args.bnb_compute_dtype, ctx=args.ctx, cache_type=args.cache_type, cache_type_v=args.cache_type_v,
            flash_attn=args.flash_attn, n_gpu_layers=args.n_gpu_layers, gguf_file=args.gguf_file,
            gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens, kv_cache_dtype=args.kv_cache_dtype, block_size=args.block_size,
            tensor_parallel_size=args.tensor_parallel_size, pipeline_parallel_size=args.pipeline_parallel_size,
            quantization=args.quantization, vllm_version=args.vllm_version,
            gpus=args.gpus, nodes=args.nodes, strategy=args.strategy, offload=args.offload,
            attn_implementation=args.attn_implementation,
        )
        text = render(result, output_format)
        if args.count_gpus:  # the same request at 1, 2, 4, 8... GPUs (estimator.gpu_count)
            from estimator.gpu_count import count_text

            text = count_text(vars(args), output_format.value, text)
    except BaseException as exc:  # the one place every failure becomes a user message
        if isinstance(exc, SystemExit):
            raise
        if args.debug:
            import traceback

            traceback.print_exc()
        message, status = user_message(exc)
        print(f"estimate-memory: {message}", file=sys.stderr)
        return status
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
