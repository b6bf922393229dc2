"""Matmul tutorial, basic kernel: bf16 [64, 128] @ [128, 512], the left operand passed transposed."""

import ml_dtypes
import numpy as np

RTOL = 1e-2


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    lhs = rng.random((64, 128)).astype(ml_dtypes.bfloat16)
    return [np.ascontiguousarray(lhs.T), rng.random((128, 512)).astype(ml_dtypes.bfloat16)]


def reference(lhs_t: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return (lhs_t.astype(np.float32).T @ rhs.astype(np.float32)).astype(ml_dtypes.bfloat16)
