"""Matmul tutorial, tiled kernels: bf16 [4096, 1024] @ [1024, 2048], the left operand passed transposed
(the tutorial's torch check)."""

import ml_dtypes
import numpy as np

RTOL = 1e-2


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    lhs = rng.random((4096, 1024)).astype(ml_dtypes.bfloat16)
    return [np.ascontiguousarray(lhs.T), rng.random((1024, 2048)).astype(ml_dtypes.bfloat16)]


def reference(lhs_t: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return (lhs_t.astype(np.float32).T @ rhs.astype(np.float32)).astype(ml_dtypes.bfloat16)
