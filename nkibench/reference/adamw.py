"""adamw: one AdamW step on an M x N float32 parameter matrix, returning the new parameters.

With lr = 0.01, weight decay 1e-5, beta1 = 0.9, beta2 = 0.999, eps = 1e-8 and the step-3 bias
correction folded in as v_hat = v_t * 1000:
m_t = 0.9 m + 0.1 g;  v_t = 0.999 v + 0.001 g^2;  v_hat = 1000 v_t;
theta' = theta * (1 - 1e-5) - 0.01 * m_t / (sqrt(v_hat) + 1e-8).

Layout (float32, row-major, all [M, N]): inputs theta, g, m, v in that order; the output is theta'.
theta, g and m are N(0, 1); v is |N(0, 1)|. The full M = 10944 is not a multiple of 128, and the small
variant keeps a ragged last row tile too.
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"M": 10944, "N": 2048}, "small": {"M": 320, "N": 2048}}
FAMILY = "elementwise"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, M: int, N: int) -> list[np.ndarray]:
    theta = rng.standard_normal((M, N), dtype=np.float32)
    g = rng.standard_normal((M, N), dtype=np.float32)
    m = rng.standard_normal((M, N), dtype=np.float32)
    v = np.abs(rng.standard_normal((M, N), dtype=np.float32))
    return [theta, g, m, v]


def reference(theta: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray) -> np.ndarray:
    theta, g, m, v = (a.astype(np.float64) for a in (theta, g, m, v))
    m_t = 0.9 * m + 0.1 * g
    v_t = 0.999 * v + 0.001 * g * g
    v_hat = v_t * 1000.0
    return (theta * (1.0 - 1e-5) - 0.01 * m_t / (np.sqrt(v_hat) + 1e-8)).astype(np.float32)


def peak_work(theta: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray) -> PeakWork:
    rows, cols = theta.shape
    return PeakWork(mm_flops=0, vec_flops=7 * rows * cols, hbm_bytes=20 * rows * cols)
