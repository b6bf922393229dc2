"""bmm: batched matmul C[b] = A[b] @ B[b] in float32.

Inputs, in the order the kernel takes them: `a` is B x M x K, `b` is B x K x N (each batch
row-major, contraction on the last axis of `a` and the middle axis of `b`). The output C is
B x M x N. All entries are drawn from N(0, 1).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"B": 16, "M": 4096, "K": 64, "N": 4096}, "small": {"B": 2, "M": 256, "K": 64, "N": 1024}}
FAMILY = "matmul"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, B: int, M: int, K: int, N: int) -> list[np.ndarray]:
    a = rng.standard_normal((B, M, K), dtype=np.float32)
    b = rng.standard_normal((B, K, N), dtype=np.float32)
    return [a, b]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)


def peak_work(a: np.ndarray, b: np.ndarray) -> PeakWork:
    batch, m, k = a.shape
    n = b.shape[2]
    return PeakWork(mm_flops=2 * batch * m * n * k, vec_flops=0,
                    hbm_bytes=4 * (batch * m * n + batch * n * k + batch * m * k))
