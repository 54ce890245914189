"""Weight bytes of a GGUF model, exact, from its tensor infos.

A tensor of ``n`` elements of ggml type ``t`` holds ``n / block(t) * type_size(t)`` bytes (gguf-py's
``GGML_QUANT_SIZES``, the table llama.cpp's ``ggml_row_size`` uses: Q4_K is 144 bytes per 256
weights, Q6_K 210, IQ2_XXS 66...). gguf-py computes that size for each tensor when it parses the
header (:attr:`~estimator.gguf.header.TensorInfo.n_bytes`); here they are summed per file, per type
and per layer (``blk.N.*``), the split llama.cpp offloads by.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from estimator.gguf.header import GGUFHeader, TensorInfo

_LAYER = re.compile(r"^blk\.(\d+)\.")
INPUT_TENSORS = ("token_embd.", "token_embd_norm.", "per_layer_token_embd.")  # llama.cpp keeps the input layer on the CPU


@dataclass(frozen=True)
class Weights:
    """Tensor bytes of one model (all its split files): total, by ggml type, per repeating layer, input and output."""

    total: int
    by_type: dict[str, int]
    layers: tuple[int, ...]
    input: int  # token embeddings: llama.cpp's input layer, always on the CPU
    output: int  # everything else outside blk.N (output norm and head): llama.cpp's output layer
    layers_cuda: tuple[int, ...] = ()  # the same layers as ggml-cuda allocates them (cuda_bytes)
    output_cuda: int = 0  # the output layer on a GPU; with tied embeddings, a copy of token_embd too
    files: tuple[str, ...] = field(default=())


def layer_of(tensor: TensorInfo) -> int | None:
    match = _LAYER.match(tensor.name)
    return int(match.group(1)) if match else None


def weights(headers: Iterable[GGUFHeader]) -> Weights:
    """The weight bytes of the model whose files have ``headers`` (one for a single file, one per part of a split)."""
    headers = list(headers)
    by_type: dict[str, int] = {}
    layers: dict[int, int] = {}
    layers_cuda: dict[int, int] = {}
    input_bytes = output_bytes = output_cuda = 0
    tied_copy = 0
    has_head = False
    for header in headers:
        for tensor in header.tensors:
            by_type[tensor.ggml_type] = by_type.get(tensor.ggml_type, 0) + tensor.n_bytes
            layer = layer_of(tensor)
            if layer is not None:
                layers[layer] = layers.get(layer, 0) + tensor.n_bytes
                layers_cuda[layer] = layers_cuda.get(layer, 0) + cuda_bytes(tensor)
            elif tensor.name.startswith(INPUT_TENSORS):
                input_bytes += tensor.n_bytes
                if tensor.name == "token_embd.weight":
                    tied_copy = cuda_bytes(tensor)
            else:
                output_bytes += tensor.n_bytes
                output_cuda += cuda_bytes(tensor)
                has_head = has_head or tensor.name == "output.weight"
    if not has_head:  # tied embeddings: llama.cpp loads token_embd a second time as the output head (TENSOR_DUPLICATED)
        output_cuda += tied_copy
    n_layer = max(layers) + 1 if layers else 0
    return Weights(
        total=sum(by_type.values()),
        by_type=dict(sorted(by_type.items(), key=lambda kv: -kv[1])),
        layers=tuple(layers.get(i, 0) for i in range(n_layer)),
        input=input_bytes,
        output=output_bytes,
        layers_cuda=tuple(layers_cuda.get(i, 0) for i in range(n_layer)),
        output_cuda=output_cuda,
        files=tuple(h.filename for h in headers),
    )


MATRIX_ROW_PADDING = 512  # ggml-cuda: a quantized matrix is allocated as if its rows were a multiple of 512 values
_PLAIN = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"}


def cuda_bytes(tensor: TensorInfo) -> int:
    """The bytes ggml-cuda allocates for ``tensor`` (``ggml_backend_cuda_buffer_type_get_alloc_size``).

    A quantized tensor whose rows are not a multiple of 512 values gets room for one row's worth
    of padding, ``ggml_row_size(type, 512 - ne0 % 512)``; other tensors are their bytes.
    """
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    ne0 = tensor.shape[0] if tensor.shape else 0
    if tensor.ggml_type in _PLAIN or ne0 % MATRIX_ROW_PADDING == 0:
        return tensor.n_bytes
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[tensor.ggml_type]]
    return tensor.n_bytes + (MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING) // block * size
