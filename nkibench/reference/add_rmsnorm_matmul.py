"""add_rmsnorm_matmul: a residual add, an RMSNorm with gain, then a projection.

    y = x + z
    y = y / sqrt(mean(y^2, last axis) + eps) * g        (eps = 1e-5)
    out = y @ W

Layout: x and z are M x K, g is a vector of K entries (shape (K,)), W is K x N, out is M x N; all
float32, drawn from N(0, 1).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"M": 4096, "K": 1024, "N": 2048}, "small": {"M": 256, "K": 512, "N": 1024}}
FAMILY = "norm_matmul"
RTOL = 2e-5
EPS = 1e-5


def make_inputs(rng: np.random.Generator, M: int, K: int, N: int) -> list[np.ndarray]:
    x = rng.standard_normal((M, K), dtype=np.float32)
    z = rng.standard_normal((M, K), dtype=np.float32)
    g = rng.standard_normal((K,), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    return [x, z, g, w]


def reference(x: np.ndarray, z: np.ndarray, g: np.ndarray, w: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64) + z.astype(np.float64)
    y = y / np.sqrt(np.mean(y * y, axis=-1, keepdims=True) + EPS) * g.astype(np.float64)
    return (y @ w.astype(np.float64)).astype(np.float32)


def peak_work(x: np.ndarray, z: np.ndarray, g: np.ndarray, w: np.ndarray) -> PeakWork:
    m, k = x.shape
    n = w.shape[1]
    return PeakWork(mm_flops=2 * m * n * k, vec_flops=6 * m * k,
                    hbm_bytes=4 * (2 * m * k + k * n + k + m * n))
