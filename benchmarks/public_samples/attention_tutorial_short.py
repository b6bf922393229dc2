"""Attention-performance tutorial, versions 1 and 2: the same task with seqlen 128 (no tiling)."""

import numpy as np
from attention_tutorial import RTOL, reference  # noqa: F401  (the same task at another size)
from attention_tutorial import make_inputs as _make_inputs


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return _make_inputs(rng, 128)
