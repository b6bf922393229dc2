"""Baseline adamw: the matrix is processed in tiles of 128 rows by 1024 columns; the last row tile
is ragged (M need not be a multiple of 128) and is handled with a mask on the row index in every
load, instruction and store. For each tile, theta, g, m and v are loaded and the update is written
out step by step as the task states it (new first and second moments, bias-corrected second moment,
its square root plus eps, the step, the decayed parameters minus the step) on the Vector and Scalar
engines, and theta' is stored."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(theta, g, m, v):
    rows, cols = theta.shape
    tile_p = nl.tile_size.pmax
    tile_f = min(cols, 1024)
    out = nl.ndarray((rows, cols), dtype=theta.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(tile_p)[:, None]
    i_f = nl.arange(tile_f)[None, :]

    for r in nl.affine_range((rows + tile_p - 1) // tile_p):
        row = r * tile_p + i_p
        valid = row < rows  # switches off the rows past the end in the last, ragged tile
        for c in nl.affine_range(cols // tile_f):
            col = c * tile_f + i_f
            theta_t = nl.load(theta[row, col], mask=valid)
            g_t = nl.load(g[row, col], mask=valid)
            m_t = nl.load(m[row, col], mask=valid)
            v_t = nl.load(v[row, col], mask=valid)

            m_new = nl.add(nl.multiply(m_t, 0.9, mask=valid), nl.multiply(g_t, 0.1, mask=valid), mask=valid)
            g_sq = nl.multiply(g_t, g_t, mask=valid)
            v_new = nl.add(nl.multiply(v_t, 0.999, mask=valid), nl.multiply(g_sq, 0.001, mask=valid), mask=valid)
            v_hat = nl.multiply(v_new, 1000.0, mask=valid)
            denom = nl.add(nl.sqrt(v_hat, mask=valid), 1e-8, mask=valid)
            step = nl.multiply(nl.divide(m_new, denom, mask=valid), 0.01, mask=valid)
            result = nl.subtract(nl.multiply(theta_t, 1.0 - 1e-5, mask=valid), step, mask=valid)
            nl.store(out[row, col], value=result, mask=valid)
    return out
