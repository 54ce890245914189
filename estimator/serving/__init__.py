"""Serving: KV bytes per token per architecture and a vLLM-style memory plan (``--mode serving``)."""
