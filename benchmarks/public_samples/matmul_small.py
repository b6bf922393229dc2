"""Matmul tutorial, basic kernel: bf16 [64, 128] @ [128, 512], the left operand passed transposed."""

import numpy as np
from matmul_large import RTOL, reference, transposed_inputs  # noqa: F401  (the same task, smaller)


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return transposed_inputs(rng, 64, 128, 512)
