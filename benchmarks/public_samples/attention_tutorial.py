"""Attention-performance tutorial: softmax(q^T @ k) @ v^T with q, k, v of [128, seqlen] float32 in
[-1, 1] (numpy_attention of test_attention.py). Versions 3 to 11 take seqlen 4096
(attention_tutorial_short.py holds the 128 of versions 1 and 2)."""

import numpy as np
from _math import softmax

RTOL = 1e-2  # later versions compute the scores and the output in bfloat16
SEQLEN = 4096


def make_inputs(rng: np.random.Generator, seqlen: int = SEQLEN) -> list[np.ndarray]:
    return [rng.uniform(-1.0, 1.0, (128, seqlen)).astype(np.float32) for _ in range(3)]


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    return (softmax(q.T @ k) @ v.T).astype(np.float32)
