"""swiglu: the gated feed-forward block out = (silu(x @ Wgate) * (x @ Wup)) @ Wdown,
with silu(t) = t / (1 + exp(-t)).

Layout: x is M x K, Wgate and Wup are K x N, Wdown is N x K, out is M x K; all float32, drawn
from N(0, 1).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"M": 4096, "K": 1024, "N": 3072}, "small": {"M": 256, "K": 512, "N": 1024}}
FAMILY = "matmul"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, M: int, K: int, N: int) -> list[np.ndarray]:
    x = rng.standard_normal((M, K), dtype=np.float32)
    w_gate = rng.standard_normal((K, N), dtype=np.float32)
    w_up = rng.standard_normal((K, N), dtype=np.float32)
    w_down = rng.standard_normal((N, K), dtype=np.float32)
    return [x, w_gate, w_up, w_down]


def reference(x: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    gate = x64 @ w_gate.astype(np.float64)
    up = x64 @ w_up.astype(np.float64)
    hidden = gate / (1.0 + np.exp(-gate)) * up
    return (hidden @ w_down.astype(np.float64)).astype(np.float32)


def peak_work(x: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray, w_down: np.ndarray) -> PeakWork:
    m, k = x.shape
    n = w_gate.shape[1]
    return PeakWork(mm_flops=6 * m * k * n, vec_flops=5 * m * n, hbm_bytes=4 * (2 * m * k + 3 * k * n))
