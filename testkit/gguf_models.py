"""GGUF files for the Hub stand-in and the llama.cpp truth, written with gguf-py (llama.cpp's own writer).

Each model is a real GGUF layout (the tensor names, shapes and metadata keys llama.cpp's loader asks
for) whose tensor data are all zeros: zeros are valid blocks of every ggml type, so llama.cpp loads
the file and sizes its buffers exactly as for a trained model of that shape. Only the header (metadata
+ tensor infos) is stored in git, under ``tests/hub_data/gguf/``; the stand-in serves it followed by
zeros up to the size the header implies (``testkit.hub_repos``), and :func:`write_full` writes the
whole file for llama.cpp.

* tiny models llama.cpp can load (a few MB): a Llama (three quantizations, the F16 one split in two
  files), a Gemma-3 (sliding-window layers, 5 local : 1 global), a Qwen3 MoE (8 experts, 2 used) and
  a DeepSeek-V2/V3-style MLA model (compressed KV latent, shared expert, one dense layer first);
* ``Meta-Llama-3.1-8B-Instruct`` with its real hyperparameters and tensor shapes in a Q4_K_M-like
  type mix (attn_v / ffn_down in Q6_K on the layers llama.cpp's Q4_K_M picks), no tokenizer arrays
  (it is for header-only estimates; llama.cpp would refuse it for the missing vocabulary).

Regenerate the headers with ``python -m testkit.gguf_models`` (deterministic; a test checks that the
stored headers are what this writes).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

GGUF_DIR = Path(__file__).resolve().parent.parent / "tests" / "hub_data" / "gguf"
MANIFEST = GGUF_DIR / "manifest.json"

Tensor = tuple[str, tuple[int, ...], Q]  # name, ggml shape (ne0 first), type


@dataclass
class Spec:
    """One GGUF model: metadata (arch-prefixed keys without the prefix), tensor list, vocabulary size."""

    arch: str
    meta: dict[str, int | float | str]
    tensors: Callable[[Callable[[str, int], Q]], list[Tensor]]
    n_vocab: int
    tokenizer: bool = True
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # file stem -> (mix name, split count)


def _tokenizer(writer: gguf.GGUFWriter, n_vocab: int) -> None:
    """A SentencePiece-style vocabulary llama.cpp accepts: <unk>, <s>, </s>, the 256 byte tokens, fillers."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"t{i}" for i in range(n_vocab - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)


def _mix(name: str) -> Callable[[str, int], Q]:
    """The ggml type of a 2-D weight for a file mix (norms and router stay F32 whatever the mix)."""

    def pick(tensor: str, n_layer: int) -> Q:
        if name == "F16":
            return Q.F16
        if name == "Q8_0":
            return Q.Q8_0
        # Q4_K_M as llama.cpp's llama_tensor_get_type picks it: Q6_K for output, and for attn_v /
        # ffn_down on the first and last eighth of the layers and every third layer between
        layer = int(tensor.split(".")[1]) if tensor.startswith("blk.") else -1
        if tensor == "output.weight":
            return Q.Q6_K
        if tensor.endswith(("attn_v.weight", "ffn_down.weight", "ffn_down_exps.weight")):
            more = layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2
            return Q.Q6_K if more else Q.Q4_K
        return Q.Q4_K

    return pick


def _attention(b: str, n_embd: int, n_head: int, n_head_kv: int, head: int, pick: Callable[[str], Q],
               qk_norm: bool = False) -> list[Tensor]:
    """A block's attention tensors as llama.cpp names them: the norm, Q, K, V, the output, and Q/K norms."""
    return [
        (b + "attn_norm.weight", (n_embd,), Q.F32),
        (b + "attn_q.weight", (n_embd, n_head * head), pick(b + "attn_q.weight")),
        (b + "attn_k.weight", (n_embd, n_head_kv * head), pick(b + "attn_k.weight")),
        (b + "attn_v.weight", (n_embd, n_head_kv * head), pick(b + "attn_v.weight")),
        (b + "attn_output.weight", (n_head * head, n_embd), pick(b + "attn_output.weight")),
        *([(b + "attn_q_norm.weight", (head,), Q.F32), (b + "attn_k_norm.weight", (head,), Q.F32)] if qk_norm else []),
    ]


def _llama_tensors(n_embd: int, n_layer: int, n_head: int, n_head_kv: int, n_ff: int, n_vocab: int, head: int):
    def tensors(pick: Callable[[str, int], Q]) -> list[Tensor]:
        out: list[Tensor] = [("token_embd.weight", (n_embd, n_vocab), pick("token_embd.weight", n_layer))]
        for i in range(n_layer):
            b = f"blk.{i}."
            out += [
                *_attention(b, n_embd, n_head, n_head_kv, head, lambda t: pick(t, n_layer)),
                (b + "ffn_norm.weight", (n_embd,), Q.F32),
                (b + "ffn_gate.weight", (n_embd, n_ff), pick(b + "ffn_gate.weight", n_layer)),
                (b + "ffn_up.weight", (n_embd, n_ff), pick(b + "ffn_up.weight", n_layer)),
                (b + "ffn_down.weight", (n_ff, n_embd), pick(b + "ffn_down.weight", n_layer)),
            ]
        out += [("output_norm.weight", (n_embd,), Q.F32), ("output.weight", (n_embd, n_vocab), pick("output.weight", n_layer))]
        return out

    return tensors


def _gemma3_tensors(n_embd: int, n_layer: int, n_head: int, n_head_kv: int, n_ff: int, n_vocab: int, head: int):
    def tensors(pick: Callable[[str, int], Q]) -> list[Tensor]:
        out: list[Tensor] = [("token_embd.weight", (n_embd, n_vocab), pick("output.weight", n_layer))]  # tied: Q6_K in Q4_K_M
        for i in range(n_layer):
            b = f"blk.{i}."
            out += [
                *_attention(b, n_embd, n_head, n_head_kv, head, lambda t: pick(t, n_layer), qk_norm=True),
                (b + "post_attention_norm.weight", (n_embd,), Q.F32),
                (b + "ffn_norm.weight", (n_embd,), Q.F32),
                (b + "ffn_gate.weight", (n_embd, n_ff), pick(b + "ffn_gate.weight", n_layer)),
                (b + "ffn_up.weight", (n_embd, n_ff), pick(b + "ffn_up.weight", n_layer)),
                (b + "ffn_down.weight", (n_ff, n_embd), pick(b + "ffn_down.weight", n_layer)),
                (b + "post_ffw_norm.weight", (n_embd,), Q.F32),
            ]
        return out + [("output_norm.weight", (n_embd,), Q.F32)]

    return tensors


def _qwen3moe_tensors(n_embd: int, n_layer: int, n_head: int, n_head_kv: int, n_ff_exp: int, n_expert: int, n_vocab: int, head: int):
    def tensors(pick: Callable[[str, int], Q]) -> list[Tensor]:
        out: list[Tensor] = [("token_embd.weight", (n_embd, n_vocab), pick("token_embd.weight", n_layer))]
        for i in range(n_layer):
            b = f"blk.{i}."
            out += [
                *_attention(b, n_embd, n_head, n_head_kv, head, lambda t: pick(t, n_layer), qk_norm=True),
                (b + "ffn_norm.weight", (n_embd,), Q.F32),
                (b + "ffn_gate_inp.weight", (n_embd, n_expert), Q.F32),
                (b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), pick(b + "ffn_gate_exps.weight", n_layer)),
                (b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), pick(b + "ffn_up_exps.weight", n_layer)),
                (b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), pick(b + "ffn_down_exps.weight", n_layer)),
            ]
        out += [("output_norm.weight", (n_embd,), Q.F32), ("output.weight", (n_embd, n_vocab), pick("output.weight", n_layer))]
        return out

    return tensors


def _deepseek2_tensors(n_embd: int, n_layer: int, n_head: int, q_lora: int, kv_lora: int, rope: int, nope: int, v_head: int,
                       n_ff: int, n_ff_exp: int, n_expert: int, n_shared: int, n_dense: int, n_vocab: int):
    def tensors(pick: Callable[[str, int], Q]) -> list[Tensor]:
        out: list[Tensor] = [("token_embd.weight", (n_embd, n_vocab), pick("token_embd.weight", n_layer))]
        for i in range(n_layer):
            b = f"blk.{i}."
            out += [
                (b + "attn_norm.weight", (n_embd,), Q.F32),
                (b + "attn_q_a_norm.weight", (q_lora,), Q.F32),
                (b + "attn_kv_a_norm.weight", (kv_lora,), Q.F32),
                (b + "attn_q_a.weight", (n_embd, q_lora), pick(b + "attn_q_a.weight", n_layer)),
                (b + "attn_q_b.weight", (q_lora, n_head * (nope + rope)), pick(b + "attn_q_b.weight", n_layer)),
                (b + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), pick(b + "attn_kv_a_mqa.weight", n_layer)),
                (b + "attn_k_b.weight", (nope, kv_lora, n_head), pick(b + "attn_k_b.weight", n_layer)),
                (b + "attn_v_b.weight", (kv_lora, v_head, n_head), pick(b + "attn_v_b.weight", n_layer)),
                (b + "attn_output.weight", (n_head * v_head, n_embd), pick(b + "attn_output.weight", n_layer)),
                (b + "ffn_norm.weight", (n_embd,), Q.F32),
            ]
            if i < n_dense:
                out += [
                    (b + "ffn_gate.weight", (n_embd, n_ff), pick(b + "ffn_gate.weight", n_layer)),
                    (b + "ffn_up.weight", (n_embd, n_ff), pick(b + "ffn_up.weight", n_layer)),
                    (b + "ffn_down.weight", (n_ff, n_embd), pick(b + "ffn_down.weight", n_layer)),
                ]
            else:
                out += [
                    (b + "ffn_gate_inp.weight", (n_embd, n_expert), Q.F32),
                    (b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), pick(b + "ffn_gate_exps.weight", n_layer)),
                    (b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), pick(b + "ffn_up_exps.weight", n_layer)),
                    (b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), pick(b + "ffn_down_exps.weight", n_layer)),
                    (b + "ffn_gate_shexp.weight", (n_embd, n_ff_exp * n_shared), pick(b + "ffn_gate_shexp.weight", n_layer)),
                    (b + "ffn_up_shexp.weight", (n_embd, n_ff_exp * n_shared), pick(b + "ffn_up_shexp.weight", n_layer)),
                    (b + "ffn_down_shexp.weight", (n_ff_exp * n_shared, n_embd), pick(b + "ffn_down_shexp.weight", n_layer)),
                ]
        out += [("output_norm.weight", (n_embd,), Q.F32), ("output.weight", (n_embd, n_vocab), pick("output.weight", n_layer))]
        return out

    return tensors


MODELS: dict[str, Spec] = {
    "estimator-test/gguf-only": Spec(
        arch="llama",
        meta={"context_length": 8192, "embedding_length": 256, "block_count": 2, "feed_forward_length": 512,
              "attention.head_count": 4, "attention.head_count_kv": 2, "rope.dimension_count": 64,
              "attention.layer_norm_rms_epsilon": 1e-5, "rope.freq_base": 500000.0},
        tensors=_llama_tensors(256, 2, 4, 2, 512, 512, 64), n_vocab=512,
        files={"tiny-Q4_K_M": ("Q4_K_M", 1), "tiny-Q8_0": ("Q8_0", 1), "tiny-F16": ("F16", 2)},
    ),
    "estimator-test/gguf-gemma3": Spec(
        arch="gemma3",
        meta={"context_length": 32768, "embedding_length": 256, "block_count": 7, "feed_forward_length": 512,
              "attention.head_count": 4, "attention.head_count_kv": 1, "attention.key_length": 128,
              "attention.value_length": 128, "attention.layer_norm_rms_epsilon": 1e-6, "attention.sliding_window": 256,
              "rope.freq_base": 1000000.0},
        tensors=_gemma3_tensors(256, 7, 4, 1, 512, 512, 128), n_vocab=512,
        files={"tiny-gemma3-Q4_K_M": ("Q4_K_M", 1), "tiny-gemma3-Q8_0": ("Q8_0", 1)},
    ),
    "estimator-test/gguf-qwen3moe": Spec(
        arch="qwen3moe",
        meta={"context_length": 40960, "embedding_length": 256, "block_count": 3, "feed_forward_length": 768,
              "expert_feed_forward_length": 256, "expert_count": 8, "expert_used_count": 2,
              "attention.head_count": 4, "attention.head_count_kv": 2, "attention.key_length": 64,
              "attention.value_length": 64, "attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 1000000.0},
        tensors=_qwen3moe_tensors(256, 3, 4, 2, 256, 8, 512, 64), n_vocab=512,
        files={"tiny-qwen3moe-Q4_K_M": ("Q4_K_M", 1), "tiny-qwen3moe-Q8_0": ("Q8_0", 1)},
    ),
    "estimator-test/gguf-deepseek2": Spec(
        arch="deepseek2",
        meta={"context_length": 16384, "embedding_length": 256, "block_count": 3, "feed_forward_length": 512,
              "leading_dense_block_count": 1, "expert_feed_forward_length": 128, "expert_count": 4, "expert_used_count": 2,
              "expert_shared_count": 1, "attention.head_count": 4, "attention.head_count_kv": 1,
              "attention.key_length": 160, "attention.value_length": 128, "attention.key_length_mla": 96,
              "attention.value_length_mla": 64, "attention.q_lora_rank": 128, "attention.kv_lora_rank": 128,
              "rope.dimension_count": 32, "attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 10000.0},
        tensors=_deepseek2_tensors(256, 3, 4, 128, 128, 32, 64, 64, 512, 128, 4, 1, 1, 512), n_vocab=512,
        files={"tiny-deepseek2-Q8_0": ("Q8_0", 1)},
    ),
    "estimator-test/Meta-Llama-3.1-8B-Instruct-GGUF": Spec(
        arch="llama",
        meta={"context_length": 131072, "embedding_length": 4096, "block_count": 32, "feed_forward_length": 14336,
              "attention.head_count": 32, "attention.head_count_kv": 8, "rope.dimension_count": 128,
              "attention.layer_norm_rms_epsilon": 1e-5, "rope.freq_base": 500000.0, "vocab_size": 128256},
        tensors=_llama_tensors(4096, 32, 32, 8, 14336, 128256, 128), n_vocab=128256, tokenizer=False,
        files={"Meta-Llama-3.1-8B-Instruct-Q4_K_M": ("Q4_K_M", 1), "Meta-Llama-3.1-8B-Instruct-Q8_0": ("Q8_0", 1)},
    ),
}


def _nbytes(shape: tuple[int, ...], qtype: Q) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape)) // block * size


def headers(repo_id: str) -> dict[str, tuple[bytes, int]]:
    """``{file name: (header bytes, file size)}`` for every file of ``repo_id`` (file size = padded header + padded tensors)."""
    spec = MODELS[repo_id]
    out: dict[str, tuple[bytes, int]] = {}
    for stem, (mix, parts) in spec.files.items():
        tensors = spec.tensors(_mix(mix))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{stem}.gguf"
            per_file = -(-len(tensors) // parts)
            writer = gguf.GGUFWriter(path, spec.arch, split_max_tensors=per_file if parts > 1 else 0)
            writer.add_name(repo_id.split("/")[-1])
            writer.add_file_type({"F16": 1, "Q8_0": 7, "Q4_K_M": 15}[mix])
            for key, value in spec.meta.items():
                full = f"{spec.arch}.{key}"
                if isinstance(value, float):
                    writer.add_float32(full, value)
                else:
                    writer.add_uint32(full, int(value))
            if spec.tokenizer:
                _tokenizer(writer, spec.n_vocab)
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
            for name, shape, qtype in tensors:
                writer.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), _nbytes(shape, qtype), raw_dtype=qtype)
            written = writer.format_shard_names(path)
            writer.write_header_to_file(path)
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            writer.close()
            align = writer.data_alignment
            for shard, members in zip(written, writer.tensors, strict=True):
                header = shard.read_bytes()
                size = -(-len(header) // align) * align + sum(-(-ti.nbytes // align) * align for ti in members.values())
                out[shard.name] = (header, size)
    return out


def write_full(repo_id: str, name: str, folder: Path) -> Path:
    """Write the whole file ``name`` of ``repo_id`` (header, then zeros to its size) into ``folder``."""
    header, size = headers(repo_id)[name]
    path = folder / name
    with open(path, "wb") as handle:
        handle.write(header)
        handle.truncate(size)
    return path


def regenerate() -> dict[str, dict[str, int]]:
    """Write every header under ``tests/hub_data/gguf/<repo>/`` and the manifest of file sizes."""
    manifest: dict[str, dict[str, int]] = {}
    for repo_id in MODELS:
        folder = GGUF_DIR / repo_id
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.header"):
            old.unlink()
        manifest[repo_id] = {}
        for name, (header, size) in headers(repo_id).items():
            (folder / f"{name}.header").write_bytes(header)
            manifest[repo_id][name] = size
    MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


if __name__ == "__main__":
    json.dump(regenerate(), sys.stdout, indent=1)
    print()
