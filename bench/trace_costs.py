"""FLOPs and bytes per decode token of a model from the per-op trace, beside ``2 x params`` and ``weights + KV``.

``python -m bench.trace_costs [MODEL_DIR_OR_ID] [--dtype bfloat16] [--contexts 1 4096]`` runs the estimate's
inference row (``parse_options`` -> ``resolve`` -> ``estimator.peak.rows.simulate_row``: the model built on meta,
its memory simulated) once per context with the cost trace (:func:`estimator.speed.row_costs.simulate_row_with_costs`,
``device="cuda"``, batch 1, one new token: the decode step runs against a cache of ``context`` positions). Prints a Markdown table (docs/speed_trace.md).
Default: the Llama-3.1-8B fixture of the Hub stand-in (tests/hub_data).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests/hub_data/models/meta-llama/Llama-3.1-8B"


def main(argv: list[str] | None = None) -> int:
    import torch

    from estimator.load.rows import build
    from estimator.options import DType, Library, parse_options
    from estimator.source.reference import parse_reference
    from estimator.source.resolve import resolve
    from estimator.speed.cost import Phase
    from estimator.speed.row_costs import simulate_row_with_costs
    from estimator.speed.trace import decode_context

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(FIXTURE))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--contexts", type=int, nargs="+", default=[1, 4096])
    parser.add_argument("--smoke", action="store_true", help="one short context (CI: the bench runs and prints its table)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.contexts = [8]
    resolved = resolve(parse_reference(args.model), Library.AUTO)
    dtype = DType.parse(args.dtype, option="dtypes")
    print("| context | FLOPs/token | 2 x params | ratio | bytes/token | weights + KV | ratio | kernels | bytes by op |")
    print("|---|---|---|---|---|---|---|---|---|")
    model = build(resolved, dtype)  # for its parameters only
    for context in args.contexts:
        params = {id(p): p for p in model.parameters()}.values()
        n_params = sum(p.numel() for p in params)
        weight_bytes = sum(p.numel() * p.element_size() for p in params)
        config = model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        itemsize = torch.empty((), dtype=next(iter(params)).dtype).element_size()
        kv = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * itemsize * (context + 1)
        options = parse_options(dtypes=[dtype.value], mode="inference", device="cuda", batch_size=1, seq_len=context,
                                max_new_tokens=1)
        _, costs = simulate_row_with_costs(resolved, options.load, options.work, options.hardware, dtype)
        decode = costs[Phase.DECODE]
        assert decode_context(context, 1) == context
        by_op: dict[str, int] = defaultdict(int)
        for op in decode.ops:
            by_op[op.name.removeprefix("aten.").split(".")[0]] += op.bytes_read + op.bytes_written
        top = ", ".join(f"{k} {v / 1e9:.3f} GB" for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:4])
        print(f"| {context:,} | {decode.flops / 1e9:.3f} G | {2 * n_params / 1e9:.3f} G | {decode.flops / (2 * n_params):.4f} "
              f"| {decode.bytes_moved / 1e9:.3f} GB | {(weight_bytes + kv) / 1e9:.3f} GB | {decode.bytes_moved / (weight_bytes + kv):.4f} "
              f"| {decode.kernels:,} | {top} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
