"""Baseline matmul_add_rmsnorm. The gain g is loaded once as a single row and broadcast across the
128 partitions (512 columns per broadcast, one PSUM bank each). For each 128-row tile of x: load
the rows and transpose them on the Tensor engine, 128 columns at a time through PSUM, so the
contraction dim K sits on partitions; for each 512-column slice of the output, accumulate K/128
matmuls in PSUM (loading the matching 128 x 512 slice of W for each) and add the loaded slice of z,
collecting the full 128 x N rows of y in SBUF. Then square y, take the mean over the free axis,
add eps, take the square root, multiply y by the broadcast gain and divide by that root, and store
the rows.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

EPS = 1e-5


@nki.jit
def kernel(x, w, z, g):
    m_size, k_size = x.shape
    _, n_size = w.shape
    tile_m = nl.tile_size.gemm_stationary_fmax  # 128 rows of x per tile
    tile_k = nl.tile_size.pmax  # 128: contraction on partitions
    tile_n = nl.tile_size.gemm_moving_fmax  # 512: one PSUM bank of float32
    out = nl.ndarray((m_size, n_size), dtype=x.dtype, buffer=nl.shared_hbm)

    g_row = nl.load(g.reshape((1, n_size)))
    gain = nl.ndarray((tile_m, n_size), dtype=g.dtype, buffer=nl.sbuf)
    for c in nl.affine_range(n_size // tile_n):
        gain[:, c * tile_n:(c + 1) * tile_n] = nl.broadcast_to(g_row[:, c * tile_n:(c + 1) * tile_n],
                                                                shape=(tile_m, tile_n))

    for m in nl.affine_range(m_size // tile_m):
        x_rows = nl.load(x[m * tile_m:(m + 1) * tile_m, :])
        x_t = nl.ndarray((tile_k, k_size // tile_k * tile_m), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(k_size // tile_k):
            x_t[:, k * tile_m:(k + 1) * tile_m] = nl.copy(nisa.nc_transpose(x_rows[:, k * tile_k:(k + 1) * tile_k]))

        y = nl.ndarray((tile_m, n_size), dtype=nl.float32, buffer=nl.sbuf)
        for n in nl.affine_range(n_size // tile_n):
            acc = nl.zeros((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // tile_k):
                w_tile = nl.load(w[k * tile_k:(k + 1) * tile_k, n * tile_n:(n + 1) * tile_n])
                acc += nisa.nc_matmul(x_t[:, k * tile_m:(k + 1) * tile_m], w_tile)
            z_tile = nl.load(z[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n])
            y[:, n * tile_n:(n + 1) * tile_n] = nl.add(acc, z_tile)

        mean_sq = nl.mean(nl.square(y), axis=1, keepdims=True)
        rms = nl.sqrt(nl.add(mean_sq, EPS))
        result = nl.divide(nl.multiply(y, gain), rms)
        nl.store(out[m * tile_m:(m + 1) * tile_m, :], value=result)
    return out
