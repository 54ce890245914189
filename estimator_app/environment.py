"""Process settings the app needs before ``huggingface_hub`` or ``transformers`` is imported.

Imported first by ``app.py``. A Space's own ``HF_TOKEN`` (or a login on the machine) must never be
sent on a visitor's behalf: with ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` only a token passed explicitly
(the one the visitor typed, or their OAuth token) is sent.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
