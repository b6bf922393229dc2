"""2x bilinear upsampling with align_corners=False (torch.nn.functional.interpolate, the contributed
kernel's own check) of a [2, 64, 128, 128] float32 image; interpolate_trilinear.py holds the 3-D case."""

import numpy as np

SPATIAL = (128, 128)


def make_inputs(rng: np.random.Generator, spatial: tuple[int, ...] = SPATIAL) -> list[np.ndarray]:
    return [rng.random((2, 64, *spatial)).astype(np.float32)]


def _upsample_axis(x: np.ndarray, axis: int) -> np.ndarray:
    """Linear 2x along one axis: target i samples source (i + 0.5) / 2 - 0.5, clamped at the edges."""
    size = x.shape[axis]
    position = np.clip((np.arange(2 * size) + 0.5) / 2 - 0.5, 0, size - 1)
    low = np.floor(position).astype(int)
    high = np.minimum(low + 1, size - 1)
    weight = (position - low).reshape([-1 if a == axis else 1 for a in range(x.ndim)])
    return np.take(x, low, axis=axis) * (1 - weight) + np.take(x, high, axis=axis) * weight


def reference(x: np.ndarray) -> np.ndarray:
    out = x.astype(np.float64)
    for axis in range(2, x.ndim):
        out = _upsample_axis(out, axis)
    return out.astype(np.float32)
