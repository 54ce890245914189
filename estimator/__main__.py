"""``python -m estimator`` is the ``estimate-memory`` command."""

from __future__ import annotations

import sys

from estimator.cli import main

if __name__ == "__main__":
    sys.exit(main())
