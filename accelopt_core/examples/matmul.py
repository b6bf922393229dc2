"""Tiled matmul C = A @ B (float32), written the way a first NKI version usually is: A is loaded
in 128x128 blocks and transposed on the Tensor engine so its contraction dim sits on partitions,
partial products accumulate in PSUM over K, and each 128x512 result tile is copied out and stored.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    m_size, k_size = a.shape
    _, n_size = b.shape
    tile_m = nl.tile_size.gemm_stationary_fmax  # 128
    tile_k = nl.tile_size.pmax  # 128
    tile_n = nl.tile_size.gemm_moving_fmax  # 512
    c = nl.ndarray((m_size, n_size), dtype=a.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(m_size // tile_m):
        for n in nl.affine_range(n_size // tile_n):
            acc = nl.zeros((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // tile_k):
                a_tile = nl.load(a[m * tile_m:(m + 1) * tile_m, k * tile_k:(k + 1) * tile_k])
                a_t = nl.copy(nisa.nc_transpose(a_tile))  # PSUM -> SBUF, contraction on partitions
                b_tile = nl.load(b[k * tile_k:(k + 1) * tile_k, n * tile_n:(n + 1) * tile_n])
                acc += nisa.nc_matmul(a_t, b_tile)
            result = nl.copy(acc, dtype=c.dtype)
            nl.store(c[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n], value=result)
    return c
