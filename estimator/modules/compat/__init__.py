"""Drop-in replacements for the seed tools: change one import, keep the call, get correct numbers.

- ``from estimator.modules.compat import SizeEstimator`` for ``from pytorch_modelsize import SizeEstimator``
- ``from estimator.modules.compat import summary`` for ``from torchsummary import summary``

Both keep the old signatures and return types (that is their point; see the project's guide) and
fill them from :func:`~estimator.modules.estimate.estimate_module` and :func:`~estimator.modules.summary.summarize`.
Where and why their numbers differ from the old tools: ``docs/modules.md``.
"""

from __future__ import annotations

from estimator.modules.compat.sizeestimator import SizeEstimator
from estimator.modules.compat.torchsummary import summary, summary_string

__all__ = ["SizeEstimator", "summary", "summary_string"]
