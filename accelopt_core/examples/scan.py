"""First-order linear recurrence h[t] = a[t] * h[t-1] + b[t] (h[-1] = 0) along the free axis.

a and b are [C, T] (C channels, C <= 128 or a multiple of 128; T a multiple of the 512-step tile
or smaller than it). Channels sit on partitions, so each Vector-engine tensor_tensor_scan runs the
recurrence for up to 128 channels over one sequence tile. The sequence tiles depend on each other:
the last column of one tile's result is copied into a [C, 1] carry that seeds the next scan, so that
loop is a sequential_range.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    channels, steps = a.shape
    parts = min(channels, nl.tile_size.pmax)
    tile_t = min(steps, 512)
    h = nl.ndarray((channels, steps), dtype=a.dtype, buffer=nl.shared_hbm)

    for c in nl.affine_range(channels // parts):
        rows = slice(c * parts, (c + 1) * parts)
        carry = nl.zeros((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
        for t in nl.sequential_range(steps // tile_t):
            cols = slice(t * tile_t, (t + 1) * tile_t)
            a_tile = nl.load(a[rows, cols])
            b_tile = nl.load(b[rows, cols])
            h_tile = nisa.tensor_tensor_scan(a_tile, b_tile, initial=carry, op0=nl.multiply, op1=nl.add,
                                             dtype=nl.float32)
            nl.store(h[rows, cols], value=h_tile)
            carry[:, 0:1] = h_tile[:, tile_t - 1:tile_t]
    return h
