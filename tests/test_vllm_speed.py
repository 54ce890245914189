"""vLLM's serving speed (estimator/speed/vllm_speed.py) and the communication of several GPUs (estimator/speed/comm.py).

Truth is independent of the code under test: the FLOPs of a decode step of the serving batch are
``torch.utils.flop_counter``'s count of a real small Llama's step on CPU (a batch of sequences, each with a real
cache); the bytes are the model's own tensors (every parameter but the input embedding table, which is read one row a
token) and the cache's own tensors after the step (what the attention read); the bytes on the links are counted by
hand from the config. Nothing here times anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from estimator.serving.kv import kv_layout
from estimator.speed.comm import (
    HOP_LATENCY_S,
    LINK_FRACTION,
    RING_BASE_LATENCY_S,
    Collective,
    Link,
    collective_seconds,
    data_parallel_transfers,
    link_for,
    pipeline_transfers,
    tensor_parallel_transfers,
)
from estimator.speed.hardware import find_hardware
from estimator.speed.vllm_speed import cudagraph_capture_sizes, decode_count, padded_batch, prefill_counts

ROOT = Path(__file__).resolve().parents[1]
LLAMA = str(ROOT / "tests" / "hub_data" / "models" / "meta-llama" / "Llama-3.1-8B")


def _tiny_llama(tied: bool) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         vocab_size=320, max_position_embeddings=256, tie_word_embeddings=tied, attn_implementation="eager")
    return LlamaForCausalLM(config).eval()


def test_capture_sizes_are_vllms_defaults() -> None:
    # VllmConfig._set_cudagraph_sizes: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), max = min(2 x max_num_seqs, 512)
    assert cudagraph_capture_sizes(256, 8192) == (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
    assert cudagraph_capture_sizes(8, 2048) == (1, 2, 4, 8, 16)
    assert cudagraph_capture_sizes(1024, 64)[-1] == 64  # capped by max_num_batched_tokens
    sizes = cudagraph_capture_sizes(1024, 8192)
    assert padded_batch(54, sizes) == 56 and padded_batch(3, sizes) == 4 and padded_batch(512, sizes) == 512
    assert padded_batch(513, sizes) is None  # larger than any captured graph: run eagerly


@pytest.mark.parametrize("tied", [False, True])
def test_decode_step_matches_flop_counter_and_the_models_tensors(tied: bool) -> None:
    from transformers import DynamicCache

    model = _tiny_llama(tied)
    batch, context = 4, 37
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.randint(0, 320, (batch, context)), past_key_values=cache, use_cache=True)
        counter = FlopCounterMode(display=False)
        with counter:
            model(torch.randint(0, 320, (batch, 1)), past_key_values=cache, use_cache=True)
    layout = kv_layout(model.config, dtype_bytes=4)
    count = decode_count(model, layout, batch=batch, padded=batch, context=context, act_bytes=4)
    # GEMMs 2 x B x in x out; attention 4 x B x heads x d x (C + 1) (eager attention's two batched matmuls: flop_counter has
    # no formula for the CPU flash kernel)
    assert count.cost.flops == counter.get_total_flops()
    embedding = model.get_input_embeddings().weight
    params = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: the table once (the lm_head reads it)
    table = 0 if tied else embedding.numel() * embedding.element_size()
    assert count.weight_bytes == params - table + batch * embedding[0].numel() * embedding.element_size()
    kv_after = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)  # B x (C + 1) positions a layer
    assert count.kv_read_bytes == kv_after
    assert count.kv_write_bytes == kv_after // (context + 1)
    assert count.cost.bytes_moved >= count.weight_bytes + count.kv_read_bytes  # plus activations


def test_padding_runs_the_gemms_on_the_captured_rows_and_attention_on_the_real_ones() -> None:
    model = _tiny_llama(False)
    layout = kv_layout(model.config, dtype_bytes=4)
    real = decode_count(model, layout, batch=3, padded=3, context=20, act_bytes=4)
    padded = decode_count(model, layout, batch=3, padded=4, context=20, act_bytes=4)
    assert padded.attention_flops == real.attention_flops and padded.kv_read_bytes == real.kv_read_bytes
    assert padded.linear_flops * 3 == real.linear_flops * 4


def test_prefill_chunks_match_flop_counter() -> None:
    model = _tiny_llama(False)
    prompt = 48
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.randint(0, 320, (1, prompt)), logits_to_keep=1)  # vLLM computes the logits of the sampled token only
    counts = counter.get_flop_counts()["Global"]
    scores = sum(v for k, v in counts.items() if "bmm" in str(k))  # eager attention: QK^T and PV as batched matmuls
    gemm = counter.get_total_flops() - scores
    layout = kv_layout(model.config, dtype_bytes=4)
    whole = prefill_counts(model, layout, prompt=prompt, chunk=8192, act_bytes=4)
    chunked = prefill_counts(model, layout, prompt=prompt, chunk=16, act_bytes=4)
    assert len(whole) == 1 and len(chunked) == 3
    attention = sum(op.flops for op in whole[0].ops if "attention" in op.name)
    # eager attention computes the whole square, masked; FlashAttention computes the causal half (the diagonal in)
    assert attention * 2 * prompt == scores * (prompt + 1)
    assert whole[0].flops - attention == gemm
    assert sum(c.flops for c in chunked) == whole[0].flops  # the same positions attended, the logits once


def test_tensor_parallel_bytes_by_hand() -> None:
    # Llama-3.1-8B: hidden 4096, 32 layers, vocabulary 128,256; bfloat16 activations; 56 sequences (a captured size); tp 2
    tokens, hidden, layers, vocab, tp = 56, 4096, 32, 128256, 2
    transfers = tensor_parallel_transfers(tokens=tokens, hidden=hidden, layers=layers, vocab=vocab, act_bytes=2, tp=tp)
    row = tokens * hidden * 2
    # ring all-reduce moves 2 (n-1)/n of the message; 2 a layer + the embedding's; the logits all-gathered: (n-1)/n
    assert sum(t.bus_bytes for t in transfers) == (2 * layers + 1) * row + tokens * vocab * 2 // 2
    four = tensor_parallel_transfers(tokens=tokens, hidden=hidden, layers=layers, vocab=vocab, act_bytes=2, tp=4)
    assert sum(t.bus_bytes for t in four) == (2 * layers + 1) * (2 * 3 * row // 4) + 3 * tokens * vocab * 2 // 4
    assert tensor_parallel_transfers(tokens=tokens, hidden=hidden, layers=layers, vocab=vocab, act_bytes=2, tp=1) == ()
    (send,) = pipeline_transfers(tokens=tokens, hidden=hidden, act_bytes=2, pp=4)
    assert send.bus_bytes == 3 * 2 * row  # hidden states and residual across 3 boundaries


def test_data_parallel_bytes_by_hand() -> None:
    grads = 16_060_522_496  # Llama-3.1-8B's parameters in bfloat16
    (ddp,) = data_parallel_transfers(trainable_bytes=grads, param_bytes=grads, gpus=8, sharded=False)
    assert ddp.kind is Collective.ALL_REDUCE and ddp.bus_bytes == 2 * 7 * grads // 8
    gather, scatter = data_parallel_transfers(trainable_bytes=grads, param_bytes=grads, gpus=8, sharded=True)
    assert gather.bus_bytes == 2 * (7 * grads // 8) and scatter.bus_bytes == 7 * grads // 8


def test_links_from_the_data_sheets() -> None:
    h100, pcie, rtx = find_hardware("H100 SXM"), find_hardware("H100 PCIe"), find_hardware("RTX 4090")
    assert h100.gpu_link_bytes_s == 450e9 and h100.gpu_link_gpus == 8  # NVLink 900 GB/s both directions, HGX NVSwitch
    assert link_for(h100, 8) == (Link.NVLINK, 450e9)
    assert link_for(pcie, 2) == (Link.NVLINK, 300e9) and link_for(pcie, 4) == (Link.PCIE, pcie.pcie_bytes_s)  # a bridge joins two
    assert rtx.gpu_link_bytes_s is None and link_for(rtx, 2) == (Link.PCIE, rtx.pcie_bytes_s)
    assert rtx.pcie_bytes_s == pytest.approx(31.5e9, rel=1e-3)  # PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 / 8
    assert find_hardware("RTX 4060").pcie_bytes_s == pytest.approx(15.75e9, rel=1e-3)  # x8
    assert find_hardware("M2 Max 96GB").pcie_bytes_s is None


def test_collective_time_is_nccls_latency_plus_bus_bytes() -> None:
    message = 56 * 4096 * 2
    t = collective_seconds(Collective.ALL_REDUCE, message, 8, Link.NVLINK, 450e9)
    assert t == pytest.approx(RING_BASE_LATENCY_S + 14 * HOP_LATENCY_S[Link.NVLINK] + (2 * 7 * message // 8) / (450e9 * LINK_FRACTION))
    assert collective_seconds(Collective.ALL_REDUCE, message, 1, Link.NVLINK, 450e9) == 0.0


@pytest.fixture(scope="module")
def served() -> tuple:
    from estimator import estimate

    one = estimate(LLAMA, mode="serving", gpu="H100 SXM", max_model_len=8192, dtypes="bfloat16")
    two = estimate(LLAMA, mode="serving", gpu="H100 SXM", max_model_len=8192, dtypes="bfloat16", tensor_parallel_size=2)
    return one.row("bfloat16"), two.row("bfloat16"), one


def test_serving_row_has_the_speed_at_the_plans_concurrency(served: tuple) -> None:
    row = served[0]
    speed, plan = row.speed, row.serving
    assert speed["engine"] == "vllm" and speed["label"] == "modelled" and speed["measured_error"] is None
    assert speed["concurrency"] == min(plan["max_num_seqs"], int(plan["max_concurrency"]))
    assert speed["decode_context"] == 8191 and speed["prompt_tokens"] == 8192
    # KV: each sequence's own cache at 8,192 positions, 131,072 bytes a token (the published figure for Llama-3.1-8B)
    assert speed["decode_kv_bytes_per_step"] == speed["concurrency"] * 8192 * 131_072
    # weights once for the batch: every parameter but the embedding table (128,256 x 4,096), one of its rows a sequence
    padded = speed["cudagraph_batch"]
    assert speed["decode_weight_bytes_per_step"] == 16_060_522_496 - 128_256 * 4096 * 2 + padded * 4096 * 2
    assert speed["decode_tokens_per_second"] == pytest.approx(speed["concurrency"] / speed["decode_step_s"], rel=1e-3)
    assert speed["communication"] is None
    assert any("error is not measured" in n for n in row.notes)


def test_tensor_parallel_serving_counts_its_all_reduces(served: tuple) -> None:
    row = served[1]
    speed = row.speed
    comm = speed["communication"]
    padded = speed["cudagraph_batch"]
    assert comm["link"] == "nvlink" and comm["tensor_parallel_size"] == 2
    assert comm["decode_bus_bytes_per_step"] == 65 * padded * 4096 * 2 + padded * 128_256 * 2 // 2
    assert speed["decode_weight_bytes_per_step"] < served[0].speed["decode_weight_bytes_per_step"] // 2 + 128_256 * 4096


def test_no_speed_without_a_named_gpu() -> None:
    from estimator import estimate

    row = estimate(LLAMA, mode="serving", gpu_memory="80GiB", max_model_len=8192, dtypes="bfloat16").row("bfloat16")
    assert row.speed is None and not any(n.startswith("speed on") for n in row.notes)


def test_page_line_shows_the_serving_speed_beside_the_verdict(served: tuple) -> None:
    from estimator_app.tables import speed_words

    row, answer = served[0], served[2]
    (line,) = speed_words(answer)
    assert line == (f"bfloat16: fits · ~{row.speed['decode_tokens_per_second']:,.0f} tok/s decode over {row.speed['concurrency']} "
                    f"sequences, TTFT {row.speed['time_to_first_token_s']:.2f} s on H100 80GB (modelled)")


GPT2 = str(ROOT / "tests" / "hub_data" / "models" / "openai-community" / "gpt2")
GPT2_PARAMS = 124_439_808  # the published parameter count of GPT-2 small (tied embeddings)


@pytest.mark.parametrize(("strategy", "gpus", "gpu", "link", "factor"), [
    ("ddp", 2, "RTX 3090", "nvlink", (2, 1, 2)),   # an all-reduce: 2 (n-1)/n of the gradients, over the NVLink bridge
    ("fsdp", 4, "RTX 4090", "pcie", (3, 3, 4)),    # 2 all-gathers + a reduce-scatter: 3 x (n-1)/n, over PCIe (no NVLink)
])
def test_strategy_rows_count_the_gradient_synchronisation(strategy: str, gpus: int, gpu: str, link: str, factor: tuple) -> None:
    from estimator import estimate

    row = estimate(GPT2, mode="training", strategy=strategy, gpus=gpus, gpu=gpu, dtypes="float32", seq_len=128).row("float32")
    grads = GPT2_PARAMS * 4
    assert row.total_bytes == grads
    comm = row.speed["communication"]
    times, n_minus_1, n = factor
    assert comm["link"] == link and comm["gpus"] == gpus
    assert comm["step_bus_bytes"] == sum(t["bus_bytes"] for t in comm["transfers"])
    assert abs(comm["step_bus_bytes"] - times * n_minus_1 * grads / n) <= times  # integer division per collective
    assert row.speed["measured_error"] is None and any("step's compute under a strategy is not modelled" in x for x in row.notes)


def test_image_text_model_reads_sliding_windows_and_not_its_vision_tower() -> None:
    from estimator import estimate

    # Gemma-3-4B: 34 layers, every 6th full attention (5), the others a 1,024-token window; 4 KV heads x 256 x K and V x 2 bytes
    row = estimate(str(ROOT / "tests" / "data" / "serving" / "gemma-3-4b-it"), mode="serving", gpu="L4", max_model_len=4096,
                   dtypes="bfloat16").row("bfloat16")
    speed = row.speed
    per_token = 2 * 4 * 256 * 2
    assert speed["decode_kv_bytes_per_step"] == speed["concurrency"] * per_token * (5 * 4096 + 29 * 1024)
    # the vision tower (SigLIP) runs once per image, not in a decode step: less than the weights vLLM loads
    assert speed["decode_weight_bytes_per_step"] < row.serving["weights_bytes"] - 300_000_000
