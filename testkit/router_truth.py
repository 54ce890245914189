"""Data-dependent routers and time-series transformers: the real CPU allocator peak against the simulation.

The routers (JetMoE, Switch Transformers, the OpenAI privacy filter) loop over their experts in Python
and ask the router's decisions as values; the simulation answers them by the assumption of
:mod:`estimator.peak.inputs.routing` (the router's scores tie). The real run measured here is the run of that
assumption: the coverage bench's small config of the type, built in float32 with every parameter of
every ``router`` module set to zero, so its scores really tie and every token goes where the
simulation says (training: the first step gives every parameter its AdamW states, as the simulation's
first step does and as a run has them once every expert has had a token: see :func:`_routed_training`). The time-series cases (Time Series Transformer, Informer, Autoformer) need no
assumption: their batch is the one :mod:`estimator.peak.inputs.other.series` makes from the config (Autoformer's
top-k autocorrelation delays are picked from the real activations here, as the simulation says they
do not change what is allocated). Longformer (:mod:`estimator.peak.inputs.other.encoders`) pads its inputs to its
attention window and asks whether any token has global attention; I-BERT records its activations' ranges
in training (:mod:`estimator.peak.inputs.other.encoders`).

``python -m testkit.router_truth CASE MODE`` prints one JSON line: ``peak_bytes``, the maximum
"Total Allocated" of torch.profiler's memory events inside the window where the work runs
(:func:`testkit.peak_truth.run_work`: two AdamW steps, or one ``no_grad`` inference of the workload),
the model built inside the profile; run it in a fresh process. :func:`simulate` is the estimator's
``simulate_peak(..., device="cpu")`` on the same config built on meta.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

__all__ = ["CASES", "RouterCase", "measure", "simulate"]

_WORK = "router_work"


@dataclass(frozen=True)
class RouterCase:
    name: str
    model_type: str
    seq_len: int
    batch_size: int = 2
    zero_routers: bool = True
    what: str = ""
    overrides: tuple[tuple[str, Any], ...] = ()  # config fields set on the small config (real run and simulation alike)
    known_gaps: tuple[tuple[str, str], ...] = ()  # (mode, why) measured and located, not modelled

    def config(self) -> tuple[Any, Any]:
        """The coverage bench's small config of the type (``testkit.coverage.small_config``) and its task class."""
        import transformers

        from testkit.coverage import small_config

        small, name, _model, _level, reason = small_config(self.model_type)
        if small is None:
            raise RuntimeError(f"{self.model_type}: no small config ({reason})")
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return CONFIG_MAPPING[self.model_type].from_dict({**small, **dict(self.overrides)}), getattr(transformers, name)

    def build_on(self, device: str) -> nn.Module:
        config, cls = self.config()
        with torch.device(device):
            model = cls._from_config(config, dtype=torch.float32)
        if self.zero_routers and device != "meta":
            zero_routers(model)
        return model


def zero_routers(model: nn.Module) -> None:
    """Every parameter of every module named ``router`` set to zero: its scores tie for every token."""
    with torch.no_grad():
        for name, module in model.named_modules():
            if name.rsplit(".", 1)[-1] == "router":
                for p in module.parameters():
                    p.zero_()


_R = "router scores tie (zero router weights)"
# Located: each hit expert's slice of the fused expert weights (gate_up_proj[e]) sends back a gradient of the whole
# weight (select_backward); autograd adds them in its input buffer in place on real CPU tensors, out of place on
# fakes (a FakeTensor is "subclass-like", which rules the in-place add out), so the simulation holds one more
# weight-sized buffer at that instant (a toy, two selects of one 1 MiB parameter with SGD: +0.79 MB simulated)
_ACCUMULATE = ("the per-expert weight gradients are summed out of place on fake tensors, in place on real ones "
               "(autograd's input buffer): one extra gate_up_proj-sized buffer at the backward's peak")
# LayerDrop off: the real run then runs every layer, as the simulation's step does (it answers the layer-drop
# draw with the largest draw: the steps of a run that hold the most); with it on, a seeded draw skips layers
_ALL_LAYERS = (("encoder_layerdrop", 0.0), ("decoder_layerdrop", 0.0))
CASES: dict[str, RouterCase] = {c.name: c for c in (
    RouterCase("jetmoe_32", "jetmoe", 32, what=f"top-2 of 4 experts, expert_size.tolist(); MoA attention; {_R}"),
    RouterCase("jetmoe_128", "jetmoe", 128, what=f"top-2 of 4 experts, expert_size.tolist(); MoA attention; {_R}"),
    RouterCase("switch_transformers_32", "switch_transformers", 32, what=f"top-1 of 4 experts, nonzero() expert loop; {_R}"),
    RouterCase("switch_transformers_128", "switch_transformers", 128,
               what=f"top-1 of 4 experts, capacity 64 (tokens over it dropped); {_R}"),
    RouterCase("openai_privacy_filter_32", "openai_privacy_filter", 32, what=f"top-2 of 4 experts, eager expert loop; {_R}",
               known_gaps=(("training", _ACCUMULATE),)),
    RouterCase("openai_privacy_filter_128", "openai_privacy_filter", 128, what=f"top-2 of 4 experts, eager expert loop; {_R}"),
    RouterCase("time_series_transformer", "time_series_transformer", 0, zero_routers=False, overrides=_ALL_LAYERS,
               what="past/future values and time features from the config"),
    RouterCase("informer", "informer", 0, zero_routers=False, overrides=_ALL_LAYERS,
               what="past/future values and time features from the config; ProbSparse attention"),
    RouterCase("autoformer", "autoformer", 0, zero_routers=False, overrides=_ALL_LAYERS,
               what="past/future values and time features; top-k delays from the real activations"),
    RouterCase("longformer_32", "longformer", 32, zero_routers=False,
               what="masked LM, input_ids + attention_mask, padded by the model to attention_window 512"),
    RouterCase("ibert_32", "ibert", 32, zero_routers=False,
               what="masked LM; training records activation ranges (assumed [-1, 1]; the branch keeps 1 element)"),
)}


def measure(case_name: str, mode: str) -> dict[str, int]:
    from estimator.peak.inputs.providers import workload_for
    from testkit.peak_truth import run_work
    from testkit.truth import trace_events, window_peak

    case = CASES[case_name]
    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = case.build_on("cpu")
        wl = workload_for(model, batch_size=case.batch_size, seq_len=max(case.seq_len, 1))
        inputs = wl.make_inputs()
        with record_function(_WORK):
            if mode == "training" and case.zero_routers:
                _routed_training(model, wl, inputs)
            else:
                run_work(model, wl, inputs, mode)
        del model, inputs
    return {"peak_bytes": window_peak(trace_events(prof), _WORK)}


def _routed_training(model: nn.Module, wl: Any, inputs: dict[str, Any]) -> None:
    """Two AdamW steps, the first of which gives every parameter its optimizer states (zero gradients, one
    ``step()``), as the simulation's first step does: a run's optimizer holds states for every expert that
    has had a token once, while with tied scores from the start the experts no token reaches (Switch
    Transformers keeps each expert's weights apart) would have neither gradients nor states. The second
    step, with the routers' scores tied, is the measured one: forward with the model's loss, backward,
    ``step()``, ``zero_grad(set_to_none=True)``."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    loss = wl.train_loss(model, inputs)
    loss.backward()
    del loss
    opt.step()
    opt.zero_grad(set_to_none=True)


def simulate(case_name: str, mode: str) -> dict[str, Any]:
    from estimator.peak import simulate_peak

    case = CASES[case_name]
    r = simulate_peak(case.build_on("meta"), mode=mode, device="cpu", batch_size=case.batch_size,  # type: ignore[arg-type]
                      seq_len=max(case.seq_len, 1))
    return {"peak_bytes": r.peak_bytes, "method": r.method, "notes": list(r.notes)}


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore")
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))
