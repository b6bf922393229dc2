"""Flash attention backward (reference kernel): dq, dk, dv of causal attention for one batch and head,
q, k, v, dy of [1, 1, 128, 4096] float32 in [-1, 1]; o and the per-row log-sum-exp are the forward
pass's (cpu_attention_backward of test_flash_attn_bwd.py). Launched on a (batch, kv heads) grid."""

import numpy as np
from _math import attention_lse, causal_scores, lse_tiles, softmax

RTOL = 2e-2  # bfloat16 matmuls (mixed_precision=True)
GRID = (1, 1)
KERNEL_ARGS = {"seed_ref": None, "use_causal_mask": True, "mixed_precision": True}


def _scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    return causal_scores(np.swapaxes(q, -1, -2) @ k / np.sqrt(q.shape[2]))


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    q, k, v, dy = (rng.uniform(-1.0, 1.0, (1, 1, 128, 4096)) for _ in range(4))
    scores = _scores(q, k)
    o = np.swapaxes(softmax(scores) @ np.swapaxes(v, -1, -2), -1, -2)
    lse = lse_tiles(attention_lse(scores))
    return [x.astype(np.float32) for x in (q, k, v, o, dy, lse)]


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, dy: np.ndarray,
              lse: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q, k, v, dy = (x.astype(np.float64) for x in (q, k, v, dy))
    scale = 1.0 / np.sqrt(q.shape[2])
    probs = softmax(_scores(q, k))  # [query, key]
    d_probs = np.swapaxes(dy, -1, -2) @ v
    d_scores = (d_probs - (d_probs * probs).sum(axis=-1, keepdims=True)) * probs
    dv = dy @ probs
    dq = k @ np.swapaxes(d_scores, -1, -2) * scale
    dk = q @ d_scores * scale
    return dq.astype(np.float32), dk.astype(np.float32), dv.astype(np.float32)
