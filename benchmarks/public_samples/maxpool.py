"""max_pooling_2d_stride_1 (contributed): 3 x 3 max pooling with stride 1 over a [448, 448] float32
image (the kernel's own check)."""

import numpy as np

POOL = 3
KERNEL_ARGS = {"pool_size": POOL}


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random((448, 448)).astype(np.float32)]


def reference(image: np.ndarray) -> np.ndarray:
    h, w = image.shape[0] - POOL + 1, image.shape[1] - POOL + 1
    return np.max([image[i:i + h, j:j + w] for i in range(POOL) for j in range(POOL)], axis=0)
