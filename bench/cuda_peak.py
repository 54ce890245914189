"""The simulated CUDA peak against the CUDA caching allocator, on a lent GPU.

    python -m bench.cuda_peak                 # every case of testkit.peak_cases, training and inference
    python -m bench.cuda_peak --one CASE MODE # one measurement in this process (used by the above)

Truth: ``torch.cuda.max_memory_allocated()`` over the step (the model built on the GPU first, the
peak statistics reset after the build, the bytes alive before the build subtracted), in a fresh
process per case, with ``CUBLAS_WORKSPACE_CONFIG=:0:0`` so that cuBLAS takes no workspace from the
caching allocator (the simulator leaves runtime workspaces out of ``peak_bytes`` by design; they
belong to the runtime overhead). The work is testkit.peak_truth's: two AdamW steps (CUDA's default
``foreach`` implementation), or generate's prefill / one ``no_grad`` forward. The simulation is
``simulate_peak(..., device="cuda")`` on the meta build, on the CPU of the same machine.

Prints a Markdown table: truth, simulated, error; and each case's own CUDA allocator rounding
(``max_memory_allocated`` counts blocks rounded up to 512 bytes, which the simulator does not model).

``--smoke``: one tiny case (llama_gqa, inference); without a CUDA device it runs the simulation only and says
that the truth was not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure_one(case_name: str, mode: str) -> dict[str, Any]:
    import torch

    from estimator.peak.inputs.providers import workload_for
    from testkit.peak_cases import CASES
    from testkit.peak_truth import run_work as _work

    case = CASES[case_name]
    torch.manual_seed(0)
    before = torch.cuda.memory_allocated()
    with torch.device("cuda"):
        model = case.build()
        wl = workload_for(model, batch_size=case.batch_size, seq_len=case.seq_len, image_size=case.image_size)
        inputs = wl.make_inputs()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        _work(model, wl, inputs, mode)
        torch.cuda.synchronize()
    truth = torch.cuda.max_memory_allocated() - before
    del model, inputs
    sim = simulate_one(case_name, mode)
    return {"case": case_name, "mode": mode, "truth": truth, "simulated": sim.peak_bytes, "method": sim.method,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def simulate_one(case_name: str, mode: str) -> Any:
    """The simulated CUDA peak of ``case_name`` in ``mode`` (runs on the CPU: meta build, fake tensors)."""
    from estimator.peak import simulate_peak
    from testkit.peak_cases import CASES

    case = CASES[case_name]
    return simulate_peak(case.build_on("meta"), mode=mode, device="cuda",  # type: ignore[arg-type]
                         batch_size=case.batch_size, seq_len=case.seq_len, image_size=case.image_size)


def _child(case: str, mode: str) -> dict[str, Any]:
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":0:0", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "bench.cuda_peak", "--one", case, mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        return {"case": case, "mode": mode, "error": done.stderr.strip().splitlines()[-1:] or ["?"]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    import torch

    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--one", nargs=2, metavar=("CASE", "MODE"))
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(*args.one)))
        return 0
    from testkit.peak_cases import CASES

    jobs = [(c, m) for c in CASES for m in ("training", "inference")]
    if args.smoke:
        jobs = [("llama_gqa", "inference")]
        if not torch.cuda.is_available():
            sim = simulate_one(*jobs[0])
            print(f"no CUDA device here: the truth (max_memory_allocated) was not measured; simulated CUDA peak of llama_gqa, "
                  f"inference: {sim.peak_bytes:,} bytes ({sim.method})")
            return 0
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda job: _child(*job), jobs))
    first = next((r for r in results if "device" in r), {})
    print(f"CUDA peak, simulated vs max_memory_allocated ({first.get('device')}, torch {first.get('torch')}, CUBLAS_WORKSPACE_CONFIG=:0:0)\n")
    print("| case | mode | truth (bytes) | simulated (bytes) | error |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        if "error" in r:
            print(f"| {r['case']} | {r['mode']} | error: {r['error'][0]} | | |")
            continue
        error = (r["simulated"] - r["truth"]) / r["truth"] * 100
        print(f"| {r['case']} | {r['mode']} | {r['truth']:,} | {r['simulated']:,} | {error:+.2f}% |")
    print(json.dumps(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
