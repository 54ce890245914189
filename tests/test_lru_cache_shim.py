"""transformers' ``compile_compatible_method_lru_cache`` across simulations (estimator.peak.fakes.lru_shim).

DINOv3's ``get_patches_center_coordinates`` is memoised process-wide: before the shim, the second
simulation in a process got the first one's fake tensor back (``AssertionError: Mixing fake modes
NYI``) and fell back to the formula. Here the coverage bench's small DINOv3 (64 px, ``pixel_values``
from its image processor) is run for real, then simulated three times in this one process; every
simulation must be by simulation, the repeated one equal to the first, no fake tensor left in the
cache afterwards, and the training peak within 2% of the CPU allocator's peak measured in a fresh
process as testkit/vision_truth.py measures it (two AdamW steps).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import torch

from estimator.peak.fakes.lru_shim import clear_method_lru_caches

TOLERANCE = 0.02
MODEL_TYPE = "dinov3_vit"

_TRUTH = """
import json, sys
from testkit import vision_truth as vt
vt.CASES[sys.argv[1]] = vt.VisionCase(vt._bench(sys.argv[1]), image_size=None)
print(json.dumps(vt.measure(sys.argv[1], sys.argv[2])))
"""


def _simulate(mode: str) -> Any:
    from estimator.peak import simulate_peak
    from testkit.vision_truth import _bench

    with torch.device("meta"):
        model = _bench(MODEL_TYPE)()
    return simulate_peak(model, mode=mode, device="cpu")  # type: ignore[arg-type]


def test_simulations_in_one_process_do_not_share_cached_fakes() -> None:
    from transformers.models.dinov3_vit import modeling_dinov3_vit as dinov3

    from estimator.peak.inputs.providers import workload_for
    from testkit.vision_truth import _bench

    real = _bench(MODEL_TYPE)()  # a real forward first: the cache holds a real tensor
    wl = workload_for(real)
    with torch.no_grad():
        wl.infer(real.eval(), wl.make_inputs())
    first, inference, again = _simulate("training"), _simulate("inference"), _simulate("training")
    for r in (first, inference, again):
        assert r.method == "simulated", r.notes
        assert any("pixel_values" in n for n in r.notes), r.notes
    assert again.peak_bytes == first.peak_bytes
    coords = dinov3.get_patches_center_coordinates(4, 4, torch.float32, torch.device("cpu"))
    assert not isinstance(coords, torch._subclasses.fake_tensor.FakeTensor)  # the cache kept no fake
    assert clear_method_lru_caches() >= 1  # DINOv3's cache was found

    done = subprocess.run([sys.executable, "-c", _TRUTH, MODEL_TYPE, "training"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    truth = json.loads(done.stdout.strip().splitlines()[-1])
    error = (first.peak_bytes - truth) / truth
    assert abs(error) <= TOLERANCE, f"simulated {first.peak_bytes:,} vs measured {truth:,} ({error:+.2%})"
