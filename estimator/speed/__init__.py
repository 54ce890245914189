"""How fast: per-op cost from the simulation's trace (``cost.py``), hardware as data, and a readable time model."""
