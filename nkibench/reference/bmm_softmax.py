"""bmm_softmax: row softmax of a batched matmul, out[b] = softmax(A[b] @ B[b]) over the last axis.

For each batch b, S = A[b] @ B[b] is M x N; each row is shifted by its maximum, exponentiated and
divided by its sum: out[b, i, j] = exp(S[i, j] - max_j S[i, :]) / sum_j exp(S[i, j] - max_j S[i, :]).

Layout (float32, row-major): A is [B, M, K], B is [B, K, N], the output is [B, M, N]. Inputs are N(0, 1).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"B": 16, "M": 4096, "K": 64, "N": 4096},
            "small": {"B": 2, "M": 256, "K": 64, "N": 1024}}
FAMILY = "attention"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, B: int, M: int, K: int, N: int) -> list[np.ndarray]:
    a = rng.standard_normal((B, M, K), dtype=np.float32)
    b = rng.standard_normal((B, K, N), dtype=np.float32)
    return [a, b]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=np.float32)
    for i in range(a.shape[0]):  # one batch at a time keeps the float64 temporaries small
        scores = a[i].astype(np.float64) @ b[i].astype(np.float64)
        scores -= scores.max(axis=1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=1, keepdims=True)
        out[i] = scores
    return out


def peak_work(a: np.ndarray, b: np.ndarray) -> PeakWork:
    batch, m, k = a.shape
    n = b.shape[2]
    return PeakWork(mm_flops=2 * batch * m * n * k, vec_flops=5 * batch * m * n,
                    hbm_bytes=4 * (batch * m * n + batch * n * k + batch * m * k))
