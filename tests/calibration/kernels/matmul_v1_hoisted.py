"""Matmul with the stationary operand hoisted: the lhs_t column block of one m tile is loaded once
and reused for every n tile."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(lhs_t, rhs):
    k_size, m_size = lhs_t.shape
    _, n_size = rhs.shape
    k_tiles = k_size // 128
    result = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // 128):
        left = nl.ndarray((k_tiles, nl.par_dim(128), 128), dtype=lhs_t.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(k_tiles):
            left[k] = nl.load(lhs_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
        for n in nl.affine_range(n_size // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_tiles):
                right = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nisa.nc_matmul(left[k], right)
            nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=result.dtype))
    return result
