"""gqa_full: grouped-query attention without a mask.

QH query heads share KH key/value heads: query head h reads key/value head h // (QH / KH). Per batch b
and query head h, with Q, K and V the N x D matrices of that head:
out[b, h] = softmax(Q @ K^T / sqrt(D)) @ V, the softmax taken over the keys (last axis) as
exp(s - row max) / row sum.

Layout (float32, row-major), chosen so the Tensor engine contracts over D on partitions without
transposing Q or K: q is [B, QH, D, N] and k is [B, KH, D, N] (head dim first, then sequence);
v is [B, KH, N, D] and the output is [B, QH, N, D] (sequence first). Inputs are N(0, 1).
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"B": 1, "N": 4096, "QH": 16, "KH": 8, "D": 128},
            "small": {"B": 1, "N": 512, "QH": 4, "KH": 2, "D": 128}}
FAMILY = "attention"
RTOL = 2e-5


def make_inputs(rng: np.random.Generator, B: int, N: int, QH: int, KH: int, D: int) -> list[np.ndarray]:
    q = rng.standard_normal((B, QH, D, N), dtype=np.float32)
    k = rng.standard_normal((B, KH, D, N), dtype=np.float32)
    v = rng.standard_normal((B, KH, N, D), dtype=np.float32)
    return [q, k, v]


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    batch, q_heads, d, n = q.shape
    group = q_heads // k.shape[1]
    out = np.empty((batch, q_heads, n, d), dtype=np.float32)
    for b in range(batch):
        for h in range(q_heads):  # one head at a time keeps the float64 N x N scores small
            kv = h // group
            scores = q[b, h].astype(np.float64).T @ k[b, kv].astype(np.float64) / np.sqrt(d)
            scores -= scores.max(axis=1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=1, keepdims=True)
            out[b, h] = scores @ v[b, kv].astype(np.float64)
    return out


def peak_work(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> PeakWork:
    batch, q_heads, d, n = q.shape
    kv_heads = k.shape[1]
    return PeakWork(mm_flops=4 * batch * q_heads * n * n * d, vec_flops=5 * batch * q_heads * n * n,
                    hbm_bytes=4 * (2 * batch * q_heads * n * d + 2 * batch * kv_heads * n * d))
