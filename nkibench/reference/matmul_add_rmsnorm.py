"""matmul_add_rmsnorm: a projection, a residual add, then an RMSNorm with gain over each output row.

    y = x @ W + z
    out = y * g / sqrt(mean(y^2, last axis) + eps)        (eps = 1e-5)

Layout: x is M x K, W is K x N, z is M x N, g is a vector of N entries (shape (N,)), out is M x N;
all float32, drawn from N(0, 1).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"M": 4096, "K": 2048, "N": 2048}, "small": {"M": 256, "K": 512, "N": 1024}}
FAMILY = "norm_matmul"
RTOL = 2e-5
EPS = 1e-5


def make_inputs(rng: np.random.Generator, M: int, K: int, N: int) -> list[np.ndarray]:
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    z = rng.standard_normal((M, N), dtype=np.float32)
    g = rng.standard_normal((N,), dtype=np.float32)
    return [x, w, z, g]


def reference(x: np.ndarray, w: np.ndarray, z: np.ndarray, g: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64) @ w.astype(np.float64) + z.astype(np.float64)
    out = y * g.astype(np.float64) / np.sqrt(np.mean(y * y, axis=-1, keepdims=True) + EPS)
    return out.astype(np.float32)


def peak_work(x: np.ndarray, w: np.ndarray, z: np.ndarray, g: np.ndarray) -> PeakWork:
    m, k = x.shape
    n = w.shape[1]
    return PeakWork(mm_flops=2 * m * n * k, vec_flops=6 * m * n,
                    hbm_bytes=4 * (m * k + n * k + m * n + n + m * n))
