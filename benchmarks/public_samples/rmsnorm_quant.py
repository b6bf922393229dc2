"""rmsnorm_quant_kernel (reference kernel): RMSNorm of a [1, 128, 1024] float32 input times gamma, then
fp8-e4m3 quantization per row with scale max|y| / 240; the output is [1, 128, 1024 + 4] float8_e4m3,
its last 4 bytes per row the float32 dequantization scale. The kernel's `kargs` is an instance of a
dataclass its own file defines, so it is given as an expression evaluated there.

Checked on what the output means: its fp8 values times the scale its last bytes hold, against the
float32 RMSNorm (fp8's 3-bit mantissa bounds the error; comparing the packed bytes as fp8 numbers would
read a float32's low byte as a value)."""

import ml_dtypes
import numpy as np

B, S, H, EPS = 1, 128, 1024, 1e-6
RTOL = 0.05  # e4m3 rounds to within 2^-4 relative; the L2 error of rounding is about 3 %
KERNEL_ARG_EXPRESSIONS = {"kargs": f"RmsNormQuantKernelArgs(lower_bound=0.0, eps={EPS})"}


def get_inputs() -> list[np.ndarray]:
    return [np.random.standard_normal((B, S, H)).astype(np.float32), np.random.random(H).astype(np.float32)]


def forward(hidden: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    return hidden / np.sqrt(np.mean(hidden * hidden, axis=-1, keepdims=True) + EPS) * gamma


def transform_nki_outputs(packed: np.ndarray, _reference: np.ndarray) -> np.ndarray:
    """The kernel's dequantized output: fp8 values times the float32 scale packed after them."""
    packed = np.ascontiguousarray(packed).view(ml_dtypes.float8_e4m3)
    scale = packed[..., H:].copy().view(np.float32)
    return packed[..., :H].astype(np.float32) * scale
