"""lora: out = x @ W + (x @ A) @ B in float32 (a linear layer plus its rank-R low-rank update).

Inputs, in the order the kernel takes them: `x` is M x K, `w` is K x N, `a` is K x R, `b` is R x N
(all row-major, contraction on the last axis of the left operand). The output is M x N. All entries
are drawn from N(0, 1).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"M": 4096, "K": 5120, "N": 12288, "R": 128},
            "small": {"M": 256, "K": 512, "N": 1024, "R": 128}}
FAMILY = "matmul"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, M: int, K: int, N: int, R: int) -> list[np.ndarray]:
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    a = rng.standard_normal((K, R), dtype=np.float32)
    b = rng.standard_normal((R, N), dtype=np.float32)
    return [x, w, a, b]


ROWS = 1024  # rows of x per block of the output
DEPTH = 1024  # rows of W converted to float64 at a time


def reference(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """In float64, by blocks: at full size the whole float64 products and W's float64 copy would hold 1.7 GB
    (a check computes this beside its replay, on every seed); the blocks hold about 0.3 GB."""
    xa = x.astype(np.float64) @ a.astype(np.float64)
    b64 = b.astype(np.float64)
    out = np.empty((x.shape[0], w.shape[1]), dtype=np.float32)
    for start in range(0, x.shape[0], ROWS):
        rows = slice(start, start + ROWS)
        block = xa[rows] @ b64
        for depth in range(0, x.shape[1], DEPTH):
            part = slice(depth, depth + DEPTH)
            block += x[rows, part].astype(np.float64) @ w[part].astype(np.float64)
        out[rows] = block
    return out


def peak_work(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray) -> PeakWork:
    m, k = x.shape
    n = w.shape[1]
    r = a.shape[1]
    return PeakWork(mm_flops=2 * m * n * k + 2 * m * k * r + 2 * m * n * r, vec_flops=m * n,
                    hbm_bytes=4 * (m * k + k * n + k * r + r * n + m * n))
