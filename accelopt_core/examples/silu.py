"""SiLU y = x * sigmoid(x), element-wise over an [M, N] matrix of any shape.

The matrix is cut into 128 x 512 tiles; the last row and column tiles may be ragged, so every
load, compute and store carries a mask that switches off the elements past the edge. sigmoid runs
on the Scalar engine and the product on the Vector engine (nl.silu would do both in one
activation; this is the two-instruction first version).
"""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    m_size, n_size = x.shape
    tile_m = nl.tile_size.pmax
    tile_n = 512
    out = nl.ndarray((m_size, n_size), dtype=x.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(math.ceil(m_size / tile_m)):
        for n in nl.affine_range(math.ceil(n_size / tile_n)):
            i_p = m * tile_m + nl.arange(tile_m)[:, None]
            i_f = n * tile_n + nl.arange(tile_n)[None, :]
            inside = (i_p < m_size) & (i_f < n_size)
            tile = nl.load(x[i_p, i_f], mask=inside)
            gate = nl.sigmoid(tile, mask=inside)
            result = nl.multiply(tile, gate, mask=inside)
            nl.store(out[i_p, i_f], value=result, mask=inside)
    return out
