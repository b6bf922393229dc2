"""Flash attention forward (reference kernel, training mode): causal softmax(q^T k / sqrt(d)) v for one
batch and head, q, k of [1, 1, 128, 4096], v of [1, 1, 4096, 128] float32 in [-1, 1]; the outputs are
o [1, 1, 4096, 128] and the log-sum-exp of every score row laid out [1, 1, 128, 32]
(test_flash_attn_fwd.py). Launched on a (batch, kv heads) grid."""

import numpy as np
from _math import attention_lse, causal_scores, lse_tiles, softmax

RTOL = 1e-2  # bfloat16 matmuls (mixed_precision=True)
GRID = (1, 1)
KERNEL_ARGS = {"seed": None}


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    q = rng.uniform(-1.0, 1.0, (1, 1, 128, 4096)).astype(np.float32)
    k = rng.uniform(-1.0, 1.0, (1, 1, 128, 4096)).astype(np.float32)
    v = rng.uniform(-1.0, 1.0, (1, 1, 4096, 128)).astype(np.float32)
    return [q, k, v]


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scores = causal_scores(np.swapaxes(q, -1, -2) @ k / np.sqrt(q.shape[2]))
    out = softmax(scores) @ v
    return out.astype(np.float32), lse_tiles(attention_lse(scores)).astype(np.float32)
