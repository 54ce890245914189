"""``estimate_module``: the contract's shape, options and invariants (fast; ground truth elsewhere)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from estimator.errors import BadOptionError, InputError
from estimator.modules.estimate import estimate_module, first_tensor, parse_input_sizes

KEYS = {"weights", "gradients", "optimizer_states", "activations", "temporaries", "kv_cache", "inputs"}


def small() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def test_contract_json_shape() -> None:
    data = estimate_module(small(), (8, 64)).to_dict()
    assert data["source"] == "module" and data["mode"] == "training" and data["schema"] == "estimator/v1"
    (row,) = data["rows"]
    assert row["dtype"] == "float32" and row["method"] == "simulated"
    assert set(row["components"]) <= KEYS
    assert sum(row["components"].values()) == row["peak_bytes"]
    params = (64 * 256 + 256 + 256 * 10 + 10) * 4
    assert row["total_bytes"] == params
    assert row["training_adam_bytes"] == 4 * params


def test_a_module_too_large_for_this_machine_on_meta() -> None:
    with torch.device("meta"):
        big = nn.Linear(50_000, 50_000)  # 10 GB of fp32 weights
    row = estimate_module(big, (4, 50_000), device="cuda").row("float32")
    params = (50_000 * 50_000 + 50_000) * 4
    assert row.components["weights"] == params
    # AdamW: exp_avg and exp_avg_sq per parameter, and a float32 "step" scalar per parameter tensor
    assert row.components["optimizer_states"] == 2 * params + 2 * 4
    assert row.peak_bytes is not None and row.peak_bytes >= 4 * params


def test_the_callers_module_is_untouched() -> None:
    model = small()
    before = [p.detach().clone() for p in model.parameters()]
    estimate_module(model, (8, 64), device="cpu")
    after = list(model.parameters())
    assert all(a.device.type == "cpu" and not a.is_meta and torch.equal(a, b) for a, b in zip(after, before))
    assert all(p.grad is None for p in after)


def test_tied_weights_count_once() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(1000, 64)
            self.head = nn.Linear(64, 1000, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.emb(ids))

    row = estimate_module(Tied(), (2, 16), input_dtype=torch.long, device="cpu").row("float32")
    assert row.total_bytes == 1000 * 64 * 4
    assert row.components["weights"] == 1000 * 64 * 4


def test_inference_needs_less_than_training_and_load_has_no_peak() -> None:
    training = estimate_module(small(), (32, 64), device="cpu").row("float32")
    inference = estimate_module(small(), (32, 64), mode="inference", device="cpu").row("float32")
    load = estimate_module(small(), (32, 64), mode="load").row("float32")
    assert inference.peak_bytes is not None and training.peak_bytes is not None
    assert inference.peak_bytes < training.peak_bytes
    assert "gradients" not in inference.components
    assert load.peak_bytes is None and load.components == {} and load.total_bytes == training.total_bytes


def test_several_inputs_and_a_loss_fn() -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(10, 20)
            self.b = nn.Linear(30, 20)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.a(x) + self.b(y), x

    calls = []

    def loss_fn(out: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls.append(type(out))
        return out[0].pow(2).mean()

    est = estimate_module(Two(), [(4, 10), (4, 30)], loss_fn=loss_fn, device="cpu")
    assert calls == [tuple, tuple]  # two simulated steps
    row = est.row("float32")
    assert row.components["inputs"] == (4 * 10 + 4 * 30) * 4
    assert est.options["input_size"] == [[4, 10], [4, 30]]


def test_rows_per_dtype() -> None:
    est = estimate_module(small(), (8, 64), dtypes=["float32", "bfloat16", "int8"], device="cpu")
    fp32, bf16, int8 = est.rows
    assert bf16.total_bytes == fp32.total_bytes // 2
    assert bf16.components["weights"] == fp32.components["weights"]  # mixed precision: fp32 master weights
    assert any("mixed precision" in n for n in bf16.notes)
    assert int8.peak_bytes is None and int8.notes
    pure = estimate_module(small(), (8, 64), dtypes=["bfloat16"], pure_16bit=True, device="cpu").rows[0]
    assert pure.components["weights"] == fp32.components["weights"] // 2


def test_bad_input_size_and_failing_forward_are_input_errors() -> None:
    with pytest.raises(BadOptionError, match="input_size"):
        estimate_module(small(), "8x64")
    with pytest.raises(BadOptionError, match="non-negative ints"):
        estimate_module(small(), [(8, 64), (2, -1)])
    with pytest.raises(InputError, match=r"forward failed on inputs of size \(8, 65\)"):
        estimate_module(small(), (8, 65))
    with pytest.raises(BadOptionError, match="--mode must be one of"):
        estimate_module(small(), (8, 64), mode="fly")


def test_helpers() -> None:
    assert parse_input_sizes((2, 3)) == ((2, 3),)
    assert parse_input_sizes(torch.Size([2, 3])) == ((2, 3),)
    assert parse_input_sizes([(2, 3), [4]]) == ((2, 3), (4,))
    t = torch.zeros(1)
    assert first_tensor(({"a": t},)) is t
    with pytest.raises(InputError, match="pass loss_fn"):
        first_tensor((None, "x"))


def test_value_dependent_forward_gives_a_null_row_with_a_note() -> None:
    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return h * 2 if h.mean().item() > 0 else h

    row = estimate_module(Gate(), (4, 8), device="cpu").row("float32")
    assert row.peak_bytes is None and row.components == {}
    assert row.total_bytes == (8 * 8 + 8) * 4
    assert any("depends on tensor values" in n for n in row.notes)
