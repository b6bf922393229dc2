"""rmsnorm_quant_kernel (reference kernel): RMSNorm of a [1, 128, 1024] float32 input times gamma, then
fp8-e4m3 quantization per row with scale max|y| / 240; the output is [1, 128, 1024 + 4] float8_e4m3,
its last 4 bytes per row the float32 dequantization scale. (The kernel also takes `kargs`, an instance
of a dataclass defined in its own file, which plain kernel arguments cannot express.)"""

import ml_dtypes
import numpy as np

B, S, H, EPS = 1, 128, 1024, 1e-6
FP8_RANGE = 240.0


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal((B, S, H)).astype(np.float32), rng.random(H).astype(np.float32)]


def reference(hidden: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    h = hidden.astype(np.float32)
    y = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + EPS) * gamma
    scale = (np.abs(y).max(axis=-1, keepdims=True) / FP8_RANGE).astype(np.float32)
    quantized = (y / scale).astype(ml_dtypes.float8_e4m3)
    scale_bytes = np.ascontiguousarray(scale).view(ml_dtypes.float8_e4m3)
    return np.concatenate([quantized, scale_bytes], axis=-1)
