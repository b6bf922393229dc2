"""Matmul blocked in all three dimensions (16 x 2 x 8 tiles per block): per (n block, m block) the
contraction runs as a sequential loop over K blocks, each loading one lhs_t and one rhs block with
large DMAs, and partial sums accumulate in an SBUF result block that is stored once at the end."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TILES_M = 16
TILES_N = 2
TILES_K = 8


@nki.jit
def kernel(lhs_t, rhs):
    k_size, m_size = lhs_t.shape
    _, n_size = rhs.shape
    block_m, block_n, block_k = 128 * TILES_M, 512 * TILES_N, 128 * TILES_K
    result = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for nb in nl.affine_range(n_size // block_n):
        for mb in nl.affine_range(m_size // block_m):
            partial = nl.zeros((TILES_M, TILES_N, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
            for kb in nl.sequential_range(k_size // block_k):
                left = nl.ndarray((TILES_K, nl.par_dim(128), block_m), dtype=lhs_t.dtype, buffer=nl.sbuf)
                right = nl.ndarray((TILES_K, nl.par_dim(128), block_n), dtype=rhs.dtype, buffer=nl.sbuf)
                for k in nl.affine_range(TILES_K):
                    row = kb * block_k + k * 128
                    left[k] = nl.load(lhs_t[row:row + 128, mb * block_m:(mb + 1) * block_m])
                    right[k] = nl.load(rhs[row:row + 128, nb * block_n:(nb + 1) * block_n])
                for tm in nl.affine_range(TILES_M):
                    for tn in nl.affine_range(TILES_N):
                        acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(TILES_K):
                            acc += nisa.nc_matmul(left[k, :, tm * 128:(tm + 1) * 128],
                                                  right[k, :, tn * 512:(tn + 1) * 512])
                        partial[tm, tn] = nl.add(partial[tm, tn], acc)
            for tm in nl.affine_range(TILES_M):
                for tn in nl.affine_range(TILES_N):
                    row = mb * block_m + tm * 128
                    col = nb * block_n + tn * 512
                    nl.store(result[row:row + 128, col:col + 512], value=nl.copy(partial[tm, tn], dtype=result.dtype))
    return result
