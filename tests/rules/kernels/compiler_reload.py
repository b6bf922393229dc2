import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(v1, v2):
    v3 = nl.ndarray((2, 4, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(2):
        for i1 in nl.affine_range(4):
            v3[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(v2[128 * i1 + nl.arange(128)[:, None], nl.arange(512)[None, :]], dtype=np.float32, mask=None)
    return v1
