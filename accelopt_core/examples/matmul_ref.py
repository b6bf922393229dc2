"""Reference for examples/matmul.py: C = A @ B in float32 (native task form)."""

import numpy as np

M, K, N = 512, 1024, 1024
RTOL = 2e-5


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def peak_work(a: np.ndarray, b: np.ndarray):
    from accelopt_core.tasks import PeakWork

    m, k = a.shape
    n = b.shape[1]
    return PeakWork(mm_flops=2 * m * n * k, vec_flops=0, hbm_bytes=4 * (m * n + n * k + m * k))
