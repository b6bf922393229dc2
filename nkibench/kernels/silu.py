"""Baseline silu: the formula as written, one 128-row by 512-column tile at a time."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    rows, cols = x.shape
    tile_p = nl.tile_size.pmax
    tile_f = min(cols, 512)
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // tile_p):
        for c in nl.affine_range(cols // tile_f):
            tile = nl.load(x[r * tile_p:(r + 1) * tile_p, c * tile_f:(c + 1) * tile_f])
            denominator = nl.add(nl.exp(nl.negative(tile)), 1.0)
            result = nl.divide(tile, denominator)
            nl.store(out[r * tile_p:(r + 1) * tile_p, c * tile_f:(c + 1) * tile_f], value=result)
    return out
