"""Baseline bmm C[b] = A[b] @ B[b] (float32), K <= 128. For each batch, B[b] (K x N, contraction dim
already on partitions) is loaded once; for each 128-row block of A[b], the 128 x K block is loaded and
transposed on the Tensor engine so K sits on partitions, and each 128x512 tile of C[b] is then a single
matmul (stationary: the transposed A block, moving: 512 columns of B[b]), copied out of PSUM and stored.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    batch, m_size, k_size = a.shape
    _, _, n_size = b.shape
    tile_m = nl.tile_size.gemm_stationary_fmax  # 128
    tile_n = nl.tile_size.gemm_moving_fmax  # 512
    assert k_size <= nl.tile_size.pmax, "the contraction dim must fit on the partitions"
    c = nl.ndarray((batch, m_size, n_size), dtype=a.dtype, buffer=nl.shared_hbm)

    for i in nl.affine_range(batch):
        b_all = nl.load(b[i])
        for m in nl.affine_range(m_size // tile_m):
            a_tile = nl.load(a[i, m * tile_m:(m + 1) * tile_m, :])
            a_t = nl.copy(nisa.nc_transpose(a_tile))
            for n in nl.affine_range(n_size // tile_n):
                product = nisa.nc_matmul(a_t, b_all[:, n * tile_n:(n + 1) * tile_n])
                result = nl.copy(product, dtype=c.dtype)
                nl.store(c[i, m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n], value=result)
    return c
