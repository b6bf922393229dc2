"""adaptive_avg_pool2d_kernel (reference vision kernel): PyTorch's AdaptiveAvgPool2d of a
[1, 64, 56, 56] float32 NCHW input to 7 x 7 (test_adaptive_avg_pool2d.py)."""

import numpy as np

OUTPUT = 7
KERNEL_ARGS = {"output_size": OUTPUT}
RTOL = 1e-5


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal((1, 64, 56, 56)).astype(np.float32)]


def _bounds(size: int, out: int) -> list[tuple[int, int]]:
    return [((i * size) // out, ((i + 1) * size + out - 1) // out) for i in range(out)]


def reference(x: np.ndarray) -> np.ndarray:
    h, w = x.shape[2:]
    rows = [[x[:, :, h0:h1, w0:w1].astype(np.float64).mean(axis=(2, 3)) for w0, w1 in _bounds(w, OUTPUT)]
            for h0, h1 in _bounds(h, OUTPUT)]
    return np.moveaxis(np.array(rows), (0, 1), (2, 3)).astype(np.float32)
