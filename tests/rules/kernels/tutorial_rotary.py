import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x0, x1, cos, sin):
    out0 = nl.ndarray(x0.shape, dtype=x0.dtype, buffer=nl.shared_hbm)
    out1 = nl.ndarray(x1.shape, dtype=x1.dtype, buffer=nl.shared_hbm)
    # x0, x1, cos, sin are [64, n]: half of a head dimension of 128 on the partitions
    for c in nl.affine_range(x0.shape[1] // 512):
        a = nl.load(x0[0:64, c * 512:(c + 1) * 512])
        b = nl.load(x1[0:64, c * 512:(c + 1) * 512])
        co = nl.load(cos[0:64, c * 512:(c + 1) * 512])
        si = nl.load(sin[0:64, c * 512:(c + 1) * 512])
        first = nl.subtract(nl.multiply(a, co), nl.multiply(b, si))
        second = nl.add(nl.multiply(a, si), nl.multiply(b, co))
        nl.store(out0[0:64, c * 512:(c + 1) * 512], value=first)
        nl.store(out1[0:64, c * 512:(c + 1) * 512], value=second)
    return out0, out1
