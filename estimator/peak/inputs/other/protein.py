"""Protein-text models' inputs (Evolla): a protein in SaProt's tokens and the chat text, as the model's processor makes them.

``EvollaProcessor`` (transformers' ``processing_evolla.py``) turns each protein's amino-acid sequence and its foldseek
structure string into SaProt's structure-aware tokens (each residue's amino acid upper case + its foldseek letter
lower case: one token per residue) with its ``protein_tokenizer``, an ``EsmTokenizer``, under ``<cls>`` ... ``<eos>``,
truncated at ``protein_max_length`` (1024 tokens by default); the chat messages go through its text tokenizer's chat
template, truncated at ``text_max_length`` (512 by default). It returns ``protein_input_ids``,
``protein_attention_mask``, ``input_ids`` and ``attention_mask``; the model runs SaProt on the protein, its resampler
compresses that to ``resampler_num_latents`` latents, and the language model's adapters cross-attend to them.

Here the real ``EvollaProcessor`` is run, its settings at the class's defaults (nothing of the repo's is read), on:

- a protein of ``seq_len`` residues (the estimator's ``seq_len`` option; no option of its own): a random but valid
  sequence of the 20 amino acids and the 20 foldseek letters. Memory depends on the length, not on the letters. The
  protein tokenizer is transformers' ``EsmTokenizer`` over SaProt's vocabulary (:func:`saprot_vocabulary`: SaProt's 5
  special tokens, then every amino acid of ``ACDEFGHIKLMNPQRSTVWY#`` with every foldseek letter of
  ``pynwrqhgdlvtmfsaeikc#``, 446 tokens, the config's ``protein_encoder_config.vocab_size``; "Ad" is id 13, as in
  transformers' own processor test of the Evolla-10B-hf tokenizer);
- one user message of ``seq_len`` words, read by a word-level stand-in tokenizer (:func:`estimator.peak.inputs.prompts.family.family_tokenizer`,
  as the vision-language models' text is) whose chat template writes the messages' contents: ``seq_len`` text tokens.

So a ``seq_len`` of L feeds ``min(L + 2, 1024)`` protein tokens and ``min(L, 512)`` text tokens, the processor's own
truncation. Inference is ``generate`` (:mod:`estimator.peak.inputs.prompts.media`: the prefill and, with ``max_new_tokens``, the last
decode step; every step passes the protein again, as ``generate`` does, so SaProt and the resampler run at each);
training is a forward with ``labels`` = the text's ids to the model's own loss.

Nothing here runs a repository's code: the processor and tokenizer classes are transformers'.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import torch
from torch import nn

from estimator.peak.inputs.prompts import generation
from estimator.peak.inputs.prompts.family import Family, MediaInputs, family_tokenizer
from estimator.peak.inputs.prompts.media import MediaWorkload, encoder_labelled, media_workload
from estimator.peak.inputs.routing import with_ties
from estimator.peak.workload import Workload

__all__ = ["SAPROT_AMINO_ACIDS", "SAPROT_FOLDSEEK", "SAPROT_SPECIALS", "protein_inputs", "protein_processor", "protein_tokenizer",
           "random_proteins", "saprot_vocabulary", "user_messages", "workload"]

# SaProt's alphabet (westlake-repl/SaProt, ``load_esm_saprot``; transformers' tests/models/evolla/test_processing_evolla.py
# draws its proteins from the same letters): "#" is its unknown / masked residue or structure
SAPROT_SPECIALS = ("<cls>", "<pad>", "<eos>", "<unk>", "<mask>")
SAPROT_AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY#"
SAPROT_FOLDSEEK = "pynwrqhgdlvtmfsaeikc#"

# the processor classes this module runs, by name (transformers' PROCESSOR_MAPPING_NAMES): they take ``proteins``
_PROTEIN_PROCESSORS = frozenset({"EvollaProcessor"})
_PAD_TOKEN = "<|reserved_special_token_0|>"  # what EvollaProcessor sets as its text tokenizer's pad token
_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }} {% endfor %}"  # the stand-in's: the contents


def saprot_vocabulary() -> list[str]:
    """SaProt's tokens in id order: the specials, then each amino acid with each foldseek letter (446)."""
    return [*SAPROT_SPECIALS, *(a + f for a, f in itertools.product(SAPROT_AMINO_ACIDS, SAPROT_FOLDSEEK))]


@functools.lru_cache(maxsize=1)
def protein_tokenizer() -> Any:
    """transformers' ``EsmTokenizer`` over :func:`saprot_vocabulary` (it reads its vocabulary from a file only: one
    written to a temporary folder, removed at once)."""
    import tempfile
    from pathlib import Path

    from transformers import EsmTokenizer

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vocab.txt"
        path.write_text("\n".join(saprot_vocabulary()), encoding="utf-8")
        return EsmTokenizer(vocab_file=str(path))


def protein_processor(config: Any) -> Any:
    """The model type's processor (``EvollaProcessor``) at its defaults, with the SaProt tokenizer and the word-level
    stand-in for the text (its pad token under a free id)."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES, processor_class_from_name

    name = PROCESSOR_MAPPING_NAMES.get(str(getattr(config, "model_type", "")))
    if name not in _PROTEIN_PROCESSORS:
        raise ValueError(f"{getattr(config, 'model_type', '')} has no protein processor this module runs")
    text = family_tokenizer(config, Family(tokens={_PAD_TOKEN: ()}, placeholder=""))
    text.chat_template = _CHAT_TEMPLATE
    return processor_class_from_name(str(name))(protein_tokenizer=protein_tokenizer(), tokenizer=text)


def random_proteins(n: int, residues: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` proteins as the processor takes them: ``residues`` random amino acids and as many foldseek letters
    (SaProt's "#", unknown, left out: a real sequence and structure)."""
    rng = np.random.default_rng(seed)
    amino, fold = list(SAPROT_AMINO_ACIDS[:-1]), list(SAPROT_FOLDSEEK[:-1])
    return [{"aa_seq": "".join(rng.choice(amino, residues)), "foldseek": "".join(rng.choice(fold, residues))} for _ in range(n)]


def user_messages(n: int, words: int) -> list[list[dict[str, str]]]:
    """``n`` chats of one user message of ``words`` words (one stand-in token each)."""
    return [[{"role": "user", "content": " ".join(["a"] * words)}] for _ in range(n)]


def protein_inputs(config: Any, *, batch_size: int, residues: int, text_len: int, seed: int = 0) -> MediaInputs:
    """What the processor returns for ``batch_size`` prompts, each a protein of ``residues`` random residues and one
    user message of ``text_len`` words (see the module docstring)."""
    processor = protein_processor(config)
    made = processor(proteins=random_proteins(batch_size, residues, seed), messages_list=user_messages(batch_size, text_len))
    tensors = {k: v for k, v in made.items() if isinstance(v, torch.Tensor)}
    tokens, words = int(tensors["protein_input_ids"].shape[1]), int(tensors["input_ids"].shape[1])
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items())
    description = (f"1 protein of {residues} residues per prompt ({tokens} SaProt tokens with <cls> and <eos>, at most the "
                   f"processor's protein_max_length {processor.protein_max_length}) + {words} text tokens (at most its "
                   f"text_max_length {processor.text_max_length}); {type(processor).__name__} with transformers' EsmTokenizer "
                   f"over SaProt's vocabulary and a stand-in text tokenizer; {shapes}")
    return MediaInputs(tensors, description)


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of a model whose forward takes ``protein_input_ids`` and whose processor this module runs: a
    protein of ``seq_len`` residues and ``seq_len`` words of text per prompt (see the module docstring); else None."""
    import dataclasses
    import inspect

    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    config: Any = getattr(model, "config", None)
    if config is None or PROCESSOR_MAPPING_NAMES.get(str(getattr(config, "model_type", ""))) not in _PROTEIN_PROCESSORS:
        return None
    if "protein_input_ids" not in inspect.signature(model.forward).parameters:
        return None

    made = protein_inputs(config, batch_size=batch_size, residues=seq_len, text_len=seq_len)
    found = media_workload(model, made)
    assert isinstance(found, MediaWorkload)  # a decoder-only model's: it carries generate's decode

    # generate drops the all-ones attention_mask (transformers 5's GenerationMixin.generate): the adapters then build
    # their query mask from ones of the step's length (with the prompt's mask a decode step's query would be broadcast
    # to the whole context)
    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        with encoder_labelled(m):
            return generation.prefill(m, {k: v for k, v in x.items() if k != "labels"}, ones_mask=False)

    def decode(m: nn.Module, x: dict[str, torch.Tensor], max_new_tokens: int, before_last: Any) -> Any:
        with encoder_labelled(m):
            return generation.decode(m, {k: v for k, v in x.items() if k != "labels"}, max_new_tokens, before_last, ones_mask=False)

    # the adapters ask whether any protein is there (``protein_kv_attn_mask.any()``), a mask the model builds from
    # ``torch.ones``: constants known (KnownConstants); the first training step in full, as a media run's is
    return dataclasses.replace(found, infer=infer, decode=decode, context=with_ties(found.context, ties=False),
                               full_first_step=True)
