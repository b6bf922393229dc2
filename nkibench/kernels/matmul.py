"""Baseline matmul C = A @ B (float32). For each 128-row block of A, the block is loaded once and its
128x128 pieces are transposed on the Tensor engine into an SBUF buffer, so the contraction dim sits
on partitions; then every 128x512 tile of C accumulates K/128 matmuls (stationary: the transposed A
piece, moving: a 128x512 tile of B loaded for it) in one PSUM tile, which is copied to SBUF and stored.
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
    k_tiles = k_size // tile_k
    c = nl.ndarray((m_size, n_size), dtype=a.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(m_size // tile_m):
        a_rows = nl.load(a[m * tile_m:(m + 1) * tile_m, :])
        a_t = nl.ndarray((k_tiles, nl.par_dim(tile_k), tile_m), dtype=a.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(k_tiles):
            a_t[k] = nl.copy(nisa.nc_transpose(a_rows[:, k * tile_k:(k + 1) * tile_k]))

        for n in nl.affine_range(n_size // tile_n):
            acc = nl.zeros((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_tiles):
                b_tile = nl.load(b[k * tile_k:(k + 1) * tile_k, n * tile_n:(n + 1) * tile_n])
                acc += nisa.nc_matmul(a_t[k], b_tile)
            result = nl.copy(acc, dtype=c.dtype)
            nl.store(c[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n], value=result)
    return c
