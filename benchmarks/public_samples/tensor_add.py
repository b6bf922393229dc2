"""Tensor-addition tutorial: float16 a + b on [256, 1024], as the tutorial's own check draws it."""

import numpy as np

RTOL = 1e-3


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random((256, 1024)).astype(np.float16), rng.random((256, 1024)).astype(np.float16)]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
