"""Baseline mamba: channels sit on partitions, in tiles of 128, and each tile holds the whole
sequence on the free axis. Per channel tile, delta, u and A are loaded and delta * u is formed once;
then for each state index s: dA = exp(delta * A[:, s]) on the Scalar engine (A's column as the
per-partition scale), B's row s is loaded and broadcast to all partitions to form dBu = delta * u * B,
the recurrence state = dA * state + dBu runs along the sequence with one tensor_tensor_scan (multiply
then add, starting from 0), and C's row s, broadcast the same way, multiplies the state into the
output accumulator. The accumulated [128, M] tile is stored once all states are summed."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(delta, u, a, b, c):
    channels, length = delta.shape
    states = a.shape[1]
    tile_c = nl.tile_size.pmax
    out = nl.ndarray((channels, length), dtype=delta.dtype, buffer=nl.shared_hbm)

    for ct in nl.affine_range(channels // tile_c):
        rows = slice(ct * tile_c, (ct + 1) * tile_c)
        delta_t = nl.load(delta[rows, 0:length])  # [128 channels, M]
        u_t = nl.load(u[rows, 0:length])
        a_t = nl.load(a[rows, 0:states])  # [128 channels, S]
        delta_u = nl.multiply(delta_t, u_t)

        acc = nl.zeros((tile_c, length), dtype=nl.float32, buffer=nl.sbuf)
        for s in nl.affine_range(states):
            d_a = nisa.activation(op=nl.exp, data=delta_t, scale=a_t[0:tile_c, s:s + 1])
            b_row = nl.load(b[s:s + 1, 0:length])  # [1, M]
            d_bu = nl.multiply(delta_u, nl.broadcast_to(b_row, shape=(tile_c, length)))
            state = nisa.tensor_tensor_scan(d_a, d_bu, initial=0.0, op0=nl.multiply, op1=nl.add)
            c_row = nl.load(c[s:s + 1, 0:length])
            acc[0:tile_c, 0:length] = nl.add(acc, nl.multiply(state, nl.broadcast_to(c_row, shape=(tile_c, length))))
        nl.store(out[rows, 0:length], value=acc)
    return out
