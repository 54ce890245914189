"""Row dtypes as torch dtypes (float8 rows are built in bfloat16, then their Linear layers swapped)."""

from __future__ import annotations

import torch

from estimator.options import DType

TORCH_DTYPES: dict[DType, torch.dtype] = {
    DType.FLOAT32: torch.float32,
    DType.FLOAT16: torch.float16,
    DType.BFLOAT16: torch.bfloat16,
    DType.FLOAT8: torch.bfloat16,
}


def torch_dtype(dtype: DType) -> torch.dtype:
    return TORCH_DTYPES[dtype]
