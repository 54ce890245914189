"""One ATen op of the simulation's trace -> one :class:`~estimator.speed.cost.OpCost`, or nothing.

**Which ops are kernels.** An op launches a kernel when it writes device memory: one of its outputs
lives in a storage none of its inputs has (a new result), or its schema marks an argument as
written (``add_``, ``copy_``, ``_foreach_mul_``, ``out=``). Views and reshapes (their outputs share
an input's storage), metadata ops (``set_``, ``resize_``) and bare allocations (``empty``,
``empty_strided``, ``new_empty``: the allocator, no kernel) move nothing and are not counted.

**Bytes.** What each kernel reads and writes: every distinct tensor argument is read and every new
output and written argument written, each by the bytes its view addresses (the product of its sizes
over the dimensions with a non-zero stride, times the element size, capped at its storage: an
expanded tensor is read once, a slice of the KV cache only as far as it reaches). An in-place op
reads and writes its argument once each; a write-only op (``copy_``, ``fill_``, ``zero_``, ``out=``)
does not read what it overwrites. Gathers (``embedding``, ``index_select``, ``index.Tensor``,
``gather``) read the rows they return, not the whole table (an embedding lookup of one token reads
one row); scatters into an existing tensor (``index_copy_``, ``index_put_``, ``scatter_``) read and
write as much of it as the values they put. A fused kernel (flash / memory-efficient attention, a
quantized matmul that dequantizes in-kernel) is one op: its traffic is its arguments and results,
not its unfused math's intermediates. A grouped matmul over MoE experts (``_grouped_mm``, transformers'
default experts implementation) reads only the experts its rows are routed to: at most ``min(rows,
experts)`` of them, exactly the top-k of one token at batch 1 decode (an upper bound otherwise, reached
when the tokens are many).

**FLOPs.** ``torch.utils.flop_counter``'s registry (matmuls, convolutions, SDPA and their
backwards; a multiply-add counts 2), called exactly as ``FlopCounterMode`` calls it. Formulas it
lacks, named in ``OpCost.formula`` (:data:`OUR_FORMULAS`): PyTorch's CPU flash attention and its
backward (flop_counter counts them as 0: with the same SDPA formulas it uses for the CUDA kernels),
``_grouped_mm`` (fused MoE experts, and transformers' fallback op for it), ``_int_mm`` / ``_weight_int8pack_mm`` / ``_weight_int4pack_mm``
(quantized matmuls), bitsandbytes' ``gemm_4bit``, ``gemv_4bit`` and ``int8_linear_matmul``, ``mv``,
``addmv``, ``dot``. Element-wise ops, reductions, softmax and norms
count 0 FLOPs, as in flop_counter (they are bandwidth-bound; their FLOPs are under 1% of a
transformer's matmul FLOPs), so a training step's FLOPs are those of the ``6 * params * tokens``
convention and model FLOPs utilisation is comparable with published figures.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils import flop_counter
from torch.utils._pytree import tree_leaves

from estimator.speed.cost import OpCost

__all__ = ["FLOP_COUNTER", "OUR_FORMULAS", "addressed_bytes", "op_cost"]

FLOP_COUNTER = "flop_counter"

aten = torch.ops.aten

# Allocations without a kernel (the caching allocator hands out a block) and metadata-only ops.
_NOT_KERNELS = frozenset({
    aten.empty, aten.empty_strided, aten.empty_like, aten.new_empty, aten.new_empty_strided,
    aten.resize_, aten.set_, aten.as_strided_, aten.lift_fresh, aten._local_scalar_dense,
})

# In-place ops that overwrite their written argument without reading it.
_WRITE_ONLY = frozenset({
    aten.copy_, aten.fill_, aten.zero_, aten.normal_, aten.uniform_, aten.bernoulli_, aten.random_,
    aten.exponential_, aten.geometric_, aten.log_normal_, aten.cauchy_,
})

# Gathers: the source (first argument) is read as far as the rows they return; the indices in full.
_GATHERS = frozenset({aten.embedding, aten.index_select, aten.index, aten.gather})

# Scatters into an existing tensor: the written argument is touched only where the values go.
_SCATTERS = {aten.index_copy_: "source", aten.index_put_: "values", aten.scatter_: "src", aten.index_add_: "source"}


def _shape(t: Any) -> Any:
    return t.shape if isinstance(t, torch.Tensor) else t


def _sdpa_cpu(q: Any, k: Any, v: Any, *_args: Any, **_kwargs: Any) -> int:
    return int(flop_counter.sdpa_flop_count(_shape(q), _shape(k), _shape(v)))


def _sdpa_cpu_backward(grad_out: Any, q: Any, k: Any, v: Any, *_args: Any, **_kwargs: Any) -> int:
    return int(flop_counter.sdpa_backward_flop_count(_shape(grad_out), _shape(q), _shape(k), _shape(v)))


def _grouped_mm(a: Any, b: Any, *_args: Any, **_kwargs: Any) -> int:
    """``_grouped_mm(a, b, offs)``: each row of a 2-D ``a`` meets one group of a 3-D ``b`` (MoE experts):
    ``2 * rows * k * n``; 3-D x 3-D is a batched matmul."""
    sa, sb = _shape(a), _shape(b)
    if len(sa) == 2 and len(sb) == 3:
        return 2 * sa[0] * sa[1] * sb[-1]
    if len(sa) == 3 and len(sb) == 3:
        return 2 * sa[0] * sa[1] * sa[2] * sb[-1]
    if len(sa) == 2 and len(sb) == 2:  # 2-D x 2-D: groups split the shared k
        return 2 * sa[0] * sa[1] * sb[-1]
    return 2 * math.prod(sa) * sb[-1]


def _mm_like(a: Any, b: Any, *_args: Any, **_kwargs: Any) -> int:
    """``a (m, k) @ b``: ``b`` is (k, n), or (n, k) packed (int8/int4 weight-only kernels), so n = the
    output's last dim, given by the caller through ``out_val``."""
    out = _kwargs.get("out_val")
    n = out.shape[-1] if isinstance(out, torch.Tensor) else _shape(b)[-1]
    sa = _shape(a)
    return 2 * math.prod(sa) * n


def _mv(a: Any, v: Any, *_args: Any, **_kwargs: Any) -> int:
    return 2 * math.prod(_shape(a))


def _addmv(_bias: Any, a: Any, v: Any, *_args: Any, **_kwargs: Any) -> int:
    return 2 * math.prod(_shape(a))


def _dot(a: Any, _b: Any, *_args: Any, **_kwargs: Any) -> int:
    return 2 * math.prod(_shape(a))


_GROUPED = frozenset({aten._grouped_mm})

# Formulas flop_counter lacks: op packet -> (our formula's name, the formula).
OUR_FORMULAS: dict[Any, tuple[str, Callable[..., int]]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: ("sdpa (cpu flash)", _sdpa_cpu),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: ("sdpa backward (cpu flash)", _sdpa_cpu_backward),
    aten._grouped_mm: ("grouped_mm", _grouped_mm),
    aten._int_mm: ("int_mm", _mm_like),
    aten._weight_int8pack_mm: ("int8 weight-only mm", _mm_like),
    aten._weight_int4pack_mm: ("int4 weight-only mm", _mm_like),
    aten.mv: ("mv", _mv),
    aten.addmv: ("addmv", _addmv),
    aten.dot: ("dot", _dot),
}


# Custom ops of libraries that may not be imported (looked up by name): transformers' grouped matmul for MoE
# experts where torch's is unavailable (transformers.integrations.moe), and its backward (grad input and weight);
# bitsandbytes' quantized matmuls (QLoRA's ``gemm_4bit``: on CUDA one op, a fused kernel reading the packed weight
# or, past an arch- and shape-dependent threshold, a dequantize + cuBLAS inside the op: counted as the fused kernel).
def _packed_4bit(a: Any, _packed: Any, shape_b: Any, *_args: Any, **_kwargs: Any) -> int:
    """bitsandbytes' 4-bit matmuls ``A (..., K) @ dequantize(B).T``, ``B`` (N, K) packed: ``2 * A.numel() * N``."""
    return 2 * math.prod(_shape(a)) * int(shape_b[0])


def _int8_linear(a: Any, b: Any, *_args: Any, **_kwargs: Any) -> int:
    """bitsandbytes' ``int8_linear_matmul(A (..., K), B (N, K))``: ``2 * A.numel() * N``."""
    return 2 * math.prod(_shape(a)) * _shape(b)[0]


_BY_NAME: dict[str, tuple[str, Callable[..., int]]] = {
    "transformers.grouped_mm_fallback": ("grouped_mm", _grouped_mm),
    "transformers.grouped_mm_fallback_backward": ("grouped_mm backward", lambda a, b, *r, **k: 2 * _grouped_mm(a, b)),
    "bitsandbytes.gemm_4bit": ("gemm_4bit", _packed_4bit),
    "bitsandbytes.gemv_4bit": ("gemv_4bit", _packed_4bit),
    "bitsandbytes.int8_linear_matmul": ("int8_linear_matmul", _int8_linear),
}


def flops_of(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[int, str]:
    """The op's FLOPs and the formula's name: flop_counter's registry, called as ``FlopCounterMode`` calls
    it, else :data:`OUR_FORMULAS`, else 0 (element-wise ops, as flop_counter counts them)."""
    packet = func._overloadpacket
    formula = flop_counter.flop_registry.get(packet)
    if formula is not None:
        return int(formula(*args, **kwargs, out_val=out)), FLOP_COUNTER
    ours = OUR_FORMULAS.get(packet) or _BY_NAME.get(str(packet))
    if ours is not None:
        name, fn = ours
        return int(fn(*args, **kwargs, out_val=out)), name
    return 0, FLOP_COUNTER


def _experts_not_read(a: torch.Tensor, b: torch.Tensor) -> int:
    """A grouped matmul of rows ``a`` (R, K) against experts ``b`` (E, K, N) reads only the experts some row is
    routed to: at most ``min(R, E)`` of the E (exactly the top-k experts of a single token); the bytes of the
    others."""
    if a.dim() != 2 or b.dim() != 3:
        return 0
    experts = b.shape[0]
    touched = min(a.shape[0], experts)
    return addressed_bytes(b) * (experts - touched) // experts


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        return int(t.untyped_storage()._cdata)
    except (NotImplementedError, RuntimeError):  # sparse, nested: no plain storage
        return None


def addressed_bytes(t: torch.Tensor) -> int:
    """The bytes a kernel touches reading or writing all of ``t``: its sizes over the dimensions with a
    non-zero stride (an expanded dimension is one element), times the element size, at most its storage."""
    t = getattr(t, "_local_tensor", t)
    elements = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            elements *= size
    if t.numel() == 0:
        return 0
    nbytes = elements * t.element_size()
    try:
        return min(nbytes, t.untyped_storage().nbytes())
    except (NotImplementedError, RuntimeError):
        return nbytes


@functools.cache
def _written(func: Any) -> tuple[frozenset[int], frozenset[str]]:
    """The positions and keyword names of the arguments the op's schema marks as written (``Tensor(a!)``)."""
    positions, names = set(), set()
    for i, arg in enumerate(func._schema.arguments):
        info = arg.alias_info
        if info is not None and info.is_write:
            positions.add(i)
            names.add(arg.name)
    return frozenset(positions), frozenset(names)


def _tensors(x: Any) -> Iterator[torch.Tensor]:
    for leaf in tree_leaves(x):
        if isinstance(leaf, torch.Tensor):
            yield leaf


def _view_key(t: torch.Tensor) -> tuple[Any, ...]:
    return (_storage_key(t), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _dtype(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> str:
    for t in (*inputs, *outputs):
        if t.is_floating_point():
            return str(t.dtype).removeprefix("torch.")
    return str((inputs or outputs)[0].dtype).removeprefix("torch.") if inputs or outputs else ""


def _argument(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    """The argument ``name`` of the op's schema, given by keyword or by position (None where absent)."""
    if name in kwargs:
        return kwargs[name]
    names = [a.name for a in func._schema.arguments]
    i = names.index(name) if name in names else len(args)
    return args[i] if i < len(args) else None


def op_cost(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> OpCost | None:
    """The cost of one op the simulation ran, or None where it is no kernel (see the module docstring)."""
    packet = getattr(func, "_overloadpacket", None)
    if packet is None or packet in _NOT_KERNELS:
        return None
    positions, names = _written(func)
    written_args: list[torch.Tensor] = []
    read_args: list[torch.Tensor] = []
    for i, arg in enumerate(args):
        (written_args if i in positions else read_args).extend(_tensors(arg))
    write_only = packet in _WRITE_ONLY
    out_kwargs: list[torch.Tensor] = []
    for name, arg in kwargs.items():
        if name in names:
            (out_kwargs if name == "out" else written_args).extend(_tensors(arg))
        else:
            read_args.extend(_tensors(arg))
    in_storages = {_storage_key(t) for t in (*read_args, *written_args, *out_kwargs)}
    new_outputs = [t for t in _tensors(out) if _storage_key(t) not in in_storages]
    if not new_outputs and not written_args and not out_kwargs:
        return None  # a view, a reshape or a metadata op
    reads = {_view_key(t): t for t in read_args}
    if not write_only:
        reads.update({_view_key(t): t for t in written_args})
    writes = {_view_key(t): t for t in (*new_outputs, *written_args, *out_kwargs)}
    bytes_read = sum(addressed_bytes(t) for t in reads.values())
    bytes_written = sum(addressed_bytes(t) for t in writes.values())
    if packet in _GATHERS and args and isinstance(args[0], torch.Tensor):
        source = args[0]  # read as far as the rows returned
        bytes_read += min(sum(addressed_bytes(t) for t in new_outputs), addressed_bytes(source)) - addressed_bytes(source)
    scatter = _SCATTERS.get(packet)
    if scatter is not None and args and isinstance(args[0], torch.Tensor):
        values = _argument(func, args, kwargs, scatter)
        if isinstance(values, torch.Tensor):
            full, part = addressed_bytes(args[0]), min(addressed_bytes(values), addressed_bytes(args[0]))
            bytes_read -= full - part
            bytes_written -= full - part
    if packet in _GROUPED and len(args) >= 2 and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor):
        bytes_read -= _experts_not_read(args[0], args[1])
    flops, formula = flops_of(func, args, kwargs, out)
    return OpCost(str(func), flops, bytes_read, bytes_written, _dtype(read_args + written_args, new_outputs), formula)
