"""The real CPU peak of the serving planner's profile run (estimator.serving.profile), for its truth test.

``python -m testkit.profile_truth CASE TOKENS REQS`` prints one JSON line: ``peak_bytes``, the maximum
"Total Allocated" of torch.profiler's memory events while the profile run's work (one forward of
``1 x TOKENS`` ids without a cache, the logits of REQS requests, vLLM's sampler) runs under
``no_grad`` on a model built for real on CPU in float32 (weights included). Run it in a fresh
process: the profiler's total also counts what earlier profiled code left alive.
"""

from __future__ import annotations

import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from testkit.decode_truth import DECODE_CASES
from testkit.peak_cases import CASES
from testkit.truth import trace_events, window_peak


def build(case: str, device: str) -> torch.nn.Module:
    found = CASES.get(case) or DECODE_CASES.get(case)
    assert found is not None, case
    return found.build_on(device)


def measure(case: str, tokens: int, reqs: int) -> dict[str, int]:
    from estimator.serving.profile import profile_workload

    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = build(case, "cpu").eval()
        work = profile_workload(model, tokens, reqs)
        inputs = work.make_inputs()
        with record_function("profile_run"), torch.no_grad():
            out = work.infer(model, inputs)
        del model, inputs, out
    return {"peak_bytes": window_peak(trace_events(prof), "profile_run")}


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
