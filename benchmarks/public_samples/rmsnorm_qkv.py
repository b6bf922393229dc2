"""allocated_fused_rms_norm_qkv (reference kernel): RMSNorm(hidden) @ w_qkv with hidden of [1, 128, 512]
and weights of [512, 512] float16 in [0, 1) (test_rmsnorm_qkv.py)."""

import numpy as np

RTOL = 1e-2
EPS = 1e-6


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random((1, 128, 512)).astype(np.float16), rng.random((512, 512)).astype(np.float16)]


def reference(hidden: np.ndarray, weights: np.ndarray) -> np.ndarray:
    h = hidden.astype(np.float64)
    normed = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + EPS)
    return (normed @ weights.astype(np.float64)).astype(np.float16)
