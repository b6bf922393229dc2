"""A chain of dependent one-element Scalar-engine activations (perf guide Opt #5a's situation):
each tanh reads the previous one's result, so nothing overlaps and every step pays the engine's
fixed overhead."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

STEPS = 8


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    value = nl.load(x)
    for _ in nl.static_range(STEPS):
        value = nisa.activation(op=nl.tanh, data=value)
    nl.store(out, value=value)
    return out
