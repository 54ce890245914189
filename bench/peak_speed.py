"""Benchmark: build + simulated training step of Llama-3.1-8B (fp32) at batch 1 x 4096 tokens.

Run from the repository root: ``python -m bench.peak_speed [--device cuda|cpu] [--repeat N] [--no-extrapolate]``.
The first round warms the process up (imports, PyTorch's meta kernels, FakeTensorMode caches);
the figure that matters is a warm round: the model built on meta from its config, then
``simulate_peak`` (two training steps, peak of the second).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

# A copy of the public config.json of meta-llama/Llama-3.1-8B (from ../shared/hub-fixtures).
CONFIG = Path(__file__).resolve().parents[1] / "tests/hub_data/models/meta-llama/Llama-3.1-8B/config.json"


def build(config_path: Path) -> torch.nn.Module:
    import transformers

    config = transformers.AutoConfig.for_model(**json.loads(config_path.read_text()))
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def main() -> None:
    from estimator.peak import simulate_peak

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--mode", default="training", choices=["training", "inference"])
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-extrapolate", action="store_true", help="simulate all layers")
    args = ap.parse_args()
    for i in range(args.repeat):
        t0 = time.perf_counter()
        model = build(args.config)
        t1 = time.perf_counter()
        r = simulate_peak(model, mode=args.mode, device=args.device, batch_size=1, seq_len=args.seq_len,
                          extrapolate_layers=not args.no_extrapolate)
        t2 = time.perf_counter()
        del model
        gib = {k: round(v / 2**30, 2) for k, v in r.components.items()}
        print(f"round {i} ({'cold' if i == 0 else 'warm'}): build {t1 - t0:.2f} s, simulate {t2 - t1:.2f} s, "
              f"total {t2 - t0:.2f} s; peak {r.peak_bytes / 2**30:.2f} GiB {gib} [{r.method}]")


if __name__ == "__main__":
    main()
