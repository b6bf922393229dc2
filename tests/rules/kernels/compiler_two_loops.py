import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(v1):
    v2 = nl.ndarray((256, 512), dtype=np.float32, buffer=nl.shared_hbm)
    v3 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    v4 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(2):
        v3[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(v1[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]])
    for i1 in nl.affine_range(2):
        v4[0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.exp(v3[i1, nl.arange(128)[:, None], nl.arange(512)[None, :]])
        nl.store(v2[128 * i1 + nl.arange(128)[:, None], nl.arange(512)[None, :]], value=v4[0, nl.arange(128)[:, None], nl.arange(512)[None, :]])
    return v2
