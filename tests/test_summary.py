"""``summarize``: per-layer rows, saved-for-backward attribution, depth folding, totals."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from estimator.errors import BadOptionError
from estimator.modules.summary import summarize
from tests.test_compat_torchsummary import Davenet


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.inner = nn.Sequential(nn.Linear(32, 32), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(F.relu(self.fc(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x) * 2)


def saved_by_autograd(model: nn.Module, x: torch.Tensor) -> int:
    """Independent truth: unique storages autograd packs in a real forward, less weights, buffers, input."""
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    del out
    return sum(seen.values())


def test_rows_shapes_params_and_functional_ops_charged_to_their_caller() -> None:
    s = summarize(Net(), (8, 32), peak=False)
    df = s.layers
    assert list(df.path) == ["", "block", "block.fc", "block.inner", "block.inner.0", "block.inner.1", "head"]
    assert list(df.depth) == [0, 1, 2, 2, 3, 3, 1]
    assert df.set_index("path").loc["head", "output_shape"] == (8, 4)
    assert df.set_index("path").loc["block.fc", "params"] == 32 * 32 + 32
    # F.relu runs in Block.forward: its saved output is charged to "block", not to fc or inner.0
    # (inner.0 needs the same tensor, but it was saved first by the relu); "x * 2" in
    # Net.forward saves nothing (a constant factor), tanh saves its output.
    saved = df.set_index("path")["saved_bytes"]
    assert saved["block"] == 8 * 32 * 4
    assert saved["block.fc"] == 0 and saved["block.inner.0"] == 0
    assert saved["block.inner.1"] == 8 * 32 * 4
    assert saved["head"] == 8 * 32 * 4  # head saves its input (the product)
    assert s.saved_bytes == saved_by_autograd(Net(), torch.randn(8, 32))
    assert s.input_bytes == 8 * 32 * 4
    assert s.param_bytes == sum(p.numel() for p in Net().parameters()) * 4
    assert s.estimated_total_bytes == s.input_bytes + s.param_bytes + s.saved_bytes
    assert s.peak is None and s.peak_bytes is None


def test_depth_folds_nested_modules_into_their_ancestor() -> None:
    full = summarize(Net(), (8, 32), peak=False)
    folded = summarize(Net(), (8, 32), depth=1, peak=False)
    assert list(folded.layers.path) == ["", "block", "head"]
    block = folded.layers.set_index("path").loc["block"]
    assert block["params"] == sum(p.numel() for p in Block().parameters())
    assert folded.layers.saved_bytes.sum() == full.layers.saved_bytes.sum() == full.saved_bytes
    assert folded.layers.params.sum() == full.total_params
    with pytest.raises(BadOptionError, match="depth"):
        summarize(Net(), (8, 32), depth=-1)


def test_davenet_table_and_true_peak() -> None:
    s = summarize(Davenet(), (2, 40, 1024))
    assert round(s.param_bytes / 2**20, 2) == 60.90
    assert s.saved_bytes == saved_by_autograd(Davenet(), torch.randn(2, 40, 1024))
    text = str(s)
    assert repr(s) == text  # a notebook shows the table
    assert "Parameters (float32)" in text and "60.90 MiB" in text
    assert "True training peak (adamw, cuda)" in text
    assert s.peak_bytes is not None and s.peak_bytes > s.estimated_total_bytes
    assert list(s.to_dataframe().columns) == ["path", "type", "depth", "output_shape", "params", "param_bytes", "saved_bytes"]
    # the pool module is called four times: four rows, as torchsummary shows them
    assert (s.layers.path == "pool").sum() == 4
