"""int8 / int4 rows from safetensors headers without torch: the bitsandbytes layout table.

Truth is the meta-build path (:func:`estimator.quant.bnb.quantized_bytes`, checked against real bitsandbytes
allocations in ``test_quant_bnb.py``, which also checks a table made from a checkpoint's headers
against the real quantized load of that checkpoint, for Llama, BERT, GPT-2 and T5).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from typing import Any

import pytest

from estimator.quant.bnb import BnbScheme
from estimator.quant.bnb_stored import layout_key, load_table, pattern, stored_quantized_bytes
from estimator.source.stored import StoredTensor, tensors_from_shapes
from testkit.hub_process import REPO_ROOT, hub_env
from tests.test_hub_estimates import DATA, drive, shapes

LLAMA = "meta-llama/Llama-3.1-8B"


def _config(repo: str) -> dict[str, Any]:
    for folder in ("models", "models_unverified", "fixture_repos"):
        path = DATA / folder / repo / "config.json"
        if path.exists():
            return json.loads(path.read_text())
    raise FileNotFoundError(repo)


def _tensors(repo: str) -> list[StoredTensor]:
    return tensors_from_shapes(shapes(repo))


def test_committed_table_is_what_transformers_gives_and_answers_every_stand_in_checkpoint() -> None:
    """Regenerate the table with transformers' loading code: same file, every checkpoint equal to the meta build."""
    result = subprocess.run([sys.executable, "tools/make_bnb_layouts.py", "--check"], check=False, capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    checks = [line for line in result.stdout.splitlines() if " table " in line]
    assert len(checks) >= 3 * 15
    assert not [line for line in checks if re.search(r" table\s+build ", line)], "a stand-in checkpoint is not answered from the table"
    assert result.stdout.rstrip().endswith("up to date")


def _unfilled_bytes(repo: str) -> int:
    """Bytes of the meta build's tensors that no checkpoint key fills, where the keys are the model's own names."""
    import torch

    from estimator.build import build_transformers
    from estimator.build.weights import tensor_bytes, unique_tensors

    model = build_transformers(_config(repo), torch.float16, model=repo)
    stored = set(shapes(repo))
    state = model.state_dict(keep_vars=True)
    assert stored <= set(state), "this check needs a checkpoint whose keys are the model's own names"
    filled = {id(state[name]) for name in stored}
    return sum(tensor_bytes(tensor) for _, tensor in unique_tensors(model) if id(tensor) not in filled)


@pytest.mark.parametrize("repo", [LLAMA, "meta-llama/Llama-3.2-3B", "Qwen/Qwen2.5-7B"])
def test_hub_int_rows_from_headers_equal_the_meta_build(hub_server: str, repo: str) -> None:
    stored, built = drive(hub_server, [{"model": repo}, {"model": repo, "kwargs": {"cross_check": True}}])
    unfilled = _unfilled_bytes(repo)
    assert 0 < unfilled < 1024  # rotary inv_freq and original_inv_freq, never saved
    for dtype in ("int8", "int4"):
        header_row = next(r for r in stored["ok"]["rows"] if r["dtype"] == dtype)
        build_row = next(r for r in built["ok"]["rows"] if r["dtype"] == dtype)
        assert header_row["method"] == "stored" and build_row["method"] == "exact"
        assert header_row["total_bytes"] == build_row["total_bytes"] - unfilled
        assert header_row["training_adam_bytes"] is None and any("QLoRA" in note for note in header_row["notes"])
    double = [re.search(r"double_quant=True: ([\d,]+) bytes", " ".join(r["notes"])) for r in (stored["ok"]["rows"][3], built["ok"]["rows"][3])]
    assert double[0] and double[1]
    assert int(double[0].group(1).replace(",", "")) == int(double[1].group(1).replace(",", "")) - unfilled


def test_default_dtypes_need_no_torch_and_a_table_miss_builds_the_model(hub_server: str) -> None:
    code = (
        "import sys, json\n"
        "from estimator import estimate\n"
        "import estimator.quant.bnb_stored as table\n"
        f"answered = estimate({LLAMA!r})\n"
        "print(json.dumps([[r.method for r in answered.rows], 'torch' in sys.modules, 'transformers' in sys.modules]))\n"
        "table.load_table = lambda: {}\n"
        "missed = estimate('estimator-test/tiny-llama')\n"
        "print(json.dumps([[r.method for r in missed.rows], 'torch' in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=REPO_ROOT, env=hub_env(hub_server), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    answered, missed = (json.loads(line) for line in result.stdout.splitlines())
    assert answered == [["stored", "stored", "stored", "stored"], False, False]
    assert missed == [["stored", "stored", "exact", "exact"], True]


@pytest.fixture(scope="module")
def llama() -> tuple[list[StoredTensor], dict[str, Any]]:
    return _tensors(LLAMA), _config(LLAMA)


def test_the_committed_table_answers_llama(llama: tuple[list[StoredTensor], dict[str, Any]]) -> None:
    tensors, config = llama
    answer = stored_quantized_bytes(tensors, config, BnbScheme.INT8)
    assert answer is not None
    assert answer.bytes.quantized_layers == 32 * 7 and answer.bytes.kept_16bit == ("lm_head", "model.embed_tokens")


def _table(codes: dict[str, str], version: str | None = None, key: str | None = None) -> dict[str, Any]:
    return {"transformers": version or metadata.version("transformers"), "layouts": {key or "LlamaForCausalLM|tie_word_embeddings=false": {"codes": codes}}}


def test_a_table_miss_is_none_never_a_guess(llama: tuple[list[StoredTensor], dict[str, Any]]) -> None:
    tensors, config = llama
    codes = load_table()["layouts"][layout_key(config)]["codes"]
    scheme = BnbScheme.INT4
    assert stored_quantized_bytes(tensors, config, scheme, table=_table(codes)) is not None
    assert stored_quantized_bytes(tensors, config, scheme, table=_table(codes, version="4.57.0")) is None  # another transformers
    assert stored_quantized_bytes(tensors, {**config, "architectures": ["NewModelForCausalLM"]}, scheme, table=_table(codes)) is None
    assert stored_quantized_bytes(tensors, {**config, "tie_word_embeddings": True}, scheme, table=_table(codes)) is None
    extra = StoredTensor(name="model.layers.0.mlp.extra_proj.weight", dtype="BF16", numel=16, shape=(4, 4))
    assert stored_quantized_bytes([*tensors, extra], config, scheme, table=_table(codes)) is None  # a key the table never saw
    ambiguous = {**codes, pattern("model.layers.3.mlp.up_proj.weight"): "?"}
    assert stored_quantized_bytes(tensors, config, scheme, table=_table(ambiguous)) is None
    flat = [StoredTensor(t.name, t.dtype, t.numel, (t.numel,)) if t.name.endswith("q_proj.weight") else t for t in tensors]
    assert stored_quantized_bytes(flat, config, scheme, table=_table(codes)) is None  # a quantized weight must be 2-D


def test_two_tensors_of_one_tied_group_are_left_to_the_build() -> None:
    config = {"architectures": ["LlamaForCausalLM"], "tie_word_embeddings": False}
    one = [StoredTensor("model.embed_tokens.weight", "BF16", 12, (4, 3))]
    codes = {"model.embed_tokens.weight": "S2@model.embed_tokens.weight", "lm_head.weight": "S2@model.embed_tokens.weight"}
    answer = stored_quantized_bytes(one, config, BnbScheme.INT8, table=_table(codes))
    assert answer is not None and answer.bytes.total_bytes == 24
    both = [*one, StoredTensor("lm_head.weight", "BF16", 12, (4, 3))]
    assert stored_quantized_bytes(both, config, BnbScheme.INT8, table=_table(codes)) is None


def test_a_config_without_tie_word_embeddings_ties_as_its_class_does() -> None:
    gemma = _config("google/gemma-7b")
    assert "tie_word_embeddings" not in gemma
    assert layout_key(gemma, {"GemmaForCausalLM": True}) == "GemmaForCausalLM|tie_word_embeddings=true"
    assert layout_key(gemma, {}) is None  # class default unknown: no key, the build answers
    assert load_table()["tie_defaults"]["GemmaForCausalLM"] is True
    assert stored_quantized_bytes(_tensors("google/gemma-7b"), gemma, BnbScheme.INT8) is not None
