"""A model whose class needs an optional library that is not installed (Dinat needs natten): a clear
refusal naming the library, exit 2, never "Internal error (ImportError)"."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import transformers

from estimator import estimate
from estimator.errors import LibraryMissingError, UnknownArchitectureError
from estimator.messages import user_message

DINAT = {"model_type": "dinat", "architectures": ["DinatModel"], "embed_dim": 16, "depths": [1, 1, 1, 1],
         "num_heads": [1, 1, 1, 1]}


@pytest.mark.skipif(importlib.util.find_spec("natten") is not None, reason="natten is installed: Dinat builds")
def test_a_class_that_needs_a_missing_library_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(DINAT))
    with pytest.raises(ImportError, match="natten"):  # the library itself refuses to build the class
        transformers.DinatModel(transformers.DinatConfig(**{k: v for k, v in DINAT.items() if k != "architectures"}))
    with pytest.raises(LibraryMissingError, match=r"DinatModel needs the natten library, which is not installed") as caught:
        estimate(str(tmp_path), dtypes="float32")
    message, status = user_message(caught.value)
    assert status == 2 and "Internal error" not in message and "\n" not in message


def test_a_class_the_auto_mapping_names_but_transformers_lacks_is_refused(tmp_path: Path) -> None:
    """transformers 5.23 maps voxtral_realtime_text to VoxtralRealtimeTextModel, which it does not define."""
    config = transformers.AutoConfig.for_model("voxtral_realtime_text", hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                               num_attention_heads=4, num_key_value_heads=2, vocab_size=1000, head_dim=16)
    config.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="Could not find"):  # transformers' own lookup fails
        transformers.AutoModel.from_config(config)
    with pytest.raises(UnknownArchitectureError, match=r"maps VoxtralRealtimeTextConfig to VoxtralRealtimeTextModel but does not define"):
        estimate(str(tmp_path), dtypes="float32")
