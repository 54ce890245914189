"""Generate the tensor-shape tables the Hub stand-in uses for its header-only safetensors files.

Run once from the repository root (needs torch, transformers and timm; the server itself does not):

    python tests/hub_data/make_shapes.py

Writes ``tests/hub_data/shapes/<org>__<name>.json`` = ``{tensor_name: [DTYPE, shape]}`` for

* every fixture repo with a ``model.safetensors.index.json``: shapes come from pattern rules over the
  repo's config (the real checkpoints' key layout: Mixtral's unfused ``experts.N.w1/w2/w3``, bloom's
  prefix-less ``h.N...``, Llama-1/2's ``rotary_emb.inv_freq`` buffers in F32). The tensor-name set must
  equal the index's ``weight_map`` keys and ``sum(numel * itemsize)`` must equal the index's
  ``metadata.total_size`` exactly, or this script fails;
* the repos in ``RECONSTRUCTED`` (Llama-3.1-70B/405B, Mistral-7B-v0.1, gemma-7b, Llama-3.2-3B, Qwen2.5-7B):
  their real sharded index is not among the fixtures, so this script first WRITES a reconstructed
  ``reconstructed/<org>/<name>/model.safetensors.index.json`` (family key layout, real shard count and
  naming, synthetic size-balanced tensor-to-shard assignment), then checks it like the others and checks
  the parameter count against the Hub's published one;
* the single-file repos (bert-base-cased, gpt2, roberta-base, all-MiniLM-L6-v2, the tiny llama fixtures,
  the timm repos): the model is built on the meta device from the config and its state dict is mapped to
  the real checkpoint's key set (prefixes, tied weights dropped, legacy buffers added). Where the Hub
  records a parameter count for the repo (or a sibling with the same layout), it is checked.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
SHAPES_DIR = HERE / "shapes"

DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}
TORCH_DTYPE_NAME = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}

Shapes = dict[str, list[Any]]  # name -> [dtype, shape]


def load_json(path: Path) -> dict[str, Any]:
    """Read a JSON file."""
    return json.loads(path.read_text())


def nbytes(shapes: Shapes) -> int:
    """Total tensor bytes of a shape table."""
    return sum(math.prod(shape) * DTYPE_SIZE[dtype] for dtype, shape in shapes.values())


def counts(shapes: Shapes) -> dict[str, int]:
    """Parameter count per dtype."""
    out: dict[str, int] = {}
    for dtype, shape in shapes.values():
        out[dtype] = out.get(dtype, 0) + math.prod(shape)
    return out


# --------------------------------------------------------------------------- indexed repos (rules)


def llama_family_rules(cfg: dict[str, Any], dtype: str) -> Callable[[str], list[Any] | None]:
    """Shape rule for Llama / Mistral / Gemma / Qwen2 / Mixtral checkpoints (``model.layers.N.*``)."""
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    experts = cfg.get("num_local_experts", 0)
    table = {
        "model.embed_tokens.weight": [vocab, h],
        "lm_head.weight": [vocab, h],
        "model.norm.weight": [h],
        "self_attn.q_proj.weight": [heads * hd, h],
        "self_attn.k_proj.weight": [kv * hd, h],
        "self_attn.v_proj.weight": [kv * hd, h],
        "self_attn.q_proj.bias": [heads * hd],  # Qwen2: q/k/v biases
        "self_attn.k_proj.bias": [kv * hd],
        "self_attn.v_proj.bias": [kv * hd],
        "self_attn.o_proj.weight": [h, heads * hd],
        "mlp.gate_proj.weight": [inter, h],
        "mlp.up_proj.weight": [inter, h],
        "mlp.down_proj.weight": [h, inter],
        "input_layernorm.weight": [h],
        "post_attention_layernorm.weight": [h],
        "block_sparse_moe.gate.weight": [experts, h],
        "w1.weight": [inter, h],
        "w2.weight": [h, inter],
        "w3.weight": [inter, h],
    }

    def rule(name: str) -> list[Any] | None:
        if name.endswith("rotary_emb.inv_freq"):
            return ["F32", [hd // 2]]  # legacy fp32 buffer in Llama-1/2 checkpoints
        key = re.sub(r"^model\.layers\.\d+\.", "", name)
        key = re.sub(r"^block_sparse_moe\.experts\.\d+\.", "", key)
        return [dtype, table[key]] if key in table else None

    return rule


def bloom_rules(cfg: dict[str, Any], dtype: str) -> Callable[[str], list[Any] | None]:
    """Shape rule for bloom checkpoints (prefix-less ``h.N.*``)."""
    h = cfg.get("hidden_size") or cfg["n_embed"]
    vocab = cfg["vocab_size"]
    table = {
        "word_embeddings.weight": [vocab, h],
        "word_embeddings_layernorm.weight": [h],
        "word_embeddings_layernorm.bias": [h],
        "ln_f.weight": [h],
        "ln_f.bias": [h],
        "input_layernorm.weight": [h],
        "input_layernorm.bias": [h],
        "post_attention_layernorm.weight": [h],
        "post_attention_layernorm.bias": [h],
        "self_attention.query_key_value.weight": [3 * h, h],
        "self_attention.query_key_value.bias": [3 * h],
        "self_attention.dense.weight": [h, h],
        "self_attention.dense.bias": [h],
        "mlp.dense_h_to_4h.weight": [4 * h, h],
        "mlp.dense_h_to_4h.bias": [4 * h],
        "mlp.dense_4h_to_h.weight": [h, 4 * h],
        "mlp.dense_4h_to_h.bias": [h],
    }

    def rule(name: str) -> list[Any] | None:
        key = re.sub(r"^h\.\d+\.", "", name)
        return [dtype, table[key]] if key in table else None

    return rule


INDEXED = {
    "bigscience/bloom": ("BF16", bloom_rules),
    "mistralai/Mixtral-8x7B-v0.1": ("BF16", llama_family_rules),
    "meta-llama/Llama-3.1-8B": ("BF16", llama_family_rules),
    "meta-llama/Llama-2-7b-hf": ("F16", llama_family_rules),
    "huggyllama/llama-7b": ("F16", llama_family_rules),
    "google/gemma-2b-it": ("BF16", llama_family_rules),
}

# Repos whose real Hub checkpoint is sharded safetensors but whose index is not among the fixtures: this script
# writes a RECONSTRUCTED model.safetensors.index.json to reconstructed/<org>/<name>/ (served as an overlay on the
# repo's folder and listed in model_info ``standin_reconstructed``). Key layout = the real checkpoints' layout
# for the family (Llama / Mistral / Gemma / Qwen2, tied embeddings -> no lm_head.weight, Qwen2 q/k/v biases),
# BF16, the real shard count and ``model-0000K-of-0000N.safetensors`` naming. Which tensor sits in which shard
# is NOT the real assignment (not known offline): tensors are cut in state-dict order into N contiguous,
# size-balanced shards. Value: (BF16, shard count, the Hub's published parameter count).
RECONSTRUCTED = {
    "meta-llama/Llama-3.1-70B": ("BF16", 30, 70_553_706_496),
    "meta-llama/Llama-3.1-405B": ("BF16", 191, 405_853_388_800),
    "mistralai/Mistral-7B-v0.1": ("BF16", 2, 7_241_732_096),
    "google/gemma-7b": ("BF16", 4, 8_537_680_896),
    "meta-llama/Llama-3.2-3B": ("BF16", 2, 3_212_749_824),
    "Qwen/Qwen2.5-7B": ("BF16", 4, 7_615_616_512),
}
RECONSTRUCTED_DIR = HERE / "reconstructed"


def manifest_entry(repo_id: str) -> dict[str, Any]:
    """The repo's entry in repos.json."""
    return next(r for r in load_json(HERE / "repos.json")["repos"] if r["id"] == repo_id)


def decoder_key_layout(cfg: dict[str, Any]) -> list[str]:
    """Tensor names of a Llama-style decoder checkpoint, in state-dict (save) order."""
    bias = cfg.get("model_type") == "qwen2" or bool(cfg.get("attention_bias"))
    names = ["model.embed_tokens.weight"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for proj in ("q", "k", "v"):
            names.append(f"{p}self_attn.{proj}_proj.weight")
            if bias:
                names.append(f"{p}self_attn.{proj}_proj.bias")
        names.append(f"{p}self_attn.o_proj.weight")
        names += [f"{p}mlp.{m}_proj.weight" for m in ("gate", "up", "down")]
        names += [f"{p}input_layernorm.weight", f"{p}post_attention_layernorm.weight"]
    names.append("model.norm.weight")
    if not cfg.get("tie_word_embeddings", True):  # transformers' default is tied (gemma's config omits the key)
        names.append("lm_head.weight")
    return names


def split_shards(names: list[str], sizes: dict[str, int], n_shards: int) -> dict[str, str]:
    """Cut ``names`` (in order) into ``n_shards`` contiguous non-empty, size-balanced shards -> weight_map."""
    if len(names) < n_shards:
        raise SystemExit(f"{len(names)} tensors cannot fill {n_shards} shards")
    weight_map: dict[str, str] = {}
    remaining, pos = sum(sizes[n] for n in names), 0
    for k in range(n_shards):
        left = n_shards - k
        target, size, start = remaining / left, 0, pos
        # take at least one tensor; keep one per later shard; stop once the next one overshoots the target
        while pos < len(names) - (left - 1) and (pos == start or left == 1 or size + sizes[names[pos]] <= target):
            size += sizes[names[pos]]
            pos += 1
        for name in names[start:pos]:
            weight_map[name] = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
        remaining -= size
    return dict(sorted(weight_map.items()))


def write_reconstructed_index(repo_id: str) -> None:
    """Write reconstructed/<repo_id>/model.safetensors.index.json from the repo's config (see RECONSTRUCTED)."""
    dtype, n_shards, _published = RECONSTRUCTED[repo_id]
    cfg = load_json(HERE / manifest_entry(repo_id)["dir"] / "config.json")
    rule = llama_family_rules(cfg, dtype)
    names = decoder_key_layout(cfg)
    sizes = {}
    for name in names:
        entry = rule(name)
        if entry is None:
            raise SystemExit(f"{repo_id}: no shape rule for tensor {name!r}")
        sizes[name] = math.prod(entry[1]) * DTYPE_SIZE[entry[0]]
    index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": split_shards(names, sizes, n_shards)}
    out = RECONSTRUCTED_DIR / repo_id / "model.safetensors.index.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(index, indent=2) + "\n")


def indexed_shapes(repo_id: str) -> Shapes:
    """Shapes for an indexed repo, verified against its index (names and total_size)."""
    dtype, make_rule = INDEXED.get(repo_id) or (RECONSTRUCTED[repo_id][0], llama_family_rules)
    entry = manifest_entry(repo_id)
    repo_dir = HERE / entry["dir"]
    index_dir = HERE / entry["overlay"] if repo_id in RECONSTRUCTED else repo_dir
    cfg = load_json(repo_dir / "config.json")
    index = load_json(index_dir / "model.safetensors.index.json")
    declared = TORCH_DTYPE_NAME.get(cfg.get("torch_dtype", ""), dtype)
    if declared != dtype:
        raise SystemExit(f"{repo_id}: config torch_dtype {declared} != chosen {dtype}")
    rule = make_rule(cfg, dtype)
    shapes: Shapes = {}
    for name in sorted(index["weight_map"]):
        entry = rule(name)
        if entry is None:
            raise SystemExit(f"{repo_id}: no shape rule for tensor {name!r}")
        shapes[name] = entry
    total = nbytes(shapes)
    if total != index["metadata"]["total_size"]:
        raise SystemExit(f"{repo_id}: computed {total} bytes != index total_size {index['metadata']['total_size']}")
    shards = sorted(set(index["weight_map"].values()))
    if repo_id in RECONSTRUCTED:
        n = RECONSTRUCTED[repo_id][1]
        if shards != [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)]:
            raise SystemExit(f"{repo_id}: reconstructed index does not name exactly {n} shards")
    return shapes


# --------------------------------------------------------------------------- single-file repos (meta)


def meta_state_shapes(model: Any) -> dict[str, list[Any]]:
    """``{name: [DTYPE, shape]}`` of a (meta) model's state dict."""
    import torch

    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
    return {k: [names[v.dtype], list(v.shape)] for k, v in model.state_dict().items()}


def build_transformers(cfg_dict: dict[str, Any], auto_cls: str) -> dict[str, list[Any]]:
    """Build a transformers model on meta from a config dict; return its state-dict shapes."""
    import torch
    import transformers

    cfg_dict = {k: v for k, v in cfg_dict.items() if k != "torch_dtype"}
    cfg = transformers.AutoConfig.for_model(**cfg_dict)
    with torch.device("meta"):
        cls = getattr(transformers, auto_cls)
        model = cls.from_config(cfg) if auto_cls.startswith("Auto") else cls(cfg)
    return meta_state_shapes(model)


def bert_pretraining(cfg: dict[str, Any]) -> Shapes:
    """Legacy BERT checkpoint layout (``bert.*`` + ``cls.*``, LayerNorm gamma/beta, tied decoder absent)."""
    cfg = dict(cfg, architectures=["BertForPreTraining"])
    out: Shapes = {}
    for name, entry in build_transformers(cfg, "BertForPreTraining").items():
        if name.startswith("cls.predictions.decoder.") or name.endswith("position_ids"):
            continue
        name = re.sub(r"LayerNorm\.weight$", "LayerNorm.gamma", name)
        name = re.sub(r"LayerNorm\.bias$", "LayerNorm.beta", name)
        out[name] = entry
    return out


def gpt2_checkpoint(cfg: dict[str, Any]) -> Shapes:
    """GPT-2 checkpoint layout: prefix-less, no lm_head, causal-mask ``h.N.attn.bias`` buffers."""
    out: Shapes = {}
    for name, entry in build_transformers(cfg, "AutoModelForCausalLM").items():
        if name.startswith("lm_head.") or name.endswith(("attn.bias", "attn.masked_bias")) and "c_" not in name:
            continue
        out[name.removeprefix("transformer.")] = entry
    n = cfg["n_positions"]
    for i in range(cfg["n_layer"]):
        out[f"h.{i}.attn.bias"] = ["F32", [1, 1, n, n]]
    return dict(sorted(out.items()))


def roberta_checkpoint(cfg: dict[str, Any]) -> Shapes:
    """roberta-base checkpoint layout: RobertaForMaskedLM without tied decoder, plus I64 position_ids."""
    out: Shapes = {}
    for name, entry in build_transformers(cfg, "AutoModelForMaskedLM").items():
        if name.startswith("lm_head.decoder.") or name.endswith("position_ids"):
            continue
        out[name] = entry
    out["roberta.embeddings.position_ids"] = ["I64", [1, cfg["max_position_embeddings"]]]
    return dict(sorted(out.items()))


def sbert_checkpoint(cfg: dict[str, Any]) -> Shapes:
    """sentence-transformers BERT layout: bare BertModel keys (with pooler) plus I64 position_ids."""
    out = {k: v for k, v in build_transformers(cfg, "AutoModel").items() if not k.endswith("position_ids")}
    out["embeddings.position_ids"] = ["I64", [1, cfg["max_position_embeddings"]]]
    return dict(sorted(out.items()))


def causal_lm(cfg: dict[str, Any]) -> Shapes:
    """Plain transformers causal-LM state dict (used for the tiny llama fixtures)."""
    return dict(sorted(build_transformers(cfg, "AutoModelForCausalLM").items()))


def timm_checkpoint(name: str) -> Shapes:
    """State-dict shapes of a timm model built on meta (BatchNorm buffers included)."""
    import timm
    import torch

    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    return meta_state_shapes(model)


def expect(repo_id: str, shapes: Shapes, expected: dict[str, int] | None) -> None:
    """Fail loudly when a recorded parameter count is not reproduced."""
    got = counts(shapes)
    if expected is not None and got != expected:
        raise SystemExit(f"{repo_id}: parameter counts {got} != recorded {expected}")
    print(f"  {repo_id}: {len(shapes)} tensors, {got}, {nbytes(shapes)} bytes")


def main() -> int:
    """Generate and verify every shape table."""
    SHAPES_DIR.mkdir(exist_ok=True)
    tables: dict[str, Shapes] = {}
    for repo_id in INDEXED:
        tables[repo_id] = indexed_shapes(repo_id)
        expect(repo_id, tables[repo_id], None)
    for repo_id, (dtype, _n, published) in RECONSTRUCTED.items():
        write_reconstructed_index(repo_id)
        tables[repo_id] = indexed_shapes(repo_id)
        expect(repo_id + " (reconstructed index)", tables[repo_id], {dtype: published})
    if counts(tables["bigscience/bloom"]) != {"BF16": 176_247_271_424}:
        raise SystemExit("bloom parameter count mismatch")

    models = HERE / "models"
    fixtures = HERE / "fixture_repos"
    bert_cfg = load_json(models / "google-bert/bert-base-cased/config.json")
    # Self-check of the BERT layout rule against the recorded bert-base-uncased count (same layout, vocab 30522).
    expect("google-bert/bert-base-uncased (layout check)", bert_pretraining(dict(bert_cfg, vocab_size=30522)),
           {"F32": 110_106_428})
    tables["google-bert/bert-base-cased"] = bert_pretraining(bert_cfg)
    tables["openai-community/gpt2"] = gpt2_checkpoint(load_json(models / "openai-community/gpt2/config.json"))
    tables["FacebookAI/roberta-base"] = roberta_checkpoint(load_json(models / "FacebookAI/roberta-base/config.json"))
    tables["sentence-transformers/all-MiniLM-L6-v2"] = sbert_checkpoint(
        load_json(models / "sentence-transformers/all-MiniLM-L6-v2/config.json"))
    expect("openai-community/gpt2", tables["openai-community/gpt2"], {"F32": 137_022_720})
    expect("FacebookAI/roberta-base", tables["FacebookAI/roberta-base"], {"F32": 124_697_433, "I64": 514})
    expect("sentence-transformers/all-MiniLM-L6-v2", tables["sentence-transformers/all-MiniLM-L6-v2"],
           {"F32": 22_713_216, "I64": 512})
    expect("google-bert/bert-base-cased", tables["google-bert/bert-base-cased"], None)

    tiny = causal_lm(load_json(fixtures / "estimator-test/tiny-llama/config.json"))
    tables["estimator-test/tiny-llama"] = tiny
    mismatch = dict(tiny)
    mismatch["model.layers.1.mlp.up_proj.weight"] = ["F32", [100, 64]]  # real shape is [128, 64]
    tables["estimator-test/tiny-llama-mismatch"] = mismatch
    expect("estimator-test/tiny-llama", tiny, None)

    tables["timm/resnet50.a1_in1k"] = timm_checkpoint("resnet50.a1_in1k")
    tables["timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"] = timm_checkpoint(
        "vit_base_patch16_224.augreg2_in21k_ft_in1k")
    expect("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k",
           tables["timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"], {"F32": 86_567_656})
    expect("timm/resnet50.a1_in1k", tables["timm/resnet50.a1_in1k"], None)

    for repo_id, shapes in tables.items():
        path = SHAPES_DIR / (repo_id.replace("/", "__") + ".json")
        path.write_text(json.dumps(shapes, separators=(",", ":")) + "\n")
    print(f"wrote {len(tables)} shape tables to {SHAPES_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
