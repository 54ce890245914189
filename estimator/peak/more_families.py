"""More vision-language processor families (see :class:`estimator.peak.processors.Family`): the model types
whose prompts are built by their processor with a recipe of their own (encoder-decoder captioners, Q-Former
models, GLM-V, and others), kept apart from the LLaVA/Qwen/Idefics families of :mod:`estimator.peak.processors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from estimator.peak.processors import Family

__all__ = ["more_families"]


def more_families() -> dict[str, Family]:
    """model_type -> its processor family (filled as each is simulated and checked)."""
    return {}
