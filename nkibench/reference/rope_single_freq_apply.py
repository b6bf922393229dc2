"""rope_single_freq_apply: rotary position embedding applied with one frequency table per column.

x is D x T with T = B * H * N (one column per batch, head and position); x0 is its first D/2 rows and
x1 its last D/2 rows. With cos and sin of shape D/2 x T:
out = [x0 * cos - x1 * sin ; x0 * sin + x1 * cos], a D x T matrix.

Layout (float32, row-major): x is [D, B*H*N], cos and sin are [D/2, B*H*N], the output is [D, B*H*N].
All three inputs are N(0, 1) (cos and sin are not drawn as actual cosines and sines).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"B": 1, "H": 64, "N": 4096, "D": 128},
            "small": {"B": 1, "H": 2, "N": 2048, "D": 128}}
FAMILY = "elementwise"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, B: int, H: int, N: int, D: int) -> list[np.ndarray]:
    columns = B * H * N
    x = rng.standard_normal((D, columns), dtype=np.float32)
    cos = rng.standard_normal((D // 2, columns), dtype=np.float32)
    sin = rng.standard_normal((D // 2, columns), dtype=np.float32)
    return [x, cos, sin]


def reference(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[0] // 2
    x0, x1 = x[:half].astype(np.float64), x[half:].astype(np.float64)
    c, s = cos.astype(np.float64), sin.astype(np.float64)
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c]).astype(np.float32)


def peak_work(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> PeakWork:
    d, columns = x.shape  # columns = B * H * N
    return PeakWork(mm_flops=0, vec_flops=3 * d * columns, hbm_bytes=12 * d * columns)
