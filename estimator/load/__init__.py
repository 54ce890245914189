"""Stage 4, the load question: one row per dtype from checkpoint headers, the meta build, pipelines
(diffusers, sentence-transformers) or GGUF repos."""
