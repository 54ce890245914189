"""GLM-Image and GLM-5-Next fed images (fast: the tiny cases of ``testkit.multimodal_cases``, one forward each).

- GLM-Image writes its VQ codes into ``input_ids`` and searches them for its image start / end ids: under fake
  tensors the search is answered by :mod:`estimator.peak.fakes.known_bounds` (the codes lie below the special ids), and
  the 3-D positions the language model gets are known and equal the real run's; the coverage bench's small config
  keeps the codes below the special ids as the checkpoints do (:func:`testkit.shrink_fit._vq_codes`).
- GLM-5-Next's indexer splits the attention mask back out of the keys it packs and caches
  (:mod:`estimator.peak.fakes.known_constants`): its pools are known in the prefill and in a decode step over the cache,
  equal to the real run's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _disable_current_modes

from estimator.peak.fakes.known_bounds import KnownBounds
from estimator.peak.fakes.known_constants import KnownConstants
from estimator.peak.fakes.known_values import KnownValues, known_value, know
from estimator.peak.fakes.shims import StandIns
from estimator.peak.inputs.prompts.processors import Media, media_inputs
from testkit.multimodal_cases import MM_CASES


def _inputs(name: str, images: int) -> dict[str, torch.Tensor]:
    case = MM_CASES[name]
    made = media_inputs(case.make_config(), Media(images=images, image_size=case.image_size), batch_size=1, text_len=8)
    tensors = dict(made.tensors)
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return tensors


def _fakes(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fakes of ``tensors`` (inside a fake mode); the integer ones known, the pixels not (as the estimator makes them)."""
    out = {}
    for k, v in tensors.items():
        out[k] = torch.empty(v.shape, dtype=v.dtype)
        if not v.dtype.is_floating_point:
            know(out[k], v)
    return out


def _captured(run: Callable[[], Any], module: torch.nn.Module, name: str) -> list[Any]:
    seen: list[Any] = []
    handle = module.register_forward_pre_hook(lambda _m, _a, kwargs: seen.append(kwargs.get(name)), with_kwargs=True)
    try:
        run()
    finally:
        handle.remove()
    return seen


def _glm_image_positions(fake: bool, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    case = MM_CASES["glm_image"]
    torch.manual_seed(0)
    if not fake:
        model: Any = case.build_on("cpu").eval()
        with torch.no_grad():
            return _captured(lambda: model(**tensors), model.model.language_model, "position_ids")[0]
    with FakeTensorMode(), KnownValues(), KnownBounds():
        model = case.build_on("cpu").eval()  # weights made as fakes
        x = _fakes(tensors)
        with torch.no_grad():
            positions = _captured(lambda: model(**x), model.model.language_model, "position_ids")[0]
        known = known_value(positions)
    assert known is not None, "the positions built from the search are not known"
    return known


def test_glm_image_search_for_its_image_ends_is_known_as_the_real_run_finds_it() -> None:
    for images in (1, 2):
        tensors = _inputs("glm_image", images)
        real = _glm_image_positions(False, tensors)
        assert torch.equal(_glm_image_positions(True, tensors), real)
        # the positions do follow the images: a 2-D grid (height and width rows differ) inside the prompt
        assert not torch.equal(real[1], real[2])


def test_bounded_codes_answer_equalities_outside_their_range_only() -> None:
    ids = torch.tensor([[9, 7, 7, 8, 5]])
    with FakeTensorMode(), KnownValues(), KnownBounds():
        x = know(torch.empty(1, 5, dtype=torch.long), ids)
        codes = torch.empty(2, 6).argmin(dim=1)  # two codes in [0, 6)
        written = x.masked_scatter(x == 7, codes)
        end, inside = written[0] == 8, written[0] == 5
        found, unknown = known_value(end), known_value(inside)
        where = torch.where(end)[0].tolist()
    assert found is not None and found.tolist() == [False, False, False, True, False]
    assert unknown is None  # 5 could be a code: unknown
    assert where == [3]


def test_shrunk_glm_image_keeps_its_codes_below_the_special_ids() -> None:
    from testkit.coverage import small_config

    small, _name, model, level, reason = small_config("glm_image")
    assert small is not None and model is not None, reason
    codes = small["vq_config"]["num_embeddings"]
    special = [small["image_start_token_id"], small["image_end_token_id"], small["image_token_id"],
               small["text_config"]["pad_token_id"], small["text_config"]["eos_token_id"]]
    assert codes <= min(special) and max(special) < small["text_config"]["vocab_size"], (codes, special)
    assert model.vqmodel.quantize.embedding.num_embeddings == codes


def _glm5_pools(fake: bool, tensors: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The indexer's pool indices in the prefill and in one decode step over its cache."""
    from transformers.models.glm5_next import modeling_glm5_next as glm5

    case = MM_CASES["glm5_next"]
    seen: list[torch.Tensor] = []
    original = glm5.Glm5NextTextIndexer.get_pooled_states

    def spy(self: Any, packed_states: torch.Tensor) -> Any:
        out = original(self, packed_states)
        seen.append(out[1])
        return out

    def run(model: Any, x: dict[str, torch.Tensor], ones: Callable[[tuple[int, ...]], torch.Tensor]) -> None:
        with torch.no_grad():
            out = model(**x, use_cache=True)
            ids = x["input_ids"]
            model(input_ids=ids[:, -1:], attention_mask=ones((1, ids.shape[1] + 1)), past_key_values=out.past_key_values,
                  use_cache=True)

    torch.manual_seed(0)
    glm5.Glm5NextTextIndexer.get_pooled_states = spy  # type: ignore[method-assign]
    try:
        if not fake:
            run(case.build_on("cpu").eval(), tensors, lambda shape: torch.ones(shape, dtype=torch.long))
            return seen
        with FakeTensorMode(), StandIns(), KnownValues(), KnownConstants():  # StandIns: grouped_mm's fp32 meta kernel
            model = case.build_on("cpu").eval()

            def ones(shape: tuple[int, ...]) -> torch.Tensor:
                with _disable_current_modes():
                    real = torch.ones(shape, dtype=torch.long)
                return know(torch.empty(shape, dtype=torch.long), real)

            run(model, _fakes(tensors), ones)
            known = [known_value(t) for t in seen]
    finally:
        glm5.Glm5NextTextIndexer.get_pooled_states = original  # type: ignore[method-assign]
    assert all(k is not None for k in known), "the indexer's pools are not known"
    return [k for k in known if k is not None]


def test_glm5_next_indexer_pools_are_known_as_the_real_run_builds_them() -> None:
    tensors = _inputs("glm5_next", 1)
    real = _glm5_pools(False, tensors)
    fake = _glm5_pools(True, tensors)
    assert len(real) == len(fake) == 2  # one indexed layer: prefill, decode
    for r, f in zip(real, fake, strict=True):
        assert torch.equal(r, f)
