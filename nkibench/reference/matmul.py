"""matmul: C = A @ B in float32.

Inputs, in the order the kernel takes them: `a` is M x K (row-major, contraction on the last axis),
`b` is K x N. The output C is M x N. All entries are drawn from N(0, 1).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"M": 4096, "K": 5120, "N": 12288}, "small": {"M": 256, "K": 512, "N": 1024}}
FAMILY = "matmul"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, M: int, K: int, N: int) -> list[np.ndarray]:
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    return [a, b]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def peak_work(a: np.ndarray, b: np.ndarray) -> PeakWork:
    m, k = a.shape
    n = b.shape[1]
    return PeakWork(mm_flops=2 * m * n * k, vec_flops=0, hbm_bytes=4 * (m * n + n * k + m * k))
