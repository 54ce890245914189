"""Fake-tensor stand-ins: ops whose fake kernel is stricter than the real one (shims), the known values of the few small tensors a model asks about (known_*), fresh LRU caches per step."""
