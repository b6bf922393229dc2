"""Baseline rope_single_freq_apply: the columns are processed in blocks of 2048; for each block the
two halves of x (D/2 rows each, on partitions) and the matching cos and sin blocks are loaded, the
two output halves are computed with the formula as written (four multiplies, a subtract and an add
on the Vector engine, on D/2 = 64 partitions) and stored into the top and bottom halves of the
output."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x, cos, sin):
    d, columns = x.shape
    half = d // 2
    tile_f = min(columns, 2048)
    out = nl.ndarray((d, columns), dtype=x.dtype, buffer=nl.shared_hbm)

    for c in nl.affine_range(columns // tile_f):
        cols = slice(c * tile_f, (c + 1) * tile_f)
        x0 = nl.load(x[0:half, cols])
        x1 = nl.load(x[half:d, cols])
        cos_tile = nl.load(cos[0:half, cols])
        sin_tile = nl.load(sin[0:half, cols])
        top = nl.subtract(nl.multiply(x0, cos_tile), nl.multiply(x1, sin_tile))
        bottom = nl.add(nl.multiply(x0, sin_tile), nl.multiply(x1, cos_tile))
        nl.store(out[0:half, cols], value=top)
        nl.store(out[half:d, cols], value=bottom)
    return out
