"""transpose_matmul: C = A^T @ B in float32, with A stored transposed.

Inputs, in the order the kernel takes them: `a` is K x M (the left operand stored with its
contraction axis first), `b` is K x N. The output C = a.T @ b is M x N. All entries are drawn from
N(0, 1). N = 10944 in the full size is not a multiple of 128; the small size keeps that raggedness
(704 = 512 + 192, the same 192-column tail as 10944 = 21 * 512 + 192).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"K": 2048, "M": 4096, "N": 10944}, "small": {"K": 256, "M": 256, "N": 704}}
FAMILY = "matmul"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, K: int, M: int, N: int) -> list[np.ndarray]:
    a = rng.standard_normal((K, M), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    return [a, b]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64).T @ b.astype(np.float64)).astype(np.float32)


def peak_work(a: np.ndarray, b: np.ndarray) -> PeakWork:
    k, m = a.shape
    n = b.shape[1]
    return PeakWork(mm_flops=2 * m * n * k, vec_flops=0, hbm_bytes=4 * (m * n + n * k + m * k))
