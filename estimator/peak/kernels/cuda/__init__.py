"""CUDA's choices on CPU fakes: SDPA kernels, the autocast policy, dropout, and the caching allocator replayed over the trace."""
