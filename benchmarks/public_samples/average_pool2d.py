"""AveragePool2D tutorial: a float16 C x H x W image pooled over square windows of pool_size."""

import numpy as np

C, H, W, POOL = 2, 6, 6, 2
RTOL = 2e-3
KERNEL_ARGS = {"pool_size": POOL}


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [(rng.random((C, H, W)) * 16).astype(np.float16)]


def reference(image: np.ndarray) -> np.ndarray:
    windows = image.astype(np.float32).reshape(C, H // POOL, POOL, W // POOL, POOL)
    return windows.mean(axis=(2, 4)).astype(np.float16)
