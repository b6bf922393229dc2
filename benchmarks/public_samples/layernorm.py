"""LayerNorm tutorial: (x - mean) / sqrt(var + eps) * gamma + beta over rows, on the tutorial's
300 x 1000 example (ragged in both dimensions, so its masks matter)."""

import numpy as np

ROWS, COLS, EPS = 300, 1000, 1e-5
RTOL = 1e-4
KERNEL_ARGS = {"epsilon": EPS}


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random((ROWS, COLS)).astype(np.float32), rng.random(COLS).astype(np.float32),
            rng.random(COLS).astype(np.float32)]


def reference(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    var = x64.var(axis=1, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + EPS) * gamma + beta).astype(np.float32)
