"""The padding mask of linear-attention and SSM layers under fake tensors (``estimator.peak.fakes.shims.unpadded_masks``).

transformers' ``create_recurrent_attention_mask`` returns None for an all-ones 2-D mask (the layer then multiplies
nothing) but a fake tensor counts as tracing, where it always returns the mask. Under the shim a fake mask gets the
answer transformers gives the real one: the truth is transformers' own function on the real mask.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from transformers import masking_utils

from estimator.peak.fakes.known_values import know
from estimator.peak.fakes.shims import unpadded_masks


@pytest.mark.parametrize("padded", [False, True])
def test_fake_mask_answered_as_the_real_one(padded: bool) -> None:
    real = torch.ones(2, 6, dtype=torch.long)
    if padded:
        real[0, :2] = 0
    embeds, other = torch.zeros(2, 6, 8), real.clone()
    truth = masking_utils.create_recurrent_attention_mask(None, embeds, real)  # type: ignore[arg-type]
    with FakeTensorMode() as mode:
        fake, fake_embeds = mode.from_tensor(real), mode.from_tensor(embeds)
        know(fake, real)
        unanswered = masking_utils.create_recurrent_attention_mask(None, fake_embeds, fake)  # type: ignore[arg-type]
        with unpadded_masks():
            answered = masking_utils.create_recurrent_attention_mask(None, fake_embeds, fake)  # type: ignore[arg-type]
            unknown = masking_utils.create_recurrent_attention_mask(None, fake_embeds, mode.from_tensor(other))  # type: ignore[arg-type]
    assert unanswered is not None  # transformers alone: a fake mask is always applied
    assert (answered is None) == (truth is None) == (not padded)
    if padded:
        assert answered is not None and truth is not None and tuple(answered.shape) == tuple(truth.shape)
    assert unknown is None  # a mask of unknown values: all ones, as unpadded_masks answers SDPA's question
    assert masking_utils.create_recurrent_attention_mask.__name__ == "create_recurrent_attention_mask"  # undone
    assert masking_utils.LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING["linear_attention"] is masking_utils.create_recurrent_attention_mask
