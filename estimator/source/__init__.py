"""Stage 1, where a model comes from: references, Hub access, resolution to a config, limits, the
bundled catalog and the checkpoint's stored tensors. Imports only the request types below it."""
