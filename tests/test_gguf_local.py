"""A local ``.gguf`` file (or a folder of them) is estimated as a Hub repo's GGUF files are (issue 32, item 6).

Truth: a tiny Llama written here with gguf-py's own ``GGUFWriter`` (real tensor data), whose weights are the bytes
of the arrays written and whose KV cache is counted by hand; and the Hub stand-in's files written whole to a tmp
dir (``testkit.gguf_models.write_full``) give the same rows from the disk as from the served repo.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from estimator import estimate
from estimator.errors import BadReferenceError, MalformedConfigError
from testkit import gguf_models
from testkit.hub_process import REPO_ROOT, hub_env

N_LAYER, N_EMBD, N_FF, N_HEAD, N_HEAD_KV, N_VOCAB, N_CTX = 2, 64, 128, 4, 2, 96, 512


def write_llama(path: Path) -> int:
    """A 2-layer Llama with float32 tensors; returns the bytes of its tensors."""
    import gguf

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(N_VOCAB)
    head = N_EMBD // N_HEAD
    shapes = {"token_embd.weight": (N_VOCAB, N_EMBD), "output_norm.weight": (N_EMBD,), "output.weight": (N_VOCAB, N_EMBD)}
    for il in range(N_LAYER):
        shapes |= {f"blk.{il}.attn_norm.weight": (N_EMBD,), f"blk.{il}.attn_q.weight": (N_EMBD, N_EMBD),
                   f"blk.{il}.attn_k.weight": (N_HEAD_KV * head, N_EMBD), f"blk.{il}.attn_v.weight": (N_HEAD_KV * head, N_EMBD),
                   f"blk.{il}.attn_output.weight": (N_EMBD, N_EMBD), f"blk.{il}.ffn_norm.weight": (N_EMBD,),
                   f"blk.{il}.ffn_gate.weight": (N_FF, N_EMBD), f"blk.{il}.ffn_up.weight": (N_FF, N_EMBD),
                   f"blk.{il}.ffn_down.weight": (N_EMBD, N_FF)}
    total = 0
    for name, shape in shapes.items():
        array = rng.standard_normal(shape).astype(np.float32)
        writer.add_tensor(name, array)
        total += array.nbytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return total


def test_a_gguf_file_written_by_gguf_py(tmp_path: Path) -> None:
    path = tmp_path / "tiny-llama-F32.gguf"
    tensors = write_llama(path)
    load = estimate(str(path))
    (row,) = load.rows
    assert (load.library, load.source, row.dtype, row.total_bytes) == ("gguf", "local", "F32", tensors)
    inference = estimate(str(path), mode="inference", ctx=300)
    (row,) = inference.rows
    cells = 512  # 300 padded up to a multiple of 256
    assert row.components["weights"] == tensors and inference.options["ctx"] == 300
    assert row.components["kv_cache"] == N_LAYER * cells * 2 * N_HEAD_KV * (N_EMBD // N_HEAD) * 2  # K and V, f16
    assert row.components["output_buffer"] == 4 * N_VOCAB
    on_gpu = estimate(str(path), mode="inference", ctx=300, gpu="T4")  # the verdict follows the offload plan, as for the Hub
    assert on_gpu.rows[0].fit is not None and on_gpu.rows[0].fit["verdict"] == "fits"
    folder = estimate(str(tmp_path), mode="inference", ctx=300)  # a folder of .gguf files, no config.json
    assert folder.rows[0].to_dict() == row.to_dict()


def test_bad_paths_are_told_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(BadReferenceError, match=r"No such GGUF file: .*missing\.gguf\. Give the path of a \.gguf file"):
        estimate(str(tmp_path / "missing.gguf"))
    with pytest.raises(BadReferenceError, match="No such GGUF file"):
        estimate("./nowhere/model-Q4_K_M.gguf")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"PK\x03\x04" + bytes(4096))
    with pytest.raises(MalformedConfigError, match="broken.gguf"):
        estimate(str(broken))
    with pytest.raises(Exception, match="training is not available|--mode training"):
        path = tmp_path / "ok.gguf"
        write_llama(path)
        estimate(str(path), mode="training")


def test_local_files_give_the_hub_repos_rows(hub_server: str, tmp_path: Path) -> None:
    """The stand-in's files, written whole to the disk: the same rows as the served repo (source aside)."""
    repo = "estimator-test/gguf-gemma3"
    for name in json.loads((Path(__file__).parent / "hub_data" / "gguf" / "manifest.json").read_text())[repo]:
        gguf_models.write_full(repo, name, tmp_path)
    code = ("import json, sys; from estimator import estimate; "
            "print(json.dumps([estimate(m, mode='inference', ctx=2048, gpu='T4').to_dict() for m in sys.argv[1:]]))")
    done = subprocess.run([sys.executable, "-c", code, repo, str(tmp_path)], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=hub_env(hub_server), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    hub, local = json.loads(done.stdout)
    assert local["source"] == "local" and hub["source"] == "hub" and len(local["rows"]) == len(hub["rows"]) == 2
    assert local["rows"] == hub["rows"]
