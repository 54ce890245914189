"""The torchsummary shim on the DAVEnet audio branch, called as the seed notebook calls it.

``Davenet`` is the audio model of DAVEnet (Harwath et al., "Jointly Discovering Visual Objects and
Spoken Words from Raw Sensory Input", ECCV 2018), as defined in ``models/AudioModels.py`` of
https://github.com/dharwath/DAVEnet-pytorch. The layers and their hyper-parameters are exactly
those the seed notebook prints (``../shared/seeds/003_*.txt``, ``In [2]``); ``forward`` follows
the repository (a 3-d input is unsqueezed to one channel; ReLU after every convolution; the one
``pool`` module after conv2, conv3, conv4 and conv5, which is why torchsummary lists four
MaxPool2d rows and why the notebook's hand sum has 1024*64 at its end). The notebook's
hand-checked figures: parameters 60.90 MB, input 0.16 MB, forward/backward 10.31 MB, and at batch
128 an estimated total of 1400.90 MB.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from estimator.modules.compat import summary, summary_string
from estimator.modules.estimate import estimate_module


class Davenet(nn.Module):
    def __init__(self, embedding_dim: int = 1024) -> None:
        super().__init__()
        self.embedding_dim = embedding_dim
        self.batchnorm1 = nn.BatchNorm2d(1)
        self.conv1 = nn.Conv2d(1, 128, kernel_size=(40, 1), stride=(1, 1), padding=(0, 0))
        self.conv2 = nn.Conv2d(128, 256, kernel_size=(1, 11), stride=(1, 1), padding=(0, 5))
        self.conv3 = nn.Conv2d(256, 512, kernel_size=(1, 17), stride=(1, 1), padding=(0, 8))
        self.conv4 = nn.Conv2d(512, 512, kernel_size=(1, 17), stride=(1, 1), padding=(0, 8))
        self.conv5 = nn.Conv2d(512, embedding_dim, kernel_size=(1, 17), stride=(1, 1), padding=(0, 8))
        self.pool = nn.MaxPool2d(kernel_size=(1, 3), stride=(1, 2), padding=(0, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:
            x = x.unsqueeze(1)
        x = self.batchnorm1(x)
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.pool(x)
        x = F.relu(self.conv3(x))
        x = self.pool(x)
        x = F.relu(self.conv4(x))
        x = self.pool(x)
        x = F.relu(self.conv5(x))
        x = self.pool(x)
        x = x.squeeze(2)
        return x


def _value(text: str, label: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(label)]
    return float(line.split(":")[1].split()[0])


@pytest.fixture(scope="module")
def audio_table() -> str:
    text, counts = summary_string(Davenet(), (40, 1024))
    assert counts == (15_965_570, 15_965_570)
    return text


def test_param_size_and_layers_as_the_notebook(audio_table: str) -> None:
    assert _value(audio_table, "Params size (MiB)") == 60.90
    assert _value(audio_table, "Input size (MiB)") == 0.16
    assert "Total params: 15,965,570" in audio_table
    rows = [line.split()[0] for line in audio_table.splitlines() if line.strip().split("-")[0] in {"BatchNorm2d", "Conv2d", "MaxPool2d"}]
    assert rows[0] == "BatchNorm2d-1" and rows[-1] == "MaxPool2d-10" and len(rows) == 10
    assert "[-1, 1024, 1, 64]" in audio_table and "8,913,920" in audio_table


def test_true_peak_beside_torchsummarys_forward_backward(audio_table: str) -> None:
    assert "torchsummary's rule (2 x every layer output): forward/backward 10.31 MiB, total 71.37 MiB" in audio_table
    peak = estimate_module(Davenet(), (1, 40, 1024)).row("float32").peak_bytes
    assert peak is not None
    assert _value(audio_table, "Estimated Total Size (MiB)") == round(peak / 2**20, 2)
    fb = _value(audio_table, "Forward/backward pass size (MiB)")
    assert fb == pytest.approx(peak / 2**20 - 60.90 - 0.16, abs=0.02)
    # AdamW training holds gradients and two moments besides the weights: far above 10.31.
    assert fb > 3 * 60.90


def test_batch_128_as_the_notebook(capsys: pytest.CaptureFixture[str]) -> None:
    assert summary(Davenet(), (40, 1024), batch_size=128) == (15_965_570, 15_965_570)  # torchsummary returns the counts
    text = capsys.readouterr().out
    assert "total 1400.90 MiB" in text  # the notebook's 1400.90 MB, by torchsummary's rule
    assert "[128, 1024, 1, 64]" in text
    assert _value(text, "Input size (MiB)") == 20.00
