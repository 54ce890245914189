"""Evolla fed a protein and its chat text (estimator/peak/inputs/other/protein.py), fast: no model run.

- The SaProt tokenizer gives the ids of the Evolla-10B-hf checkpoint's: transformers' own processor test
  (tests/models/evolla/test_processing_evolla.py) expects ``[0, 13, 13, 13, 13, 2]`` for amino acids "AAAA" with
  foldseek "dddd"; its size and special ids are the config's.
- What the simulation feeds (the workload's inputs, under fake tensors, their known values) equals what transformers'
  ``EvollaProcessor.__call__`` returns for the same proteins and messages, the processor built here with an
  ``EsmTokenizer`` over a vocabulary written here from SaProt's alphabet (the letters of transformers' test) and the
  stand-in text tokenizer; the processor's truncation (1024 protein tokens, 512 text tokens) holds.
- The coverage bench records such a row's inputs as "protein + text", not text only.

The allocator's truth (inference = generate, training = two AdamW steps, at 32 and 256 residues) is
``python -m bench.multimodal_accuracy evolla`` (bench/results/multimodal_accuracy.md).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.peak.fakes.known_values import known_value
from estimator.peak.inputs.other.protein import protein_inputs, protein_processor, protein_tokenizer, random_proteins, user_messages
from testkit.multimodal_cases import MM_CASES

# transformers' tests/models/evolla/test_processing_evolla.py: EVOLLA_VALID_AA, EVOLLA_VALID_FS; SaProt's specials first
_AA = list("ACDEFGHIKLMNPQRSTVWY#")
_FS = list("pynwrqhgdlvtmfsaeikc#")
_SPECIALS = ["<cls>", "<pad>", "<eos>", "<unk>", "<mask>"]


def _independent_processor(config: Any, folder: Path) -> Any:
    from transformers import EsmTokenizer, EvollaProcessor

    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(_SPECIALS + [a + f for a, f in itertools.product(_AA, _FS)]))
    return EvollaProcessor(protein_tokenizer=EsmTokenizer(vocab_file=str(vocab)), tokenizer=protein_processor(config).tokenizer)


def test_saprot_tokens_are_the_checkpoints() -> None:
    from transformers import EvollaConfig

    config = EvollaConfig()
    made = protein_processor(config)(proteins={"aa_seq": "AAAA", "foldseek": "dddd"},
                                     messages_list=[{"role": "user", "content": "a a"}])
    assert made["protein_input_ids"].tolist() == [[0, 13, 13, 13, 13, 2]]
    assert made["protein_attention_mask"].tolist() == [[1] * 6]
    tokenizer = protein_tokenizer()
    saprot = config.protein_encoder_config
    assert len(tokenizer) == saprot.vocab_size == 446
    assert (tokenizer.pad_token_id, tokenizer.mask_token_id) == (saprot.pad_token_id, saprot.mask_token_id)


def test_workload_feeds_what_the_processor_returns(tmp_path: Path) -> None:
    from estimator.peak.inputs.providers import workload_for

    case = MM_CASES["evolla"]
    config = case.make_config()
    expected = _independent_processor(config, tmp_path)(proteins=random_proteins(2, 40), messages_list=user_messages(2, 40))
    workload = workload_for(case.build_on("meta"), batch_size=2, seq_len=40)
    with FakeTensorMode():
        fed = workload.make_inputs()
        known = {k: known_value(v) for k, v in fed.items()}
    assert set(expected) == {"protein_input_ids", "protein_attention_mask", "input_ids", "attention_mask"}
    for name, real in expected.items():
        assert known[name] is not None and torch.equal(known[name], real), name
    assert expected["protein_input_ids"].shape == (2, 42) and expected["input_ids"].shape == (2, 40)
    assert torch.equal(known["labels"], expected["input_ids"])  # training: the text's ids, the model shifts them
    assert "40 residues" in workload.description and "40 text tokens" in workload.description


def test_processor_truncation_holds(tmp_path: Path) -> None:
    config = MM_CASES["evolla"].make_config()
    made = protein_inputs(config, batch_size=1, residues=1100, text_len=600)
    expected = _independent_processor(config, tmp_path)(proteins=random_proteins(1, 1100), messages_list=user_messages(1, 600))
    for name, real in expected.items():
        assert torch.equal(made.tensors[name], real), name
    assert made.tensors["protein_input_ids"].shape == (1, 1024) and made.tensors["input_ids"].shape == (1, 512)
    assert made.tensors["protein_input_ids"][0, -1].item() == 2  # truncated inside, <eos> kept


def test_coverage_records_a_protein_input() -> None:
    from estimator.peak.inputs.providers import workload_for
    from testkit.coverage import simulated_inputs

    workload = workload_for(MM_CASES["evolla"].build_on("meta"), batch_size=1, seq_len=8)
    assert simulated_inputs((f"inference: generate's prefill ({workload.description}), KV cache on",)) == "protein + text"
