"""int8 / int4 rows: the dtype of what bitsandbytes leaves unquantized, against real CPU loads.

``from_pretrained(path, quantization_config=BitsAndBytesConfig(...))`` without ``dtype`` loads with
transformers' ``dtype="auto"``: the embeddings, head, norms and biases stay in the checkpoint's dtype
(float32 checkpoints hold them in float32). With ``dtype=X`` they are in X (T5's ``wo`` in float32
when X is float16). Small GPT-2, Llama and T5 checkpoints are saved in float32, float16 and bfloat16,
loaded with real bitsandbytes 0.50 on CPU with and without ``dtype=``, and every allocated byte is
compared with the int8 / int4 rows: the meta-build path (``estimate`` on the local folder) and the
header path (the checkpoint's safetensors header answered from the committed layout table).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from estimator import estimate
from estimator.errors import BadOptionError
from estimator.options import DType, parse_options
from estimator.quant.bnb import BnbScheme
from estimator.quant.bnb_stored import stored_quantized_bytes
from estimator.quant.load_dtype import auto_dtype, kept_dtype
from testkit.truth import unsaved_bytes
from tests.test_quant_bnb import SMALL_CONFIGS, _bnb_config, allocated_bytes
from tools.bnb_table import header_tensors

NAMES = ("gpt2", "llama", "t5")
STORED = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """GPT-2, Llama and T5 saved in each dtype, plus a bfloat16 T5 whose config names no dtype (legacy)."""
    paths = {}
    for name in NAMES:
        config = SMALL_CONFIGS[name]
        for stored, torch_dtype in STORED.items():
            torch.manual_seed(0)
            path = tmp_path_factory.mktemp(f"{name}-{stored}")
            getattr(transformers, config.architectures[0])(config).to(torch_dtype).save_pretrained(path)
            assert json.loads((path / "config.json").read_text())["dtype"] == stored
            paths[name, stored] = path
    legacy = tmp_path_factory.mktemp("t5-bfloat16-no-config-dtype")
    for file in paths["t5", "bfloat16"].iterdir():
        (legacy / file.name).write_bytes(file.read_bytes())
    config = json.loads((legacy / "config.json").read_text())
    del config["dtype"]
    (legacy / "config.json").write_text(json.dumps(config))
    paths["t5", "legacy-bfloat16"] = legacy
    return paths


def _real(path: Path, scheme: BnbScheme, given: str | None) -> torch.nn.Module:
    cls = getattr(transformers, json.loads((path / "config.json").read_text())["architectures"][0])
    dtype: dict[str, Any] = {} if given is None else {"dtype": STORED[given]}
    return cls.from_pretrained(path, quantization_config=_bnb_config(scheme), device_map="cpu", **dtype)


def _header_answer(path: Path, scheme: BnbScheme, given: str | None) -> int:
    """The torch-free path: the checkpoint's header, the load dtype resolved from it, the committed table."""
    config = json.loads((path / "config.json").read_text())
    tensors = header_tensors(path / "model.safetensors")
    load = kept_dtype(config, None if given is None else DType(given), first_file=tensors)
    assert load.dtype is not None
    answer = stored_quantized_bytes(tensors, config, scheme, load_dtype=load.dtype)
    assert answer is not None, "the committed table does not answer this checkpoint"
    return answer.bytes.total_bytes


CASES = [(name, stored) for name in NAMES for stored in STORED] + [("t5", "legacy-bfloat16")]


@pytest.mark.parametrize(("name", "stored"), CASES)
@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_without_dtype_the_rows_equal_the_real_auto_load(checkpoints: dict[tuple[str, str], Path], name: str, stored: str, dtype: str) -> None:
    path = checkpoints[name, stored]
    scheme = BnbScheme.for_dtype(DType(dtype))
    real = _real(path, scheme, None)
    kept = stored.removeprefix("legacy-")
    assert {p.dtype for n, p in real.named_parameters() if n.endswith("norm.weight") or "layer_norm" in n or n.endswith("ln_f.weight")} == {STORED[kept]}
    row = estimate(str(path), dtypes=[dtype]).row(dtype)
    assert row.method == "exact"
    assert row.total_bytes == allocated_bytes(real)
    assert any(note.startswith(f"kept in {kept} (the checkpoint's dtype") for note in row.notes), row.notes
    assert _header_answer(path, scheme, None) == allocated_bytes(real) - unsaved_bytes(real)


@pytest.mark.parametrize(("name", "stored"), [(name, stored) for name in NAMES for stored in ("float32", "bfloat16")])
@pytest.mark.parametrize("given", list(STORED))
@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_with_dtype_the_rows_equal_the_real_load(checkpoints: dict[tuple[str, str], Path], name: str, stored: str, given: str, dtype: str) -> None:
    """``bnb_compute_dtype=X`` is ``from_pretrained(..., dtype=X)``, whatever the checkpoint stores (needs api.py's keyword)."""
    path = checkpoints[name, stored]
    scheme = BnbScheme.for_dtype(DType(dtype))
    real = _real(path, scheme, given)
    result = estimate(str(path), dtypes=[dtype], bnb_compute_dtype=given)
    row = result.row(dtype)
    assert row.total_bytes == allocated_bytes(real)
    assert any(note.startswith(f"kept in {given} (dtype=torch.{given} given") for note in row.notes), row.notes
    assert result.options["bnb_compute_dtype"] == given
    assert _header_answer(path, scheme, given) == allocated_bytes(real) - unsaved_bytes(real)


def test_auto_follows_transformers_order() -> None:
    """Config ``dtype``, then legacy ``torch_dtype``, then the shard index, then the first floating tensor by name."""
    from estimator.source.stored import StoredTensor

    tensors = [StoredTensor("b.weight", "F32", 4, (2, 2)), StoredTensor("a.position_ids", "I64", 4, (4,)), StoredTensor("a.weight", "BF16", 4, (2, 2))]
    assert auto_dtype({"dtype": "float16", "torch_dtype": "float32"}, first_file=tensors).dtype is DType.FLOAT16
    assert auto_dtype({"torch_dtype": "float32"}, index_dtype="bfloat16", first_file=tensors).dtype is DType.FLOAT32
    assert auto_dtype({}, index_dtype="float16", first_file=tensors).dtype is DType.FLOAT16
    assert auto_dtype({}, first_file=tensors).dtype is DType.BFLOAT16  # "a.weight" sorts first among the floating ones
    assumed = auto_dtype({})
    assert assumed.dtype is DType.FLOAT32 and assumed.source.startswith("assumed")
    assert auto_dtype({"torch_dtype": "float64"}).dtype is None
    assert kept_dtype({"torch_dtype": "float32"}, DType.BFLOAT16).dtype is DType.BFLOAT16


def test_the_option_is_parsed_and_reported_only_when_set() -> None:
    assert parse_options().load.bnb_compute_dtype is None
    assert parse_options(bnb_compute_dtype="auto").load.bnb_compute_dtype is None
    options = parse_options(bnb_compute_dtype="BFloat16")
    assert options.load.bnb_compute_dtype is DType.BFLOAT16
    assert options.shaping(None)["bnb_compute_dtype"] == "bfloat16"
    assert "bnb_compute_dtype" not in parse_options().shaping(None)
    with pytest.raises(BadOptionError, match="must be one of float32, float16, bfloat16"):
        parse_options(bnb_compute_dtype="int8")
