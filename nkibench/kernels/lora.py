"""Baseline lora out = x @ W + (x @ A) @ B (float32), R <= 128. A (K x R) is loaded once. For each
128-row block of x, the block is loaded and its 128x128 pieces are transposed on the Tensor engine
(contraction dim on partitions); (x @ A)^T for the block (R x 128) is accumulated over K in PSUM with A
as the stationary operand and kept in SBUF. Each 128x512 output tile then accumulates the K/128 matmuls
of x @ W in PSUM (a 128x512 tile of W loaded for each), computes its low-rank part (x @ A) @ B with one
matmul against a 128x512 tile of B, adds the two on the Vector engine and stores the sum.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x, w, a, b):
    m_size, k_size = x.shape
    _, n_size = w.shape
    _, rank = a.shape
    tile_m = nl.tile_size.gemm_stationary_fmax  # 128
    tile_k = nl.tile_size.pmax  # 128
    tile_n = nl.tile_size.gemm_moving_fmax  # 512
    assert rank <= nl.tile_size.pmax, "the rank must fit on the partitions"
    k_tiles = k_size // tile_k
    out = nl.ndarray((m_size, n_size), dtype=x.dtype, buffer=nl.shared_hbm)

    a_sb = nl.ndarray((k_tiles, nl.par_dim(tile_k), rank), dtype=a.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(k_tiles):
        a_sb[k] = nl.load(a[k * tile_k:(k + 1) * tile_k, :])

    for m in nl.affine_range(m_size // tile_m):
        x_rows = nl.load(x[m * tile_m:(m + 1) * tile_m, :])
        x_t = nl.ndarray((k_tiles, nl.par_dim(tile_k), tile_m), dtype=x.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(k_tiles):
            x_t[k] = nl.copy(nisa.nc_transpose(x_rows[:, k * tile_k:(k + 1) * tile_k]))

        xa_acc = nl.zeros((rank, tile_m), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(k_tiles):
            xa_acc += nisa.nc_matmul(a_sb[k], x_t[k])
        xa_t = nl.copy(xa_acc, dtype=x.dtype)

        for n in nl.affine_range(n_size // tile_n):
            acc = nl.zeros((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_tiles):
                w_tile = nl.load(w[k * tile_k:(k + 1) * tile_k, n * tile_n:(n + 1) * tile_n])
                acc += nisa.nc_matmul(x_t[k], w_tile)
            b_tile = nl.load(b[:, n * tile_n:(n + 1) * tile_n])
            low_rank = nl.copy(nisa.nc_matmul(xa_t, b_tile))
            result = nl.add(acc, low_rank, dtype=out.dtype)
            nl.store(out[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n], value=result)
    return out
