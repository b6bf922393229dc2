"""Contributed matmul: float16 A^T @ B with A of [1024, 4096] and B of [1024, 2048] in [0, 1)
(the kernel's own check)."""

import numpy as np

RTOL = 1e-2


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random((1024, 4096)).astype(np.float16), rng.random((1024, 2048)).astype(np.float16)]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float32).T @ b.astype(np.float32)).astype(np.float16)
