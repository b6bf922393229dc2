"""Fused Mamba tutorial: the selective-scan SSM of mamba_torch.py, batch 1, 256 channels, state 16,
sequence 2048 (the tutorial's defaults)."""

import numpy as np

BATCH, CHANNELS, STATE, SEQ = 1, 256, 16, 2048
RTOL = 1e-4


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    delta = rng.uniform(0.0, 0.1, (BATCH, CHANNELS, SEQ)).astype(np.float32)
    u = rng.standard_normal((BATCH, CHANNELS, SEQ)).astype(np.float32)
    a = -rng.uniform(0.5, 1.5, (CHANNELS, STATE)).astype(np.float32)
    b = rng.standard_normal((BATCH, STATE, SEQ)).astype(np.float32)
    c = rng.standard_normal((BATCH, STATE, SEQ)).astype(np.float32)
    return [delta, u, a, b, c]


def reference(delta: np.ndarray, u: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    delta, u, a, b, c = (x.astype(np.float64) for x in (delta, u, a, b, c))
    decay = np.exp(delta[:, :, None, :] * a[None, :, :, None])  # batch, channel, state, seq
    drive = delta[:, :, None, :] * b[:, None, :, :] * u[:, :, None, :]
    state = np.zeros(decay.shape[:-1])
    out = np.empty_like(delta)
    for t in range(delta.shape[-1]):
        state = decay[..., t] * state + drive[..., t]
        out[..., t] = (state * c[:, None, :, t]).sum(axis=-1)
    return out.astype(np.float32)
