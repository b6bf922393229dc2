"""quantized_double_row_matmul (reference kernel, trn2): bf16 lhs [512, 16384] times an fp8-e4m3 rhs
quantized per column (scale = column max / 240), laid out [K/2, 2N] with every two [128, 512] tiles
of a tile column side by side, and the column scales broadcast to [128, N]
(test_double_row_matmul.py)."""

import ml_dtypes
import numpy as np

M, K, N = 512, 16 * 1024, 1024
TILE_K, TILE_N = 128, 512
RTOL = 2e-2
KERNEL_ARGS = {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 16}


def _interleave(rhs: np.ndarray) -> np.ndarray:
    """[K, N] -> [K/2, 2N]: tile rows 2j and 2j+1 of every tile column go side by side."""
    tiles = rhs.reshape(K // (2 * TILE_K), 2, TILE_K, N // TILE_N, TILE_N)
    return tiles.transpose(0, 2, 3, 1, 4).reshape(K // 2, 2 * N)


def _restore(packed: np.ndarray) -> np.ndarray:
    tiles = packed.reshape(K // (2 * TILE_K), TILE_K, N // TILE_N, 2, TILE_N)
    return tiles.transpose(0, 3, 1, 2, 4).reshape(K, N)


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    lhs = rng.random((M, K))
    rhs = rng.random((K, N))
    scale = np.max(np.abs(rhs), axis=0, keepdims=True) / 240
    quantized = _interleave(rhs / scale).astype(ml_dtypes.float8_e4m3)
    return [lhs.astype(ml_dtypes.bfloat16), quantized,
            np.broadcast_to(scale, (128, N)).astype(ml_dtypes.bfloat16)]


def reference(lhs: np.ndarray, rhs_quantized: np.ndarray, rhs_scale: np.ndarray) -> np.ndarray:
    rhs = _restore(rhs_quantized.astype(np.float64)) * rhs_scale[0].astype(np.float64)
    return (lhs.astype(np.float64) @ rhs).astype(ml_dtypes.bfloat16)
