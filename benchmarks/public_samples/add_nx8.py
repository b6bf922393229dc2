"""add_kernel_nx8x128x512 (reference tutorial kernel): a + b on [n, 8, 128, 512] float32, one program
per leading index, n_elements the count of elements to add."""

import numpy as np

N = 2
SHAPE = (N, 8, 128, 512)
GRID = (N,)
KERNEL_ARGS = {"n_elements": int(np.prod(SHAPE))}


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(SHAPE).astype(np.float32), rng.standard_normal(SHAPE).astype(np.float32)]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b
