"""Matmul blocked in the free dimensions: a 256-row block of lhs_t and a 1024-column block of rhs are
loaded once per (m block, n block) and each tile is reused twice."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TILES_M = 2
TILES_N = 2


@nki.jit
def kernel(lhs_t, rhs):
    k_size, m_size = lhs_t.shape
    _, n_size = rhs.shape
    k_tiles = k_size // 128
    block_m, block_n = 128 * TILES_M, 512 * TILES_N
    result = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(m_size // block_m):
        left = nl.ndarray((k_tiles, nl.par_dim(128), block_m), dtype=lhs_t.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(k_tiles):
            left[k] = nl.load(lhs_t[k * 128:(k + 1) * 128, mb * block_m:(mb + 1) * block_m])
        for nb in nl.affine_range(n_size // block_n):
            right = nl.ndarray((k_tiles, nl.par_dim(128), block_n), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(k_tiles):
                right[k] = nl.load(rhs[k * 128:(k + 1) * 128, nb * block_n:(nb + 1) * block_n])
            for tm in nl.affine_range(TILES_M):
                for tn in nl.affine_range(TILES_N):
                    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(k_tiles):
                        acc += nisa.nc_matmul(left[k, :, tm * 128:(tm + 1) * 128],
                                              right[k, :, tn * 512:(tn + 1) * 512])
                    row = mb * block_m + tm * 128
                    col = nb * block_n + tn * 512
                    nl.store(result[row:row + 128, col:col + 512], value=nl.copy(acc, dtype=result.dtype))
    return result
