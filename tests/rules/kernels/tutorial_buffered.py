import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    # one buffer for every row tile, declared up front
    buf = nl.ndarray((rows // 128, nl.par_dim(128), cols), dtype=x.dtype, buffer=nl.sbuf)
    for r in nl.affine_range(rows // 128):
        buf[r] = nl.load(x[r * 128:(r + 1) * 128, :])
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.exp(buf[r]))
    return out
