import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(v1, v2, v3):
    v4 = nl.ndarray((2, 64, 2048), dtype=np.float32, buffer=nl.shared_hbm)
    v5 = nl.ndarray((4, nl.par_dim(64), 512), dtype=np.float32, name='x0_local', buffer=nl.sbuf)
    v6 = nl.ndarray((4, nl.par_dim(64), 512), dtype=np.float32, name='x1_local', buffer=nl.sbuf)
    v7 = nl.ndarray((4, nl.par_dim(64), 512), dtype=np.float32, name='cos_local', buffer=nl.sbuf)
    v8 = nl.ndarray((4, nl.par_dim(64), 512), dtype=np.float32, name='sin_local', buffer=nl.sbuf)
    v9 = nl.ndarray((4, nl.par_dim(64), 512), dtype=np.float32, name='', buffer=nl.sbuf)
    v10 = nl.ndarray((4, 2, nl.par_dim(64), 256), dtype=np.float32, name='', buffer=nl.sbuf)
    v11 = nl.ndarray((4, 2, nl.par_dim(64), 256), dtype=np.float32, name='', buffer=nl.sbuf)
    for i0 in nl.affine_range(4):
        v5[i0, nl.arange(64)[:, None], nl.arange(512)[None, :]] = nl.load(v1[0, nl.arange(64)[:, None], 512 * i0 + nl.arange(512)[None, :]], dtype=np.float32, mask=None)
        v6[i0, nl.arange(64)[:, None], nl.arange(512)[None, :]] = nl.load(v1[1, nl.arange(64)[:, None], 512 * i0 + nl.arange(512)[None, :]], dtype=np.float32, mask=None)
        v7[i0, nl.arange(64)[:, None], nl.arange(512)[None, :]] = nl.load(v2[nl.arange(64)[:, None], 512 * i0 + nl.arange(512)[None, :]], dtype=np.float32, mask=None)
        v8[i0, nl.arange(64)[:, None], nl.arange(512)[None, :]] = nl.load(v3[nl.arange(64)[:, None], 512 * i0 + nl.arange(512)[None, :]], dtype=np.float32, mask=None)
        for i1 in nl.affine_range(2):
            v10[i0, i1, nl.arange(64)[:, None], nl.arange(256)[None, :]] = nl.multiply(v5[i0, nl.arange(64)[:, None], 256 * i1 + nl.arange(256)[None, :]], v7[i0, nl.arange(64)[:, None], 256 * i1 + nl.arange(256)[None, :]], mask=None, dtype=np.float32)
            v11[i0, i1, nl.arange(64)[:, None], nl.arange(256)[None, :]] = nl.multiply(v6[i0, nl.arange(64)[:, None], 256 * i1 + nl.arange(256)[None, :]], v8[i0, nl.arange(64)[:, None], 256 * i1 + nl.arange(256)[None, :]], mask=None, dtype=np.float32)
            v9[i0, nl.arange(64)[:, None], 256 * i1 + nl.arange(256)[None, :]] = nl.subtract(v10[i0, i1, nl.arange(64)[:, None], nl.arange(256)[None, :]], v11[i0, i1, nl.arange(64)[:, None], nl.arange(256)[None, :]], mask=None, dtype=np.float32)
            ' end loop i1 '
        nl.store(v4[0, nl.arange(64)[:, None], 512 * i0 + nl.arange(512)[None, :]], value=v9[i0, nl.arange(64)[:, None], nl.arange(512)[None, :]], mask=None)
        nl.store(v4[1, nl.arange(64)[:, None], 512 * i0 + nl.arange(512)[None, :]], value=v6[i0, nl.arange(64)[:, None], nl.arange(512)[None, :]], mask=None)
        ' end loop i0 '
    return v4
