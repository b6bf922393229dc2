import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // 128):
        t = nl.load(x[r * 128:(r + 1) * 128, :])
        a = nl.multiply(t, 2.0)  # each step needs the one before
        b = nl.add(a, t)
        c = nl.maximum(b, a)
        nl.store(out[r * 128:(r + 1) * 128, :], value=c)
    return out
