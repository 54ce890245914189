"""CUDA's autocast policy, applied to CPU fakes.

Mixed precision runs the model under ``torch.autocast``; which ops run in 16 bits and which in
float32 is a per-device list compiled into PyTorch (``aten/src/ATen/autocast_mode.cpp``), and the
CUDA list differs from CPU's. The simulation's fakes are CPU tensors (the autograd engine needs a
real device for CUDA tensors), so on ``device="cuda"`` :func:`cuda_autocast_policy` registers, for
the duration of a simulation, Python kernels on the ``AutocastCPU`` dispatch key that apply
CUDA's policy to the ops where the two lists differ, then enters CPU autocast. What CUDA does and
CPU does not (``autocast_mode.cpp``, torch 2.14; :data:`CUDA_POLICY`):

- ``fp32``: ops whose 16-bit inputs are cast to float32 first (``layer_norm``, ``rms_norm``,
  ``group_norm``, ``pow``, ``exp``, ``log``, ``rsqrt``, ``softplus``, ``logsumexp``, ...), so their
  outputs are float32 (a GELU written with ``torch.pow``, as GPT-2's ``gelu_new``, keeps float32
  intermediates on CUDA and 16-bit ones on CPU);
- ``fp32_set_opt_dtype``: ``softmax``, ``log_softmax``, ``sum``, ``cumsum``, ``prod`` run with
  ``dtype=torch.float32`` (a float32 output computed from the 16-bit input, no float32 copy of it);
- ``lower_precision_fp``: the products CPU autocast leaves alone (``addmv``, ``addr``, ``mv``,
  ``einsum``, ``chain_matmul``, ``linalg_multi_dot``, ``convolution``, the RNN cells) are cast to
  the autocast dtype.
  (CUDA's weight-cast cache applies to these too; here they are cast on each use.)
- none: ``cross_entropy_loss`` (in CPU's float32 list: its input is cast first) decomposes as
  on CUDA, where ``log_softmax`` runs in the input's dtype and ``nll_loss`` casts its result.
- ``promote``: ``addcdiv``, ``addcmul``, ``atan2``, ``cross``, ``dot``, ``vdot``,
  ``tensordot``, ``scatter_add``, ``index_put``: inputs promoted to the widest floating dtype.

``tests/test_cuda_autocast.py`` checks :data:`CUDA_POLICY` against PyTorch's own CUDA autocast test
lists (``torch.testing._internal.autocast_test_lists``) and the output dtypes against fake CUDA
tensors under real CUDA autocast (which runs on a machine without a GPU as long as no backward is
run).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map

__all__ = ["CUDA_POLICY", "cuda_autocast_policy"]

# aten overload -> CUDA's policy, where it differs from CPU's (autocast_mode.cpp, torch 2.14).
CUDA_POLICY: dict[str, str] = {
    **{op: "fp32" for op in (
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
        "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
        "native_layer_norm", "group_norm", "rms_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
        "cosine_similarity", "kl_div", "huber_loss", "dist", "pdist", "cdist", "renorm", "logsumexp",
    )},
    **{op: "fp32_set_opt_dtype" for op in (
        "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum", "sum", "sum.dim_IntList",
        "linalg_vector_norm", "linalg_matrix_norm",
    )},
    **{op: "lower_precision_fp" for op in (
        "addmv", "addr", "mv", "einsum", "chain_matmul", "linalg_multi_dot", "convolution", "_convolution",
        "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell",
    )},
    # CPU casts cross_entropy's input to float32 first; CUDA has no policy for it: its decomposition
    # runs log_softmax in the input's dtype (Loss.cpp passes it explicitly) and nll_loss casts that.
    "cross_entropy_loss": "none",
    **{op: "promote" for op in (
        "addcdiv", "addcmul", "atan2", "cross", "dot", "vdot", "tensordot", "scatter_add", "index_put",
    )},
}

_LOW = (torch.float16, torch.bfloat16)


def _eligible(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def _cast(dtype: torch.dtype, args: Any) -> Any:
    return tree_map(lambda t: t.to(dtype) if _eligible(t) and t.dtype != dtype else t, args)


def _with_float32_dtype(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call with ``dtype=torch.float32`` where the caller gave none (``set_opt_dtype``)."""
    names = [a.name for a in op._schema.arguments]
    if "dtype" not in names:
        return args, kwargs
    i = names.index("dtype")
    if i < len(args):
        return (args if args[i] is not None else (*args[:i], torch.float32, *args[i + 1:])), kwargs
    return args, (kwargs if kwargs.get("dtype") is not None else {**kwargs, "dtype": torch.float32})


def _kernel(op: Any, policy: str, low: torch.dtype) -> Callable[..., Any]:
    below = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def run(*args: Any, **kwargs: Any) -> Any:
        if policy == "none":  # the composite's own decomposition, its inner ops autocast as usual
            return op.decompose(*args, **kwargs)
        with torch._C._ExcludeDispatchKeyGuard(below):
            if policy == "fp32":
                return op(*_cast(torch.float32, args), **_cast(torch.float32, kwargs))
            if policy == "lower_precision_fp":
                return op(*_cast(low, args), **_cast(low, kwargs))
            if policy == "fp32_set_opt_dtype":
                if args and _eligible(args[0]):
                    args, kwargs = _with_float32_dtype(op, args, kwargs)
                return op(*args, **kwargs)
            tensors = [t for t in [*args, *kwargs.values()] if _eligible(t)]
            widest = max((t.dtype for t in tensors), key=lambda d: torch.finfo(d).bits, default=None)
            return op(*args, **kwargs) if widest is None else op(*_cast(widest, args), **_cast(widest, kwargs))

    return run


@contextlib.contextmanager
def cuda_autocast_policy(dtype: torch.dtype) -> Iterator[None]:
    """CPU autocast in ``dtype`` with CUDA's policy for the ops of :data:`CUDA_POLICY`."""
    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():  # "overriding a previously registered kernel": that is the point
            warnings.simplefilter("ignore")
            for name, policy in CUDA_POLICY.items():
                packet_name, _, overload = name.partition(".")
                op = getattr(getattr(torch.ops.aten, packet_name), overload or "default")
                library.impl(name, _kernel(op, policy, dtype), "AutocastCPU")
        with torch.autocast("cpu", dtype=dtype):
            yield
    finally:
        library._destroy()
