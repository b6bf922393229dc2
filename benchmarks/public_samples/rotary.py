"""Rotary embedding tutorial: q and k of [batch, heads, seq, head_dim] rotated by the cos / sin tables
of generate_pos_embedding; the output stacks both, [2, batch, heads, seq, head_dim]. The kernel runs
one program per (batch, head)."""

import numpy as np

BATCH, HEADS, SEQ, HEAD_DIM = 2, 4, 256, 128
GRID = (BATCH, HEADS)


def _tables() -> tuple[np.ndarray, np.ndarray]:
    inv_freq = 1.0 / (10000 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM))
    freqs = np.arange(SEQ)[:, None] * inv_freq[None, :]
    angles = np.concatenate([freqs, freqs], axis=-1)
    shape = (BATCH, SEQ, HEAD_DIM)
    return (np.broadcast_to(np.cos(angles), shape).astype(np.float32),
            np.broadcast_to(np.sin(angles), shape).astype(np.float32))


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    q = rng.standard_normal((BATCH, HEADS, SEQ, HEAD_DIM)).astype(np.float32)
    k = rng.standard_normal((BATCH, HEADS, SEQ, HEAD_DIM)).astype(np.float32)
    cos, sin = _tables()
    return [q, k, cos, sin]


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    turned = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None] + turned * sin[:, None]


def reference(q: np.ndarray, k: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    q, k, cos, sin = (x.astype(np.float64) for x in (q, k, cos, sin))
    return np.stack([_rotate(q, cos, sin), _rotate(k, cos, sin)]).astype(np.float32)
