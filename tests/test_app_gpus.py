"""The "fits on" table: stated capacities in bytes, the usable share, and each verdict."""

from __future__ import annotations

from estimator.fit import gpus
from estimator.fit.gpus import CUDA_CONTEXT_BYTES, GPUS, fits_frame, verdict
from estimator.result import Estimate, Row

GiB = 1024**3


def _estimate(mode: str = "load", **row: object) -> Estimate:
    fields = {"dtype": "float16", "total_bytes": 15 * GiB, "largest_layer_bytes": GiB, "training_adam_bytes": None, "method": "exact"}
    fields.update(row)
    return Estimate(model="m", library="transformers", source="local", mode=mode, rows=(Row(**fields),))  # type: ignore[arg-type]


def test_the_issue_s_gpus_with_their_stated_memory() -> None:
    stated = {g.name: g.stated.split()[0] for g in GPUS}
    assert stated == {
        "T4": "16",
        "L4": "24",
        "A10G": "24",
        "RTX 4090": "24",
        "A100 40GB": "40",
        "A100 80GB": "80",
        "H100 80GB": "80",
        "H200": "141",
    }
    for gpu in GPUS:
        assert gpu.capacity_bytes == int(gpu.stated.split()[0]) * GiB  # JEDEC binary GB, see the module docstring
        assert gpu.usable_bytes == gpu.capacity_bytes - 512 * 1024**2
        assert gpu.source


def test_fits_exactly_at_the_usable_share_and_not_one_byte_more() -> None:
    t4 = GPUS[0]
    assert verdict(_estimate(total_bytes=t4.usable_bytes).rows[0], "load", t4) == "fits (0 bytes free)"
    assert verdict(_estimate(total_bytes=t4.usable_bytes + 1).rows[0], "load", t4) == "does not fit (1 byte short)"


def test_load_mode_uses_total_bytes_other_modes_the_peak() -> None:
    t4 = GPUS[0]
    row = _estimate(mode="inference", total_bytes=GiB, peak_bytes=20 * GiB, components={"weights": 20 * GiB}).rows[0]
    assert verdict(row, "load", t4).startswith("fits")
    assert verdict(row, "inference", t4).startswith("does not fit")


def test_a_row_s_measured_cuda_context_replaces_the_allowance() -> None:
    t4 = GPUS[0]
    row = _estimate(mode="inference", peak_bytes=t4.capacity_bytes - GiB, components={}, runtime_overhead={"cuda_context": 2 * GiB}).rows[0]
    assert verdict(row, "inference", t4) == "does not fit (1.00 GiB short)"
    assert gpus.context_bytes(_estimate().rows[0]) == CUDA_CONTEXT_BYTES


def test_unknown_when_the_row_has_no_figure() -> None:
    assert verdict(_estimate(total_bytes=None).rows[0], "load", GPUS[0]) == "unknown"


def test_frame_has_one_line_per_gpu_and_the_selected_one_first() -> None:
    frame = fits_frame(_estimate(), selected="H200")
    assert len(frame) == len(GPUS)
    assert frame.iloc[0]["GPU"] == "H200 (selected)"
    assert list(frame.columns) == ["GPU", "Memory (stated)", "Usable", "float16"]
    t4 = frame[frame["GPU"] == "T4"].iloc[0]
    assert t4["float16"] == "fits (512.00 MiB free)"  # 16 GiB - 512 MiB - 15 GiB


def test_caption_names_the_allowance_and_the_mode() -> None:
    assert "512 MiB" in gpus.fits_caption("load") and "no activations" in gpus.fits_caption("load")
    assert "inference step" in gpus.fits_caption("inference")
