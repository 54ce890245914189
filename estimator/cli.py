"""``estimate-memory`` / ``python -m estimator``: parse arguments, call the core, print the result.

Errors are one line on standard error (the full traceback with ``--debug``); exit status 0 on
success, 2 for bad input or a documented refusal, 3 when the Hub or network failed, 1 for a bug.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
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
    )
    parser.add_argument("model", help="Hub repo id (org/name or a legacy id like gpt2), Hub URL, or a local folder with a config.json")
    parser.add_argument("--library", "--library_name", default="auto", help="auto, transformers, timm, diffusers, sentence-transformers (default: auto)")
    parser.add_argument("--dtypes", nargs="+", default=None, help="float32 float16 bfloat16 float8 int8 int4, space- or comma-separated (default: float32 float16 int8 int4)")
    parser.add_argument("--bnb-compute-dtype", default=None,
                        help="int8/int4 rows: the dtype= you pass to from_pretrained with bitsandbytes, float32, float16 or bfloat16 "
                             "(default: auto, the checkpoint's dtype, as transformers loads it)")
    parser.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    parser.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN or the login cache)")
    parser.add_argument("--trust-remote-code", "--trust_remote_code", action="store_true", help="allow running the model repo's own code")
    parser.add_argument("--mode", default="load", help="load, inference or training (default: load)")
    parser.add_argument("--batch-size", default=1, help="batch size (default: 1)")
    parser.add_argument("--seq-len", default=None, help="sequence length for text models")
    parser.add_argument("--image-size", default=None, help="image size for vision models (default: from the config)")
    parser.add_argument("--max-new-tokens", default=0, help="inference: KV cache also for this many generated tokens")
    parser.add_argument("--device", default="cuda", help="cuda or cpu (default: cuda)")
    parser.add_argument("--optimizer", default="adamw", help="adamw, sgd, adafactor, adamw8bit (default: adamw)")
    parser.add_argument("--pure-16bit", action="store_true", help="training: keep 16-bit rows entirely in 16 bits")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="training: recompute activations")
    parser.add_argument("--lora-rank", default=None, help="training: LoRA rank")
    parser.add_argument("--lora-targets", default=None, help="training: comma-separated module names for LoRA")
    parser.add_argument("--gpu", default=None, help="a GPU name: adds whether it fits")
    parser.add_argument("--format", default="table", help="table, json, csv or markdown (default: table)")
    parser.add_argument("--cross-check", action="store_true", help="also build the model on meta and compare with the checkpoint's headers")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each Hub call (default: 10)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.debug:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from estimator.api import estimate
        from estimator.report import render

        output_format = OutputFormat.parse(args.format, option="format")
        result = estimate(
            args.model, library=args.library, dtypes=args.dtypes, mode=args.mode, batch_size=args.batch_size,
            seq_len=args.seq_len, image_size=args.image_size, max_new_tokens=args.max_new_tokens, device=args.device,
            optimizer=args.optimizer, pure_16bit=args.pure_16bit, gradient_checkpointing=args.gradient_checkpointing,
            lora_rank=args.lora_rank, lora_targets=args.lora_targets, gpu=args.gpu, revision=args.revision,
            token=args.token, trust_remote_code=args.trust_remote_code, cross_check=args.cross_check, timeout=args.timeout,
            bnb_compute_dtype=args.bnb_compute_dtype,
        )
        text = render(result, output_format)
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
