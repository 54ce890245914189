"""The "fits on" table: each GPU's driver-reported memory, the runtime overhead, each verdict."""

from __future__ import annotations

from dataclasses import replace

from estimator.fit import table
from estimator.fit.gpus import GPUS, find_gpu
from estimator.fit.runtime import CUDA_CONTEXT_BYTES, cublas_workspace_bytes
from estimator.fit.table import fits_frame, verdict
from estimator.result import Estimate, Row

GiB = 1024**3


def _estimate(mode: str = "load", **row: object) -> Estimate:
    fields = {"dtype": "float16", "total_bytes": 15 * GiB, "largest_layer_bytes": GiB, "training_adam_bytes": None, "method": "exact"}
    fields.update(row)
    return Estimate(model="m", library="transformers", source="local", mode=mode, rows=(Row(**fields),))  # type: ignore[arg-type]


def test_load_fits_exactly_at_capacity_minus_the_context_and_not_one_byte_more() -> None:
    t4 = find_gpu("T4")
    room = t4.total_bytes - CUDA_CONTEXT_BYTES
    assert verdict(_estimate(total_bytes=room).rows[0], "load", t4) == "fits (0 bytes free)"
    assert verdict(_estimate(total_bytes=room + 1).rows[0], "load", t4) == "does not fit (1 byte short)"


def test_inference_adds_the_allocator_s_overhead_and_a_cublas_workspace() -> None:
    l4 = find_gpu("L4")
    overhead = {"allocator_rounding": 512, "reserved_extra": 20 * 2**20}
    room = l4.total_bytes - CUDA_CONTEXT_BYTES - cublas_workspace_bytes(l4, "inference") - sum(overhead.values())
    row = _estimate(mode="inference", peak_bytes=room, components={"weights": room}, runtime_overhead=overhead).rows[0]
    assert verdict(row, "inference", l4) == "fits (0 bytes free)"
    more = _estimate(mode="inference", peak_bytes=room + 1, components={"weights": room + 1}, runtime_overhead=overhead).rows[0]
    assert verdict(more, "inference", l4) == "does not fit (1 byte short)"


def test_load_mode_uses_total_bytes_other_modes_the_peak() -> None:
    t4 = find_gpu("T4")
    row = _estimate(mode="inference", total_bytes=GiB, peak_bytes=20 * GiB, components={"weights": 20 * GiB}).rows[0]
    assert verdict(row, "load", t4).startswith("fits")
    assert verdict(row, "inference", t4).startswith("does not fit")


def test_bfloat16_is_marked_on_gpus_without_it() -> None:
    row = _estimate(dtype="bfloat16", total_bytes=GiB).rows[0]
    assert verdict(row, "load", find_gpu("T4")).endswith("no native bfloat16")
    assert verdict(row, "load", find_gpu("V100 16GB")).endswith("no native bfloat16")
    assert "bfloat16" not in verdict(row, "load", find_gpu("L4"))


def test_unknown_when_the_row_has_no_figure() -> None:
    assert verdict(_estimate(total_bytes=None).rows[0], "load", GPUS[0]) == "unknown"


def test_frame_has_one_line_per_gpu_and_the_selected_one_first() -> None:
    frame = fits_frame(_estimate(total_bytes=14 * GiB), selected="H200")
    assert len(frame) == len(GPUS)
    assert frame.iloc[0]["GPU"] == "H200 (selected)"
    assert list(frame.columns)[:2] == ["GPU", "float16"]  # the verdict beside the name
    t4 = frame[frame["GPU"] == "T4"].iloc[0]
    free = find_gpu("T4").total_bytes - CUDA_CONTEXT_BYTES - 14 * GiB
    assert t4["float16"] == f"fits ({free / 2**20:.2f} MiB free)"


def test_caption_names_the_runtime_and_the_mode() -> None:
    assert "context" in table.fits_caption("load") and "no activations" in table.fits_caption("load")
    assert "inference step" in table.fits_caption("inference")
    assert "caching allocator's rounding" in table.fits_caption("inference")
    partial = table.fits_caption("training", allocator=False)  # an extrapolated decoder: no allocator figures
    assert "not counted here" in partial and "choose a GPU" in partial


def test_allocator_counted_only_where_every_simulated_row_has_the_figures() -> None:
    replayed = _estimate(total_bytes=GiB)
    rows = tuple(replace(r, method="simulated", peak_bytes=GiB, runtime_overhead={"allocator_rounding": 0, "reserved_extra": 5})
                 for r in replayed.rows)
    assert table.allocator_counted(replace(replayed, rows=rows))
    assert not table.allocator_counted(replace(replayed, rows=tuple(replace(r, runtime_overhead=None) for r in rows)))
