"""NumPy building blocks shared by the public-sample references (our own code, written from the
samples' tests): softmax, attention forward and backward, rounding to a narrow float."""

from __future__ import annotations

import ml_dtypes
import numpy as np

MASKED = -9984.0  # the samples' tests mask scores with this finite value, not -inf


def as_bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 and back to float32: what a bf16 Tensor-engine operand holds."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row softmax over the last axis, shifted by the row max."""
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def causal_scores(scores: np.ndarray) -> np.ndarray:
    """Scores with every key after its query masked (the last two axes are query, key)."""
    q_len, k_len = scores.shape[-2:]
    upper = np.arange(k_len)[None, :] > np.arange(q_len)[:, None]
    return np.where(upper, MASKED, scores)


def attention_lse(scores: np.ndarray) -> np.ndarray:
    """log-sum-exp of every score row (the statistic flash attention keeps for its backward pass)."""
    top = scores.max(axis=-1)
    return top + np.log(np.exp(scores - top[..., None]).sum(axis=-1))


def lse_tiles(lse: np.ndarray, pmax: int = 128) -> np.ndarray:
    """[..., seq] -> [..., pmax, seq // pmax]: row t * pmax + p lands at [p, t], the kernels' layout."""
    *lead, seq = lse.shape
    return np.swapaxes(lse.reshape(*lead, seq // pmax, pmax), -1, -2)
