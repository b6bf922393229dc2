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


COLUMNS = 1024  # columns of W (and of the output) per block


def reference(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """In float64, a block of output columns at a time: at full size the whole float64 products beside W's float64
    copy would hold 1.7 GB (a check computes this beside its replay, on every seed). The blocks convert each
    element once and add once per output element, as the whole formula does, so the work counted from this run
    (% of peak) is the formula's."""
    x64 = x.astype(np.float64)
    xa = x64 @ a.astype(np.float64)
    out = np.empty((x.shape[0], w.shape[1]), dtype=np.float32)
    for start in range(0, w.shape[1], COLUMNS):
        columns = slice(start, start + COLUMNS)
        out[:, columns] = x64 @ w[:, columns].astype(np.float64) + xa @ b[:, columns].astype(np.float64)
    return out


def peak_work(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray) -> PeakWork:
    m, k = x.shape
    n = w.shape[1]
    r = a.shape[1]
    return PeakWork(mm_flops=2 * m * n * k + 2 * m * k * r + 2 * m * n * r, vec_flops=m * n,
                    hbm_bytes=4 * (m * k + k * n + k * r + r * n + m * n))
