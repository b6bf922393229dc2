"""Baseline transpose_matmul C = A^T @ B (float32), A given as K x M. A already has the contraction dim
first, so its pieces are the matmul's stationary operand as loaded: for each 128-column slab of A, the
K/128 pieces of 128x128 are loaded once into SBUF; then every 128x512 tile of C accumulates K/128
matmuls (moving: a 128x512 tile of B loaded for it) in one PSUM tile, which is copied out and stored.
N need not be a multiple of 512: the last column tile is ragged and masked on load, matmul and store.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    k_size, m_size = a.shape
    _, n_size = b.shape
    tile_m = nl.tile_size.gemm_stationary_fmax  # 128
    tile_k = nl.tile_size.pmax  # 128
    tile_n = nl.tile_size.gemm_moving_fmax  # 512
    k_tiles = k_size // tile_k
    n_tiles = (n_size + tile_n - 1) // tile_n
    c = nl.ndarray((m_size, n_size), dtype=a.dtype, buffer=nl.shared_hbm)
    i_k = nl.arange(tile_k)[:, None]
    i_m = nl.arange(tile_m)[:, None]
    i_n = nl.arange(tile_n)[None, :]

    for m in nl.affine_range(m_size // tile_m):
        a_slab = nl.ndarray((k_tiles, nl.par_dim(tile_k), tile_m), dtype=a.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(k_tiles):
            a_slab[k] = nl.load(a[k * tile_k:(k + 1) * tile_k, m * tile_m:(m + 1) * tile_m])

        for n in nl.affine_range(n_tiles):
            cols = n * tile_n + i_n
            acc = nl.zeros((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_tiles):
                b_tile = nl.load(b[k * tile_k + i_k, cols], mask=(cols < n_size))
                acc += nisa.nc_matmul(a_slab[k], b_tile, mask=(cols < n_size))
            result = nl.copy(acc, dtype=c.dtype, mask=(cols < n_size))
            nl.store(c[m * tile_m + i_m, cols], value=result, mask=(cols < n_size))
    return c
