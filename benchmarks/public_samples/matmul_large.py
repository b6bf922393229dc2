"""Matmul tutorial, tiled kernels: bf16 [4096, 1024] @ [1024, 2048], the left operand passed transposed
(the tutorial's torch check); matmul_small.py holds the basic kernel's size."""

import ml_dtypes
import numpy as np

RTOL = 1e-2


def transposed_inputs(rng: np.random.Generator, m: int, k: int, n: int) -> list[np.ndarray]:
    """lhs^T [k, m] and rhs [k, n], bf16 in [0, 1) (torch.rand in the tutorial)."""
    lhs = rng.random((m, k)).astype(ml_dtypes.bfloat16)
    return [np.ascontiguousarray(lhs.T), rng.random((k, n)).astype(ml_dtypes.bfloat16)]


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return transposed_inputs(rng, 4096, 1024, 2048)


def reference(lhs_t: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return (lhs_t.astype(np.float32).T @ rhs.astype(np.float32)).astype(ml_dtypes.bfloat16)
