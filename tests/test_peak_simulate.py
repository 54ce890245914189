"""Invariants of simulate_peak: results, CUDA backend choice, generation, fallbacks, caches."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.peak import Component, PeakResult, simulate_peak
from estimator.peak.kernels.cuda.sdpa import choose_backend
from testkit.peak_cases import CASES


def _run(case: str, **kw: object) -> PeakResult:
    c = CASES[case]
    return simulate_peak(c.build_on("meta"), batch_size=c.batch_size, seq_len=c.seq_len,  # type: ignore[arg-type]
                         image_size=c.image_size, **kw)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", ["training", "inference"])
def test_components_sum_to_peak(mode: str, device: str) -> None:
    r = _run("llama_gqa", mode=mode, device=device)
    assert r.method == "simulated"
    assert sum(r.components.values()) == r.peak_bytes
    assert set(r.components) <= {c.value for c in Component}
    assert r.components["weights"] == 808256  # 202056 fp32 parameters + the rotary inv_freq buffer
    if mode == "training":
        assert r.components["optimizer_states"] >= 2 * 808224  # exp_avg, exp_avg_sq (+ step)


def test_fake_tensor_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """FakeTensorMode's process-wide dispatch cache is kept between simulations (the layer samples and the fit search
    run from it) but emptied once it holds more than engine.DISPATCH_CACHE_ENTRIES entries."""
    from estimator.peak import engine

    _run("gpt2", mode="inference", device="cpu")
    assert 0 < FakeTensorMode.cache_info().size <= engine.DISPATCH_CACHE_ENTRIES
    monkeypatch.setattr(engine, "DISPATCH_CACHE_ENTRIES", 0)
    _run("gpt2", mode="inference", device="cpu")
    assert FakeTensorMode.cache_info().size == 0


def test_kv_cache_covers_generated_tokens() -> None:
    new = 1000
    r = _run("llama_gqa", mode="inference", device="cpu", max_new_tokens=new)
    per_token = 2 * 2 * 2 * 16 * 4 * 2  # layers * (k, v) * kv heads * head dim * fp32 * batch
    context = CASES["llama_gqa"].seq_len + new
    assert any("decode step" in n for n in r.notes)
    # the cache for the whole context, plus at most one layer's copy made by torch.cat
    assert context * per_token <= r.components["kv_cache"] <= context * per_token * 1.5


def test_prefill_keeps_only_last_logits() -> None:
    r = _run("llama_gqa", mode="inference", device="cpu")
    full_logits = 2 * 64 * 1000 * 4
    assert r.components["activations"] < full_logits


def test_cuda_backend_choice() -> None:
    def qkv(h: int, hk: int, dtype: torch.dtype, d: int = 64) -> tuple[torch.Tensor, ...]:
        return (torch.empty(1, h, 8, d, dtype=dtype, device="meta"),
                torch.empty(1, hk, 8, d, dtype=dtype, device="meta"),
                torch.empty(1, hk, 8, d, dtype=dtype, device="meta"))

    mask = torch.empty(1, 1, 8, 8, dtype=torch.bool, device="meta")
    assert choose_backend(*qkv(8, 2, torch.bfloat16), None, True) == "flash"
    assert choose_backend(*qkv(8, 8, torch.bfloat16), mask, False) == "efficient"
    assert choose_backend(*qkv(8, 8, torch.float32), None, False) == "efficient"
    assert choose_backend(*qkv(8, 2, torch.float32), None, True) == "math"  # fp32 GQA
    assert choose_backend(*qkv(8, 8, torch.bfloat16, d=512), None, False) == "efficient"
    assert choose_backend(*qkv(8, 2, torch.bfloat16, d=512), None, True) == "math"


def test_cuda_fp32_gqa_falls_back_to_math() -> None:
    # fp32 GQA llama: CUDA has no fused kernel for it (flash: 16-bit only; memory-efficient: no
    # GQA), so it takes the math path and keeps (B, H, L, L) probabilities for backward, while
    # CPU's flash kernel runs fp32 with GQA.
    import transformers

    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256)

    def build() -> nn.Module:
        with torch.device("meta"):
            return transformers.LlamaForCausalLM._from_config(config, dtype=torch.float32)

    cuda = simulate_peak(build(), mode="training", device="cuda", seq_len=1024)
    cpu = simulate_peak(build(), mode="training", device="cpu", seq_len=1024)
    attn_matrix = 4 * 1024 * 1024 * 4  # one layer's (B, H, L, L) in fp32
    assert cuda.components["activations"] >= cpu.components["activations"] + attn_matrix


def test_unsupported_model_falls_back_to_formula() -> None:
    with torch.device("meta"):
        model = nn.Linear(10, 10)
    r = simulate_peak(model, mode="training", device="cpu")
    assert r.method == "formula"
    assert r.peak_bytes == 4 * 440
    assert "formula" in r.notes[0]


def test_bad_arguments() -> None:
    with torch.device("meta"):
        model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="mode must be"):
        simulate_peak(model, mode="load")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="components must sum"):
        PeakResult(10, {"weights": 5}, "simulated")
