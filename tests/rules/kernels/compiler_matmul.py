import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(v1, v2):
    v3 = nl.ndarray((256, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    v4 = nl.shared_constant(np.identity(128, dtype=np.float32))
    v5 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, name='identity_local_7', buffer=nl.sbuf)
    v6 = nl.ndarray((2, nl.par_dim(128), 1024), dtype=np.float32, name='rhs_local_3', buffer=nl.sbuf)
    v7 = nl.ndarray((2, nl.par_dim(128), 256), dtype=np.float32, name='lhs_local_2', buffer=nl.sbuf)
    v8 = nl.zeros((2, 2, nl.par_dim(128), 128), dtype=np.float32, name='11.4', buffer=nl.psum, lazy_initialization=True)
    v9 = nl.ndarray((2, 2, nl.par_dim(128), 128), dtype=np.float32, name='lhs_pftranspose_11', buffer=nl.sbuf)
    v10 = nl.zeros((2, 2, nl.par_dim(128), 512), dtype=np.float32, name='', buffer=nl.psum, lazy_initialization=True)
    v11 = nl.ndarray((2, nl.par_dim(128), 1024), dtype=np.float32, name='', buffer=nl.sbuf)
    v5[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(v4[nl.arange(128)[:, None], nl.arange(128)[None, :]], dtype=np.float32, mask=None)
    for i0 in nl.affine_range(2):
        v6[i0, nl.arange(128)[:, None], nl.arange(1024)[None, :]] = nl.load(v2[128 * i0 + nl.arange(128)[:, None], nl.arange(1024)[None, :]], dtype=np.float32, mask=None)
        ' end loop i0 '
    for i1 in nl.affine_range(2):
        v7[i1, nl.arange(128)[:, None], nl.arange(256)[None, :]] = nl.load(v1[128 * i1 + nl.arange(128)[:, None], nl.arange(256)[None, :]], dtype=np.float32, mask=None)
        for i2 in nl.affine_range(2):
            v8[i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.nc_matmul(v7[i1, nl.arange(128)[:, None], 128 * i2 + nl.arange(128)[None, :]], v5[nl.arange(128)[:, None], nl.arange(128)[None, :]], is_stationary_onezero=False, is_moving_onezero=True, mask=None, is_transpose=True)
            v9[i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.copy(v8[i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]], dtype=np.float32, mask=None)
            ' end loop i2 '
        for i3 in nl.affine_range(2):
            for i4 in nl.affine_range(2):
                v10[i1, i3, nl.arange(128)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(v9[i1, i4, nl.arange(128)[:, None], nl.arange(128)[None, :]], v6[i4, nl.arange(128)[:, None], 512 * i3 + nl.arange(512)[None, :]], is_stationary_onezero=False, is_moving_onezero=False, mask=None)
                ' end loop i4 '
            v11[i1, nl.arange(128)[:, None], 512 * i3 + nl.arange(512)[None, :]] = nl.copy(v10[i1, i3, nl.arange(128)[:, None], nl.arange(512)[None, :]], dtype=np.float32, mask=None)
            ' end loop i3 '
        nl.store(v3[128 * i1 + nl.arange(128)[:, None], nl.arange(1024)[None, :]], value=v11[i1, nl.arange(128)[:, None], nl.arange(1024)[None, :]], mask=None)
        ' end loop i1 '
    return v3
