"""int8 / int4 rows against real bitsandbytes: small models quantized on CPU, every byte counted.

The truth is what ``from_pretrained(..., quantization_config=BitsAndBytesConfig(...), dtype=float16)``
leaves in memory: each distinct tensor storage reachable from the model — parameters, buffers,
``Int8Params.SCB`` and ``Params4bit.quant_state`` (absmax, code, nested state, offset), which are
attributes, not buffers. The estimate comes from a meta build and never imports bitsandbytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bitsandbytes as bnb
import pytest
import torch
import transformers

from estimator import estimate
from estimator.load.rows import build
from estimator.options import DType, Library
from estimator.quant.bnb import (
    BnbScheme,
    int4_weight_bytes,
    int8_weight_bytes,
    quantized_bytes,
)
from estimator.source.reference import ModelRef
from estimator.source.resolve import Resolved
from testkit.truth import unsaved_bytes
from tools.bnb_table import SAVED


def _walk(obj: Any, storages: dict[int, int], seen: set[int]) -> None:
    """Every tensor storage reachable from ``obj`` through modules, tensors' and bitsandbytes objects' attributes."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        for value in vars(obj).values() if hasattr(obj, "__dict__") else ():
            _walk(value, storages, seen)
    elif isinstance(obj, torch.nn.Module):
        for value in [*obj._parameters.values(), *obj._buffers.values(), *obj._modules.values()]:
            if value is not None:
                _walk(value, storages, seen)
        for key, value in vars(obj).items():
            if not key.startswith("_"):
                _walk(value, storages, seen)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _walk(value, storages, seen)
    elif isinstance(obj, dict):
        for value in obj.values():
            _walk(value, storages, seen)
    elif type(obj).__module__.startswith("bitsandbytes") and hasattr(obj, "__dict__"):
        for value in vars(obj).values():
            _walk(value, storages, seen)


def allocated_bytes(model: torch.nn.Module) -> int:
    storages: dict[int, int] = {}
    _walk(model, storages, set())
    return sum(storages.values())


def _bnb_config(scheme: BnbScheme) -> Any:
    if scheme is BnbScheme.INT8:
        return transformers.BitsAndBytesConfig(load_in_8bit=True)
    return transformers.BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float16,
        bnb_4bit_use_double_quant=scheme is BnbScheme.INT4_DOUBLE,
    )


SMALL_CONFIGS = {
    # untied lm_head, no biases, GQA, an intermediate size that is not a multiple of 64 per row
    "llama": transformers.LlamaConfig(
        hidden_size=96, intermediate_size=200, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=500, architectures=["LlamaForCausalLM"],
    ),
    # biases everywhere; the pooler owns the last parameter, so transformers keeps it in 16 bits
    "bert": transformers.BertConfig(
        hidden_size=64, intermediate_size=136, num_hidden_layers=2, num_attention_heads=4, vocab_size=300,
        max_position_embeddings=64, architectures=["BertModel"],
    ),
    # GPT-2's Conv1D layers (weights stored in x out) are quantized too; its checkpoint keys lack the 'transformer.' prefix
    "gpt2": transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=300, architectures=["GPT2LMHeadModel"]),
    # _keep_in_fp32_modules: from_pretrained(dtype=float16) keeps the 'wo' layers in float32
    "t5": transformers.T5Config(
        d_model=64, d_ff=96, d_kv=16, num_layers=2, num_heads=4, vocab_size=300, architectures=["T5ForConditionalGeneration"],
    ),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    paths = {}
    for name, config in SMALL_CONFIGS.items():
        torch.manual_seed(0)
        cls = getattr(transformers, config.architectures[0])
        path = tmp_path_factory.mktemp(name)
        # Saved in float16 (config dtype float16): from_pretrained's dtype="auto" is then the dtype=float16 of _real()
        cls(config).half().save_pretrained(path)
        paths[name] = path
    return paths


def _real(path: Path, scheme: BnbScheme) -> int:
    cls = getattr(transformers, transformers.AutoConfig.from_pretrained(path).architectures[0])
    model = cls.from_pretrained(path, quantization_config=_bnb_config(scheme), dtype=torch.float16, device_map="cpu")
    quantized = [m for m in model.modules() if isinstance(m, (bnb.nn.Linear8bitLt, bnb.nn.Linear4bit))]
    assert quantized, "bitsandbytes quantized nothing"
    if scheme is not BnbScheme.INT8:
        assert all(m.weight.quant_state is not None for m in quantized)
    return allocated_bytes(model)


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_rows_equal_real_bitsandbytes_allocation(checkpoints: dict[str, Path], name: str, dtype: str) -> None:
    scheme = BnbScheme.INT8 if dtype == "int8" else BnbScheme.INT4
    row = estimate(str(checkpoints[name]), dtypes=[dtype]).row(dtype)
    assert row.method == "exact"
    assert row.training_adam_bytes is None and any("QLoRA" in note for note in row.notes)
    assert row.total_bytes == _real(checkpoints[name], scheme)


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
def test_double_quant_equals_real_bitsandbytes_allocation(checkpoints: dict[str, Path], name: str) -> None:
    path = checkpoints[name]
    resolved = Resolved(ref=ModelRef(path=path), source="local", library=Library.TRANSFORMERS,
                        config=transformers.AutoConfig.from_pretrained(path).to_dict())
    estimated = quantized_bytes(build(resolved, DType.FLOAT16), BnbScheme.INT4_DOUBLE).total_bytes
    assert estimated == _real(path, BnbScheme.INT4_DOUBLE)
    row = estimate(str(path), dtypes=["int4"]).row("int4")
    assert f"{estimated:,}" in row.notes[-1]


@pytest.mark.parametrize(("out_features", "in_features"), [(64, 64), (200, 96), (7, 9), (1, 1)])
@pytest.mark.parametrize("scheme", list(BnbScheme))
def test_one_layer_layout_equals_bitsandbytes(out_features: int, in_features: int, scheme: BnbScheme) -> None:
    """One Linear quantized by bitsandbytes itself (``.to("cpu")`` quantizes), odd sizes included."""
    torch.manual_seed(0)
    weight = torch.randn(out_features, in_features, dtype=torch.float16)
    if scheme is BnbScheme.INT8:
        layer = bnb.nn.Linear8bitLt(in_features, out_features, bias=False, has_fp16_weights=False)
        layer.weight = bnb.nn.Int8Params(weight, requires_grad=False, has_fp16_weights=False)
        expected = int8_weight_bytes(out_features, in_features)
    else:
        layer = bnb.nn.Linear4bit(in_features, out_features, bias=False, compute_dtype=torch.float16,
                                  compress_statistics=scheme is BnbScheme.INT4_DOUBLE, quant_type="nf4")
        layer.weight = bnb.nn.Params4bit(weight, requires_grad=False, compress_statistics=scheme is BnbScheme.INT4_DOUBLE, quant_type="nf4")
        expected = int4_weight_bytes(out_features * in_features, double_quant=scheme is BnbScheme.INT4_DOUBLE)
    layer = layer.to("cpu")
    assert layer.weight.dtype in (torch.int8, torch.uint8)
    assert allocated_bytes(layer) == expected


def _header_tensors(path: Path) -> list[Any]:
    """The checkpoint's tensors as its safetensors header lists them (what the Hub path reads)."""
    from tools.bnb_table import header_tensors

    return header_tensors(path / "model.safetensors")


@pytest.mark.parametrize("scheme", list(BnbScheme))
def test_prequantized_checkpoint_row_equals_its_real_load(checkpoints: dict[str, Path], tmp_path: Path, scheme: BnbScheme) -> None:
    """A checkpoint saved after bitsandbytes quantization: the stored row equals what loading it allocates."""
    import json

    from estimator.load.rows import _prequantized_row

    path = checkpoints["llama"]
    quantized = transformers.LlamaForCausalLM.from_pretrained(path, quantization_config=_bnb_config(scheme), dtype=torch.float16, device_map="cpu")
    quantized.save_pretrained(tmp_path)
    reloaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float16, device_map="cpu")
    config = json.loads((tmp_path / "config.json").read_text())
    resolved = Resolved(ref=ModelRef(repo_id="someone/prequantized"), source="hub", library=Library.TRANSFORMERS, config=config)
    dtype = DType.INT8 if scheme is BnbScheme.INT8 else DType.INT4
    row = _prequantized_row(_header_tensors(tmp_path), resolved, dtype, [])
    assert row.method == "stored"
    # The stored path counts what the checkpoint holds: buffers that are never saved (rotary
    # inv_freq, non-persistent) are not in it, as stored.py documents.
    unsaved = unsaved_bytes(reloaded)
    assert unsaved < 1024
    assert row.total_bytes == allocated_bytes(reloaded) - unsaved
    other = _prequantized_row(_header_tensors(tmp_path), resolved, DType.INT4 if dtype is DType.INT8 else DType.INT8, [])
    assert other.total_bytes is None and "not re-quantized" in other.notes[0]


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
def test_float16_row_equals_real_load(checkpoints: dict[str, Path], name: str) -> None:
    """The 16-bit build the int rows start from: from_pretrained(dtype=float16), float32 exceptions included."""
    cls = getattr(transformers, SMALL_CONFIGS[name].architectures[0])
    real = cls.from_pretrained(checkpoints[name], dtype=torch.float16, device_map="cpu")
    assert estimate(str(checkpoints[name]), dtypes=["float16"]).row("float16").total_bytes == allocated_bytes(real)


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
@pytest.mark.parametrize("scheme", list(BnbScheme))
def test_header_table_answer_equals_real_bitsandbytes_allocation(checkpoints: dict[str, Path], name: str, scheme: BnbScheme) -> None:
    """The torch-free path: a layout table made from the checkpoint's headers, then the headers answered from it."""
    import json

    from estimator.quant.bnb_stored import stored_quantized_bytes
    from tools.bnb_table import Checkpoint, make_table

    path = checkpoints[name]
    config = json.loads((path / "config.json").read_text())
    checkpoint = Checkpoint(name=f"local/{name}", config=config, tensors=_header_tensors(path))
    table, _ = make_table([checkpoint], transformers.__version__)
    answer = stored_quantized_bytes(checkpoint.tensors, config, scheme, table=table)
    assert answer is not None
    cls = getattr(transformers, config["architectures"][0])
    real = cls.from_pretrained(path, quantization_config=_bnb_config(scheme), dtype=torch.float16, device_map="cpu")
    unsaved = unsaved_bytes(real)
    assert unsaved < 4096
    assert answer.bytes.total_bytes == allocated_bytes(real) - unsaved
    assert answer.bytes.quantized_layers == sum(isinstance(m, (bnb.nn.Linear8bitLt, bnb.nn.Linear4bit)) for m in real.modules())


@pytest.mark.parametrize("model_type", sorted(SAVED))
def test_every_saved_architecture_of_the_table_equals_real_bitsandbytes(tmp_path: Path, model_type: str) -> None:
    """Each architecture the table learns from a transformers save: tiny untied and tied models, saved,
    answered from their headers, and loaded with real bitsandbytes on CPU (MoE experts included)."""
    from estimator.quant.bnb_stored import stored_quantized_bytes
    from tools.bnb_table import make_table, saved_by_transformers

    checkpoints = saved_by_transformers(tmp_path, [model_type])
    table, _ = make_table(checkpoints, transformers.__version__)
    for checkpoint in checkpoints:
        cls = getattr(transformers, checkpoint.config["architectures"][0])
        for scheme in BnbScheme:
            answer = stored_quantized_bytes(checkpoint.tensors, checkpoint.config, scheme, table=table)
            assert answer is not None, checkpoint.name
            real = cls.from_pretrained(tmp_path / checkpoint.name.rsplit("/", 1)[1], quantization_config=_bnb_config(scheme),
                                       dtype=torch.float16, device_map="cpu")
            assert answer.bytes.total_bytes == allocated_bytes(real) - unsaved_bytes(real), (checkpoint.name, scheme)
