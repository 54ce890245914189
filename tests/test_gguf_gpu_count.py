"""How many GPUs for a GGUF file (issue 34, item 4): llama.cpp's default layer split, each GPU's share.

Truth: the layer-to-GPU rule of ``llama_model::load_tensors`` counted by hand; the one-GPU share equal to the offload
plan's own split (:mod:`estimator.gguf.placement`, which the row's verdict uses); each GPU's weights and KV cache the
sums of its layers' (from the file's header); the pipeline-parallel copies of each GPU's graph inputs counted by hand
from the model's widths. The files are the Hub stand-in's real-shaped Llama-3.1-8B Q8_0 header written whole
(``testkit.gguf_models.write_full``: a sparse file), read as a local path.
"""

from __future__ import annotations

import json

import pytest

from estimator.errors import BadOptionError, UnsupportedError
from estimator.fit.gpus import find_gpu
from estimator.fit.runtime import CUDA_CONTEXT_BYTES
from estimator.gguf import compute, kv_cache, multi_gpu, placement
from estimator.gguf.header import parse_header
from estimator.gguf.hparams import hparams
from estimator.gguf.weights import weights
from estimator.gpu_count import count_gpus
from testkit import gguf_models

BIG = "estimator-test/Meta-Llama-3.1-8B-Instruct-GGUF"
NAME = "Meta-Llama-3.1-8B-Instruct-Q8_0.gguf"


def _plan(n_ctx: int) -> placement.Plan:
    header, size = gguf_models.headers(BIG)[NAME]
    h = parse_header(header, size, NAME)
    assert h is not None
    return placement.Plan(hp=hparams(h), w=weights([h]), n_ctx=n_ctx, ctx_source="given", type_k="f16", type_v="f16", flash_attn=True)


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(gguf_models.write_full(BIG, NAME, tmp_path_factory.mktemp("gguf8b")))


def test_layers_go_to_gpus_as_load_tensors_splits_them() -> None:
    """32 layers and the output (33 units) over GPUs of equal free memory: unit ``il`` to the first split point above
    ``il / 33``; the output, unit 32, on the last GPU; with -ngl 10 the first 23 units stay on the CPU."""
    two = multi_gpu.layer_devices(32, 2)
    assert two == [0] * 17 + [1] * 16  # 16/33 < 0.5 <= 17/33
    assert multi_gpu.layer_devices(32, 3) == [0] * 11 + [1] * 11 + [2] * 11  # 11/33 == 1/3 in float: GPU 1 (upper_bound)
    assert multi_gpu.layer_devices(32, 4) == [0] * 9 + [1] * 8 + [2] * 8 + [3] * 8  # 8/33 < 0.25 < 9/33
    partial = multi_gpu.layer_devices(32, 2, n_gpu_layers=10)
    assert partial == [None] * 23 + [0] * 5 + [1] * 5


def test_one_gpu_is_the_offload_plan_s_own_split() -> None:
    plan = _plan(8192)
    (share,) = multi_gpu.layer_split(plan, 1).devices
    whole = plan.split(8192, -1)
    assert share.total_bytes == whole.gpu_bytes and multi_gpu.layer_split(plan, 1).cpu_bytes == whole.cpu_bytes
    assert share.layers == tuple(range(32)) and share.output


def test_each_gpu_holds_its_layers_and_copies_of_its_inputs() -> None:
    plan = _plan(8192)
    hp, w = plan.hp, plan.w
    kv = kv_cache.kv_cache(hp, 8192, type_k="f16", type_v="f16", flash_attn=True)
    parts = compute.graph_parts(hp, kv, flash_attn=True)
    first, second = multi_gpu.layer_split(plan, 2).devices
    assert first.layers == tuple(range(17)) and not first.output and second.layers == tuple(range(17, 32)) and second.output
    assert first.weights_bytes == sum(w.layers_cuda[:17]) and second.weights_bytes == sum(w.layers_cuda[17:]) + w.output_cuda
    assert first.kv_bytes == second.kv_bytes * 17 // 15 == 17 * 2 * 8192 * 1024 * 2  # K and V: 8 kv heads x 128, f16
    # the inputs of each GPU's split, by hand (T = 512 tokens, flash attention): the residual from the device before
    # (E floats a token), positions (i32), K and V row indices (i64), the f16 mask over 8,192 cells; the GPU of the last
    # layer also the output row ids (i32). Four copies held (GGML_SCHED_MAX_COPIES), one of them in the single-GPU figure.
    t, e = 512, hp.n_embd
    inputs = 4 * e * t + 4 * t + 8 * t + 8 * t + 8192 * t * 2
    assert parts.inputs == inputs + 4 * t + 4 * t  # the token ids and out ids besides
    assert first.compute_bytes == parts.layers + 3 * inputs
    assert second.compute_bytes == max(parts.layers, parts.output) + 3 * (inputs + 4 * t)


def test_fewest_gpus_for_the_8b_file(big_file: str) -> None:
    """Llama-3.1-8B Q8_0 at its 131,072-token context does not fit one RTX 4090 whole (the row's verdict: 32 of 33 layers),
    it does two; at 8,192 tokens one T4 holds it. The 1-GPU figure is the row's own plan with every layer on the GPU."""
    from estimator import estimate

    found = count_gpus(big_file, mode="inference", gpu="RTX 4090")
    ((dtype, counted),) = found.items()
    row = estimate(big_file, mode="inference", gpu="RTX 4090").rows[0]
    assert dtype == "Q8_0" and counted.gpus == 2 and [t.gpus for t in counted.trials] == [1, 2]
    one, two = counted.trials
    assert row.fit is not None and row.fit["verdict"] == "fits_partially" and row.fit["n_gpu_layers"] == 32
    assert one.needed_bytes == row.gguf_plan.split(131072, -1).gpu_bytes + CUDA_CONTEXT_BYTES > row.fit["capacity_bytes"]
    assert two.needed_bytes == max(d["total_bytes"] for d in two.details["devices"]) + CUDA_CONTEXT_BYTES <= find_gpu("RTX 4090").total_bytes
    assert two.details["pipeline_parallel"] is True and two.details["ctx"] == 131072
    assert counted.sentence(dtype).startswith("Q8_0: 2 × RTX 4090 (llama.cpp layer split over 2 GPUs, the fullest GPU (layers 0-16)): ")
    assert "; 1 does not fit (" in counted.sentence(dtype)
    assert count_gpus(big_file, mode="inference", gpu="T4", ctx=8192)["Q8_0"].gpus == 1


def test_cli_count_gpus_for_a_gguf_file(big_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    from estimator.cli import main

    args = [big_file, "--mode", "inference", "--gpu", "RTX 4090", "--count-gpus"]
    assert main([*args, "--format", "json"]) == 0
    counted = json.loads(capsys.readouterr().out)["gpu_count"]["Q8_0"]
    assert counted["gpus"] == 2 and [d["layers"] for d in counted["trials"][1]["devices"]] == ["layers 0-16", "layers 17-31 + output"]
    assert main(args) == 0
    assert "How many GPUs:\n- Q8_0: 2 × RTX 4090 (llama.cpp layer split over 2 GPUs" in capsys.readouterr().out


def test_gguf_counts_are_refused_where_they_cannot_be_asked(big_file: str) -> None:
    with pytest.raises(UnsupportedError, match="loading and inference"):
        count_gpus(big_file, mode="training", gpu="T4")
    with pytest.raises(BadOptionError, match="what counting GPUs varies"):
        count_gpus(big_file, mode="inference", gpu="T4", n_gpu_layers=10)


_PAGE = r"""
import dataclasses, json
from estimator_app import form, howmany
state = dataclasses.replace(form.FormState(), model="estimator-test/Meta-Llama-3.1-8B-Instruct-GGUF", mode="inference", gpu="RTX 4090",
                            gguf_file="Q8_0", ctx=8192)
counted = howmany.count(state, None)
print(json.dumps({"html": howmany.count_html(counted), "gpus": {k: v.gpus for k, v in counted.items()}}))
"""


def test_the_page_counts_a_gguf_repo(hub_server: str) -> None:
    """The page's "How many GPUs do I need?" for the Hub stand-in's 8B GGUF repo (Q8_0 at 8,192 tokens on an RTX 4090)."""
    import subprocess
    import sys

    from testkit.hub_process import REPO_ROOT, hub_env

    done = subprocess.run([sys.executable, "-c", _PAGE], capture_output=True, text=True, cwd=REPO_ROOT, env=hub_env(hub_server), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["gpus"] == {"Q8_0": 1}
    assert "How many GPUs:" in found["html"] and "Q8_0: 1 × RTX 4090 (1 GPU): " in found["html"] and "per GPU (× 1)" in found["html"]
