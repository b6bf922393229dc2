"""2x trilinear upsampling with align_corners=False of a [2, 64, 23, 23, 23] float32 volume (the
contributed kernel's own check)."""

import numpy as np
from interpolate import make_inputs as _make_inputs
from interpolate import reference  # noqa: F401  (the same interpolation, one more axis)


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return _make_inputs(rng, (23, 23, 23))
