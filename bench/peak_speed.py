"""Benchmark: build + simulated training step of Llama-3.1-8B at batch 1 x 4096 tokens.

Run from the repository root: ``python -m bench.peak_speed [--device cuda|cpu] [--repeat N] [--no-extrapolate]
[--dtype bfloat16] [--lora-rank 16] [--gradient-checkpointing] [--optimizer adamw] [--pure-16bit]``
(default: float32, full AdamW; the training options are turned into the step exactly as the CLI's
rows do it, ``estimator.peak.rows.recipe_for``).
The first round warms the process up (imports, PyTorch's meta kernels, FakeTensorMode caches);
the figure that matters is a warm round: the model built on meta from its config, then
``simulate_peak`` (two training steps, peak of the second). ``--smoke``: a 2-layer Llama, 64 tokens, one round on cpu.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

# A copy of the public config.json of meta-llama/Llama-3.1-8B (from ../shared/hub-fixtures).
CONFIG = Path(__file__).resolve().parents[1] / "tests/hub_data/models/meta-llama/Llama-3.1-8B/config.json"


def build(config_path: Path, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    import transformers

    config = transformers.AutoConfig.for_model(**json.loads(config_path.read_text()))
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP, tiny_llama_folder
    from estimator.peak import simulate_peak

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--mode", default="training", choices=["training", "inference"])
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-extrapolate", action="store_true", help="simulate all layers")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16", "int4"])
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--lora-rank", type=int, default=None)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--pure-16bit", action="store_true")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    if args.smoke:
        args.config, args.seq_len, args.repeat, args.device = tiny_llama_folder() / "config.json", 64, 1, "cpu"
    from estimator.build import torch_dtype
    from estimator.options import DType, Mode, Optimizer, TrainingSpec, WorkSpec
    from estimator.peak.rows import recipe_for

    work = WorkSpec(mode=Mode.TRAINING, training=TrainingSpec(
        optimizer=Optimizer.parse(args.optimizer, option="optimizer"), pure_16bit=args.pure_16bit,
        gradient_checkpointing=args.gradient_checkpointing, lora_rank=args.lora_rank))
    built_in, recipe = recipe_for(DType.parse(args.dtype, option="dtype"), work)
    print(f"{args.dtype} row: model built in {built_in.value}; {recipe.describe()}")
    for i in range(args.repeat):
        t0 = time.perf_counter()
        model = build(args.config, torch_dtype(built_in))
        t1 = time.perf_counter()
        r = simulate_peak(model, mode=args.mode, device=args.device, batch_size=1, seq_len=args.seq_len,
                          extrapolate_layers=not args.no_extrapolate, recipe=recipe if args.mode == "training" else None)
        t2 = time.perf_counter()
        del model
        gib = {k: round(v / 2**30, 2) for k, v in r.components.items()}
        print(f"round {i} ({'cold' if i == 0 else 'warm'}): build {t1 - t0:.2f} s, simulate {t2 - t1:.2f} s, "
              f"total {t2 - t0:.2f} s; peak {r.peak_bytes / 2**30:.2f} GiB {gib} [{r.method}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
