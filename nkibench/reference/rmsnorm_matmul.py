"""rmsnorm_matmul: out = (x / sqrt(mean(x^2, last axis))) @ W, with no epsilon and no gain.

Layout: x is M x K (rows normalised over their K entries), W is K x N, out is M x N; all float32,
drawn from N(0, 1).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"M": 4096, "K": 1024, "N": 2048}, "small": {"M": 256, "K": 512, "N": 1024}}
FAMILY = "norm_matmul"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, M: int, K: int, N: int) -> list[np.ndarray]:
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    return [x, w]


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    rms = np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True))
    return ((x64 / rms) @ w.astype(np.float64)).astype(np.float32)


def peak_work(x: np.ndarray, w: np.ndarray) -> PeakWork:
    m, k = x.shape
    n = w.shape[1]
    return PeakWork(mm_flops=2 * m * n * k, vec_flops=4 * m * k, hbm_bytes=4 * (m * k + k * n + m * n))
