"""Baseline swiglu. For each 128-row tile of x: load the rows and transpose them on the Tensor
engine, 128 columns at a time through PSUM, so the contraction dim K sits on partitions. For each
512-column slice of the hidden dim N, accumulate the gate and up projections in two PSUM tiles over
K/128 matmuls (loading the matching 128 x 512 slices of Wgate and Wup for each), apply
silu(t) = t / (1 + exp(-t)) to the gate and multiply by the up projection, collecting the 128 x N
hidden rows in SBUF. The hidden rows are then transposed the same way so N sits on partitions, and
each 128 x 512 output tile accumulates N/128 matmuls with 128 x 512 slices of Wdown in PSUM before
being copied to SBUF and stored.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x, w_gate, w_up, w_down):
    m_size, k_size = x.shape
    _, n_size = w_gate.shape
    tile_m = nl.tile_size.gemm_stationary_fmax  # 128 rows of x per tile
    tile_p = nl.tile_size.pmax  # 128: contraction (K, then N) on partitions
    tile_f = nl.tile_size.gemm_moving_fmax  # 512: one PSUM bank of float32
    out = nl.ndarray((m_size, k_size), dtype=x.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(m_size // tile_m):
        x_rows = nl.load(x[m * tile_m:(m + 1) * tile_m, :])
        x_t = nl.ndarray((tile_p, k_size // tile_p * tile_m), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(k_size // tile_p):
            x_t[:, k * tile_m:(k + 1) * tile_m] = nl.copy(nisa.nc_transpose(x_rows[:, k * tile_p:(k + 1) * tile_p]))

        hidden = nl.ndarray((tile_m, n_size), dtype=nl.float32, buffer=nl.sbuf)
        for n in nl.affine_range(n_size // tile_f):
            gate = nl.zeros((tile_m, tile_f), dtype=nl.float32, buffer=nl.psum)
            up = nl.zeros((tile_m, tile_f), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // tile_p):
                wg_tile = nl.load(w_gate[k * tile_p:(k + 1) * tile_p, n * tile_f:(n + 1) * tile_f])
                gate += nisa.nc_matmul(x_t[:, k * tile_m:(k + 1) * tile_m], wg_tile)
            for k in nl.affine_range(k_size // tile_p):
                wu_tile = nl.load(w_up[k * tile_p:(k + 1) * tile_p, n * tile_f:(n + 1) * tile_f])
                up += nisa.nc_matmul(x_t[:, k * tile_m:(k + 1) * tile_m], wu_tile)
            denominator = nl.add(nl.exp(nl.negative(gate)), 1.0)
            activated = nl.divide(gate, denominator)
            hidden[:, n * tile_f:(n + 1) * tile_f] = nl.multiply(activated, up)

        hidden_t = nl.ndarray((tile_p, n_size // tile_p * tile_m), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(n_size // tile_p):
            hidden_t[:, j * tile_m:(j + 1) * tile_m] = nl.copy(
                nisa.nc_transpose(hidden[:, j * tile_p:(j + 1) * tile_p]))

        for c in nl.affine_range(k_size // tile_f):
            acc = nl.zeros((tile_m, tile_f), dtype=nl.float32, buffer=nl.psum)
            for j in nl.affine_range(n_size // tile_p):
                wd_tile = nl.load(w_down[j * tile_p:(j + 1) * tile_p, c * tile_f:(c + 1) * tile_f])
                acc += nisa.nc_matmul(hidden_t[:, j * tile_m:(j + 1) * tile_m], wd_tile)
            result = nl.copy(acc, dtype=out.dtype)
            nl.store(out[m * tile_m:(m + 1) * tile_m, c * tile_f:(c + 1) * tile_f], value=result)
    return out
