"""sentence-transformers: the hand-assembled meta build against the library's own CPU load.

Truth: a small model (BERT + mean pooling + Dense + Normalize) saved with ``SentenceTransformer.save``
and loaded back with ``SentenceTransformer(folder)``; every distinct tensor storage counted. The
real all-MiniLM-L6-v2 is estimated offline from its Hub files and checked against the Hub's own
safetensors parameter count (recorded model_info: 22,713,216 F32 + 512 I64).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sentence_transformers as st
import torch
import transformers

from estimator import estimate
from testkit.truth import storage_bytes

MINILM = Path(__file__).resolve().parents[1] / "estimator" / "source" / "catalog" / "data" / "sentence-transformers__all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def small_st(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(95)]]
    (base / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizer(str(base / "vocab.txt")).save_pretrained(base)
    config = transformers.BertConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                                     vocab_size=len(vocab), max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(base)
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = Transformer(str(base))
    model = st.SentenceTransformer(modules=[transformer, Pooling(32, pooling_mode="mean"), Dense(32, 24), Normalize()], device="cpu")
    out = tmp_path_factory.mktemp("st") / "model"
    model.save(str(out))
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_small_model_equals_real_load(small_st: Path, dtype: str) -> None:
    real = st.SentenceTransformer(str(small_st), device="cpu").to(getattr(torch, dtype))
    result = estimate(str(small_st), dtypes=[dtype])
    assert result.library == "sentence-transformers"
    assert result.row(dtype).total_bytes == storage_bytes(real)


def test_all_minilm_offline() -> None:
    result = estimate(str(MINILM), dtypes=["float32", "float16"])
    assert result.library == "sentence-transformers" and result.architecture == "BertModel"
    # The checkpoint stores 22,713,216 float32 values and the 512 int64 position_ids; the loaded
    # model also holds the non-persistent int64 token_type_ids buffer (512 values).
    assert result.row("float32").total_bytes == 22_713_216 * 4 + 512 * 8 + 512 * 8
    assert result.row("float16").total_bytes == 22_713_216 * 2 + 512 * 8 + 512 * 8
