"""Matmul, first tiled version: both operand tiles are loaded inside the contraction loop.
lhs_t is [K, M] (already transposed), rhs is [K, N]; result [M, N]."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(lhs_t, rhs):
    k_size, m_size = lhs_t.shape
    _, n_size = rhs.shape
    result = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // 128):
        for n in nl.affine_range(n_size // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // 128):
                left = nl.load(lhs_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                right = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nisa.nc_matmul(left, right)
            nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=result.dtype))
    return result
