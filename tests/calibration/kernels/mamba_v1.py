"""Selective-scan (Mamba) kernel, first NKI version.

Layout: delta, u and the output are [batch, channels, seq]; A is [channels, state]; B and C are
[batch, state, seq]. Channels go on partitions, 128 at a time. For every channel tile and every
state the kernel reloads delta and u, computes the decay exp(delta * A[:, s]) on the Scalar engine
(the A column is the activation's per-partition scale), forms delta * u * B on the Vector engine,
runs the recurrence h = decay * h + delta*u*B along the sequence with one tensor_tensor_scan,
multiplies by C and adds the result into an SBUF output tile, stored once per channel tile.
The B and C rows reach all partitions through a ones-vector matmul (one PSUM bank, so seq <= 512),
and the Vector engine reads that broadcast straight from PSUM.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(delta, u, a, b, c):
    batch, channels, seq = delta.shape
    states = a.shape[1]
    parts = nl.tile_size.pmax
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    ones = nl.ones((1, parts), dtype=nl.float32)
    for bi in nl.affine_range(batch):
        for ct in nl.affine_range(channels // parts):
            lo, hi = ct * parts, (ct + 1) * parts
            a_cols = nl.load(a[lo:hi, :])
            total = nl.zeros((parts, seq), dtype=nl.float32, buffer=nl.sbuf)
            for s in nl.sequential_range(states):
                d_t = nl.load(delta[bi, lo:hi, :])
                u_t = nl.load(u[bi, lo:hi, :])
                decay = nisa.activation(op=nl.exp, data=d_t, scale=a_cols[:, s:s + 1])
                b_all = nisa.nc_matmul(ones, nl.load(b[bi, s:s + 1, :]))
                du = nisa.tensor_tensor(d_t, u_t, op=nl.multiply)
                drive = nisa.tensor_tensor(du, b_all, op=nl.multiply)
                state = nisa.tensor_tensor_scan(decay, drive, initial=0.0, op0=nl.multiply, op1=nl.add)
                c_all = nisa.nc_matmul(ones, nl.load(c[bi, s:s + 1, :]))
                contribution = nisa.tensor_tensor(state, c_all, op=nl.multiply)
                total[...] = nisa.tensor_tensor(total, contribution, op=nl.add)
            nl.store(out[bi, lo:hi, :], value=total)
    return out
