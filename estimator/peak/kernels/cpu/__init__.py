"""CPU kernels' hidden buffers: oneDNN (convolution, bfloat16 gemm, depthwise), PyTorch's CPU flash attention, the ISA they depend on; workspace is the one model every path calls."""
