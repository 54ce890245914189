"""The CUDA runtime's own memory and the caching allocator, measured on a lent GPU, against
what ``runtime_overhead`` says (estimator.fit.runtime, estimator.peak.kernels.cuda.allocator).

Run from the repository root on a machine with an NVIDIA GPU: ``python -m bench.cuda_runtime``
(one fresh process per case, PyTorch's default allocator and cuBLAS settings). Per case it prints:

- the CUDA context: ``total - free`` from ``torch.cuda.mem_get_info()`` right after it created the
  context, before any tensor (the GPU must be otherwise idle), against ``CUDA_CONTEXT_BYTES``;
- the cuBLAS workspace: ``memory_allocated()`` added by a first tiny matmul, less its tensors,
  against ``cublas_workspace_bytes`` (one handle: the main thread);
- the step's ``max_memory_reserved() - max_memory_allocated()`` and ``max_memory_reserved()``
  against the simulation's ``reserved_extra`` and ``peak + allocator_rounding + reserved_extra``
  (the model built on the GPU first, as testkit.peak_truth builds it, two training steps or a prefill);
- what the process holds outside PyTorch's pools at the end (``total - free - memory_reserved()``).

Not run in this repository yet: no GPU was lent to the session that wrote it (2026-11-23).

``--smoke``: one tiny case (llama_gqa, inference); without a CUDA device it computes the rule side only
(``cublas_workspace_bytes``, the context assumed, the simulation's allocator overhead) and says the GPU side was not measured.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure_one(case_name: str, mode: str) -> dict[str, Any]:
    import torch

    from estimator.fit.gpus import GPU
    from estimator.fit.runtime import CUDA_CONTEXT_BYTES, cublas_workspace_bytes
    from estimator.peak import simulate_peak
    from estimator.peak.inputs.providers import workload_for
    from testkit.peak_cases import CASES
    from testkit.peak_truth import run_work as _work

    free, total = torch.cuda.mem_get_info()
    context = total - free
    a = torch.ones(8, 8, device="cuda")
    before = torch.cuda.memory_allocated()
    (a @ a).sum().item()
    workspace = torch.cuda.memory_allocated() - before  # the product and its sum are freed; the workspace stays
    del a
    case = CASES[case_name]
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    start_allocated = torch.cuda.memory_allocated()
    with torch.device("cuda"):
        model = case.build()
        wl = workload_for(model, batch_size=case.batch_size, seq_len=case.seq_len, image_size=case.image_size)
        inputs = wl.make_inputs()
        _work(model, wl, inputs, mode)
        torch.cuda.synchronize()
    reserved, allocated = torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated() - start_allocated
    free_end, _ = torch.cuda.mem_get_info()
    outside = total - free_end - torch.cuda.memory_reserved()
    del model, inputs
    sim = simulate_peak(case.build_on("meta"), mode=mode, device="cuda",  # type: ignore[arg-type]
                        batch_size=case.batch_size, seq_len=case.seq_len, image_size=case.image_size)
    props = torch.cuda.get_device_properties(0)
    gpu = GPU(props.name, "", props.total_memory, "this device", compute_capability=f"{props.major}.{props.minor}")
    over = sim.allocator_overhead or {}
    return {"case": case_name, "mode": mode, "device": props.name, "torch": torch.__version__, "total_memory": props.total_memory,
            "context": context, "context_assumed": CUDA_CONTEXT_BYTES, "cublas_workspace": workspace,
            "cublas_rule": cublas_workspace_bytes(gpu, "inference"), "outside_pools": outside,
            "max_allocated": allocated, "max_reserved": reserved, "simulated_peak": sim.peak_bytes,
            "simulated_reserved": sim.peak_bytes + over.get("allocator_rounding", 0) + over.get("reserved_extra", 0)}


def rules_one(case_name: str, mode: str) -> dict[str, Any]:
    """What ``runtime_overhead`` says for ``case_name`` on a default (non-Hopper) GPU, without one."""
    from estimator.fit.gpus import GPU
    from estimator.fit.runtime import CUDA_CONTEXT_BYTES, cublas_workspace_bytes
    from estimator.peak import simulate_peak
    from testkit.peak_cases import CASES

    case = CASES[case_name]
    sim = simulate_peak(case.build_on("meta"), mode=mode, device="cuda",  # type: ignore[arg-type]
                        batch_size=case.batch_size, seq_len=case.seq_len, image_size=case.image_size)
    over = sim.allocator_overhead or {}
    gpu = GPU("default", "", 0, "a GPU that is not Hopper", compute_capability="8.9")
    return {"context_assumed": CUDA_CONTEXT_BYTES, "cublas_rule": cublas_workspace_bytes(gpu, mode), "simulated_peak": sim.peak_bytes,
            "simulated_reserved": sim.peak_bytes + over.get("allocator_rounding", 0) + over.get("reserved_extra", 0)}


def main(argv: list[str] | None = None) -> int:
    import torch

    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--one", nargs=2, metavar=("CASE", "MODE"))
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(*args.one)))
        return 0
    from testkit.peak_cases import CASES

    cases: Any = CASES
    modes: tuple[str, ...] = ("training", "inference")
    if args.smoke:
        cases, modes = ["llama_gqa"], ("inference",)
        if not torch.cuda.is_available():
            print("no CUDA device here: the GPU side was not measured; the rules for llama_gqa, inference:",
                  json.dumps(rules_one("llama_gqa", "inference")))
            return 0

    print("| case | mode | context (measured / assumed) | cuBLAS workspace (measured / rule) | max reserved (measured / emulated) | error |")
    print("|---|---|---:|---:|---:|---:|")
    for case in cases:
        for mode in modes:
            done = subprocess.run([sys.executable, "-m", "bench.cuda_runtime", "--one", case, mode], cwd=ROOT,
                                  capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                print(f"| {case} | {mode} | error: {(done.stderr.strip().splitlines() or ['?'])[-1]} | | | |")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            error = (r["simulated_reserved"] - r["max_reserved"]) / r["max_reserved"] * 100
            print(f"| {case} | {mode} | {r['context']:,} / {r['context_assumed']:,} | {r['cublas_workspace']:,} / {r['cublas_rule']:,} "
                  f"| {r['max_reserved']:,} / {r['simulated_reserved']:,} | {error:+.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
