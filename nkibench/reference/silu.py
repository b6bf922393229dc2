"""silu: x / (1 + exp(-x)) over an M x N float32 matrix."""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"M": 4096, "N": 7168}, "small": {"M": 256, "N": 1024}}
FAMILY = "elementwise"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, M: int, N: int) -> list[np.ndarray]:
    return [rng.standard_normal((M, N), dtype=np.float32)]


def reference(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return (x64 / (1.0 + np.exp(-x64))).astype(np.float32)


def peak_work(x: np.ndarray) -> PeakWork:
    m, n = x.shape
    return PeakWork(mm_flops=0, vec_flops=3 * m * n, hbm_bytes=8 * m * n)
