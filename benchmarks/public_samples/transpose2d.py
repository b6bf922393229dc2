"""transpose2d tutorial: every row of [P, X*Y] int8 holds an X x Y matrix, transposed to Y x X."""

import numpy as np

P, X, Y = 5, 3, 4
KERNEL_ARGS = {"shape2D": (X, Y)}


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.integers(-100, 100, size=(P, X * Y), dtype=np.int8)]


def reference(a: np.ndarray) -> np.ndarray:
    return np.transpose(a.reshape(P, X, Y), (0, 2, 1)).reshape(P, X * Y)
