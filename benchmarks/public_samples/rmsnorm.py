"""RMSNorm tutorial: a * rsqrt(mean(a^2, row)) * g on [128, 512] float32 (the tutorial's check)."""

import numpy as np

RTOL = 1e-5


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random((128, 512)).astype(np.float32), rng.random(512).astype(np.float32)]


def reference(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    a64 = a.astype(np.float64)
    return (a64 / np.sqrt(np.mean(a64 * a64, axis=1, keepdims=True)) * g).astype(np.float32)
