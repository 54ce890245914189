"""The shims as drop-ins: the calls the original tools' own tests and README make, the same returns.

torchsummary's unit tests (``torchsummary/tests/unit_tests/torchsummary_test.py`` of
sksq96/pytorch-summary) call ``summary(model, input, device="cpu")`` and unpack
``(total_params, trainable_params)``: 21,840 for an MNIST-style CNN on a 1x28x28 input, 31,120
for a two-branch MLP on two 1x300 inputs (also with ``dtypes=[FloatTensor, LongTensor]``, the
second branch casting its long input back to float), 15 for ``nn.Linear(2, 5)`` on CPU and on the
GPU when there is one, and ``summary_string`` returning ``(str, (total, trainable))``. The models
below are written here from those descriptions (the same layers, hence the same counts).
pytorch_modelsize's README makes ``SizeEstimator(model, input_size=...)`` then reads
``estimate_size()``, ``param_bits``, ``forward_backward_bits`` and ``input_bits``; its class also
exposes the steps ``get_parameter_sizes``, ``get_output_sizes`` and ``calc_*_bits``.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from estimator.errors import BadOptionError
from estimator.modules.compat import SizeEstimator, summary, summary_string


class MnistCnn(nn.Module):
    """Two 5x5 convolutions (10, 20 channels), dropout, two linear layers: 21,840 parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.drop = nn.Dropout2d(0.3)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        return F.log_softmax(self.fc2(x), dim=1)


class TwoBranchMlp(nn.Module):
    """Two 300 -> 50 -> 10 branches, concatenated on dim 0: 31,120 parameters."""

    def __init__(self, cast_second: bool = False) -> None:
        super().__init__()
        self.cast_second = cast_second
        self.a1, self.a2 = nn.Linear(300, 50), nn.Linear(50, 10)
        self.b1, self.b2 = nn.Linear(300, 50), nn.Linear(50, 10)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.cast_second:
            assert y.dtype == torch.long  # the caller's dtypes reach the model
            y = y.type(torch.FloatTensor)
        out = torch.cat((self.a2(F.relu(self.a1(x))), self.b2(F.relu(self.b1(y)))), 0)
        return F.log_softmax(out, dim=1)


def test_summary_returns_the_counts_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    total, trainable = summary(MnistCnn(), (1, 28, 28), device="cpu")
    assert (total, trainable) == (21840, 21840)
    out = capsys.readouterr().out
    assert "Total params: 21,840" in out and "Conv2d-1" in out and "[-1, 10, 24, 24]" in out


def test_two_inputs() -> None:
    assert summary(TwoBranchMlp(), [(1, 300), (1, 300)], device="cpu") == (31120, 31120)


def test_inputs_of_different_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    counts = summary(
        TwoBranchMlp(cast_second=True), [(1, 300), (1, 300)], device="cpu", dtypes=[torch.FloatTensor, torch.LongTensor]
    )
    assert counts == (31120, 31120)
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip().startswith("Linear-")]
    assert rows == ["Linear-1", "Linear-2", "Linear-3", "Linear-4"]  # no row for the cast


def test_single_layer_on_cpu_and_on_the_gpu_when_present() -> None:
    assert summary(nn.Linear(2, 5), (1, 2), device="cpu") == (15, 15)
    model = nn.Linear(2, 5)
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert summary(model.to(device), (1, 2), device=device) == (15, 15)
    assert summary(nn.Linear(2, 5), (1, 2), device=torch.device("cpu")) == (15, 15)


def test_summary_string_returns_text_and_counts() -> None:
    text, (total, trainable) = summary_string(MnistCnn(), (1, 28, 28), device="cpu")
    assert type(text) is str and (total, trainable) == (21840, 21840)


def test_frozen_parameters_are_not_trainable() -> None:
    model = MnistCnn()
    model.conv1.requires_grad_(False)
    assert summary(model, (1, 28, 28), device="cpu") == (21840, 21840 - 260)


def test_signatures_match_the_originals() -> None:
    # torchsummary: summary(model, input_size, batch_size=-1, device=torch.device('cuda:0'), dtypes=None)
    for fn in (summary, summary_string):
        params = inspect.signature(fn).parameters
        assert list(params) == ["model", "input_size", "batch_size", "device", "dtypes"]
        assert params["batch_size"].default == -1 and params["dtypes"].default is None
    # pytorch_modelsize: SizeEstimator(model, input_size=(1,1,32,32), bits=32), positional as there
    params = inspect.signature(SizeEstimator).parameters
    assert list(params)[:3] == ["model", "input_size", "bits"]
    assert params["input_size"].default == (1, 1, 32, 32) and params["bits"].default == 32


def test_a_dtypes_list_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(BadOptionError, match="one tensor type or dtype per input"):
        summary_string(TwoBranchMlp(), [(1, 300), (1, 300)], device="cpu", dtypes=[torch.FloatTensor])


class ReadmeNet(nn.Module):
    """pytorch_modelsize's README model: Conv2d(1, 16, 3, padding=5) then Conv2d(16, 32, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(1, 16, kernel_size=3, padding=5)
        self.conv1 = nn.Conv2d(16, 32, kernel_size=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv1(self.conv0(x))


def test_size_estimator_readme_call_positional_and_its_steps() -> None:
    se = SizeEstimator(ReadmeNet(), (2, 1, 64, 64), 32)
    megabytes, bits = se.estimate_size()
    assert megabytes == bits / 8 / 1024**2
    assert se.param_bits == 4800 * 32 and se.input_bits == 2 * 64 * 64 * 32
    assert se.param_bits + se.forward_backward_bits + se.input_bits == bits  # type: ignore[operator]
    assert [tuple(s) for s in se.param_sizes] == [(16, 1, 3, 3), (16,), (32, 16, 3, 3), (32,)]
    se.get_output_sizes()
    assert [tuple(s) for s in se.out_sizes] == [(2, 16, 72, 72), (2, 32, 70, 70)]
    assert all(isinstance(s, np.ndarray) for s in se.out_sizes + se.param_sizes)


def test_size_estimator_steps_in_the_old_order() -> None:
    se = SizeEstimator(ReadmeNet(), input_size=(1, 1, 32, 32))
    se.get_parameter_sizes()
    se.get_output_sizes()
    se.calc_param_bits()
    se.calc_forward_backward_bits()
    se.calc_input_bits()
    _, bits = SizeEstimator(ReadmeNet(), input_size=(1, 1, 32, 32)).estimate_size()
    assert se.param_bits + se.forward_backward_bits + se.input_bits == bits  # type: ignore[operator]
    with pytest.raises(BadOptionError):
        SizeEstimator(ReadmeNet(), bits=64)
