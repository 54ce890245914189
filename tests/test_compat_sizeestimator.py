"""The SizeEstimator shim: pytorch_modelsize's call and return shape, the simulator's numbers."""

from __future__ import annotations

import pytest

from estimator.errors import BadOptionError
from estimator.modules.compat import SizeEstimator
from estimator.modules.estimate import estimate_module
from tests.test_module_ground_truth import PoolModel, ReadmeModel, measure_all, measured_peak, old_size_estimator


def test_readme_call_and_return_shape() -> None:
    se = SizeEstimator(ReadmeModel(), input_size=(16, 1, 256, 256))
    megabytes, bits = se.estimate_size()
    assert isinstance(megabytes, float) and isinstance(bits, int)
    assert megabytes == bits / 8 / 1024**2
    assert se.param_bits == (16 * 9 + 16 + 32 * 16 * 9 + 32) * 32  # every parameter, once
    assert se.input_bits == 16 * 256 * 256 * 32
    assert se.param_bits + se.forward_backward_bits + se.input_bits == bits
    assert se.estimate is not None and bits == 8 * se.estimate.rows[0].peak_bytes


def test_cpu_numbers_match_the_allocator_where_the_old_ones_did_not() -> None:
    size = (16, 1, 256, 256)
    measure_all([("readme", "training"), ("readme_pool", "training")])  # both at once, each in a fresh process
    for model, case in ((ReadmeModel(), "readme"), (PoolModel(), "readme_pool")):
        truth = measured_peak(case, "training")
        _, bits = SizeEstimator(model, input_size=size, device="cpu").estimate_size()
        old_bits = old_size_estimator(model, size)["bits"]
        assert abs(bits / 8 - truth) / truth < 0.02
        assert abs(old_bits / 8 - truth) / truth > 0.10  # type: ignore[operator]


def test_bits_16_is_a_float16_row_and_other_widths_are_refused() -> None:
    se = SizeEstimator(ReadmeModel(), input_size=(2, 1, 32, 32), bits=16)
    _, bits = se.estimate_size()
    assert se.param_bits == 4800 * 16
    row = estimate_module(ReadmeModel(), (2, 1, 32, 32), dtypes=["float16"], pure_16bit=True).rows[0]
    assert bits == 8 * row.peak_bytes  # type: ignore[operator]
    with pytest.raises(BadOptionError, match="bits must be 32 or 16"):
        SizeEstimator(ReadmeModel(), bits=8)
