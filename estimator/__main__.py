"""``python -m estimator`` is the ``estimate-memory`` command."""

from __future__ import annotations

from estimator.cli import run

if __name__ == "__main__":
    run()
