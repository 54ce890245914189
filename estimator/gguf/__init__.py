"""GGUF files as llama.cpp runs them: the header read by HTTP Range requests and parsed with gguf-py
(``header.py``), exact weight bytes per ggml tensor type (``weights.py``), the KV cache llama.cpp
allocates for a context length and cache type (``kv_cache.py``), its compute and output buffers
(``compute.py``) and the split of layers between a GPU and the CPU (``offload.py``)."""
