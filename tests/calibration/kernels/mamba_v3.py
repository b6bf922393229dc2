"""Selective-scan (Mamba) kernel, third version: the second version with the sequence cut into
512-column tiles. Each tile's scan starts from the last value of the previous tile's scan for the
same state (kept in a [128, state] carry tile and passed as `initial`), so the recurrence stays
exact while every intermediate is only [128, 512] and nothing spills.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(delta, u, a, b, c):
    batch, channels, seq = delta.shape
    states = a.shape[1]
    parts = nl.tile_size.pmax
    width = min(seq, nl.tile_size.psum_fmax)
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    ones = nl.ones((1, parts), dtype=nl.float32)
    for bi in nl.affine_range(batch):
        for ct in nl.affine_range(channels // parts):
            lo, hi = ct * parts, (ct + 1) * parts
            a_cols = nl.load(a[lo:hi, :])
            carry = nl.zeros((parts, states), dtype=nl.float32, buffer=nl.sbuf)
            for t in nl.static_range(seq // width):
                cols = slice(t * width, (t + 1) * width)
                d_t = nl.load(delta[bi, lo:hi, cols])
                u_t = nl.load(u[bi, lo:hi, cols])
                du = nisa.tensor_tensor(d_t, u_t, op=nl.multiply)
                total = nl.zeros((parts, width), dtype=nl.float32, buffer=nl.sbuf)
                for s in nl.sequential_range(states):
                    b_bank = nisa.nc_matmul(ones, nl.load(b[bi, s:s + 1, cols]))
                    c_bank = nisa.nc_matmul(ones, nl.load(c[bi, s:s + 1, cols]))
                    decay = nisa.activation(op=nl.exp, data=d_t, scale=a_cols[:, s:s + 1])
                    drive = nisa.tensor_tensor(du, b_bank, op=nl.multiply)
                    state = nisa.tensor_tensor_scan(decay, drive, initial=carry[:, s:s + 1],
                                                    op0=nl.multiply, op1=nl.add)
                    carry[:, s:s + 1] = nisa.tensor_copy(state[:, width - 1:width])
                    contribution = nisa.tensor_tensor(state, c_bank, op=nl.multiply)
                    total[...] = nisa.tensor_tensor(total, contribution, op=nl.add)
                nl.store(out[bi, lo:hi, cols], value=total)
    return out
