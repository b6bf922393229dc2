import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(v1, v2):
    v3 = nl.ndarray((200, 512), dtype=np.float32, buffer=nl.shared_hbm)
    v4 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, name='m_local', buffer=nl.sbuf)
    v5 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, name='g_local', buffer=nl.sbuf)
    v6 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, name='', buffer=nl.sbuf)
    v7 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, name='', buffer=nl.sbuf)
    v8 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, name='', buffer=nl.sbuf)
    v9 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, name='', buffer=nl.sbuf)
    v10 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, name='', buffer=nl.sbuf)
    v11 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, name='', buffer=nl.sbuf)
    v12 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, name='', buffer=nl.sbuf)
    for i0 in nl.affine_range(2):
        v4[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(v1[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]], dtype=np.float32, mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0)
        v5[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(v2[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]], dtype=np.float32, mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0)
        v6[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(data=v4[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], op0=nl.multiply, operand0=np.dtype(np.float32).type(0.9), reverse0=True, dtype=np.float32, mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0, engine=nki.isa.unknown_engine)
        v7[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(data=v5[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], op0=nl.multiply, operand0=np.dtype(np.float32).type(0.1), reverse0=True, dtype=np.float32, mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0, engine=nki.isa.unknown_engine)
        v8[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.add(v6[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], v7[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0, dtype=np.float32)
        v9[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(data=v5[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], op0=nl.add, operand0=np.dtype(np.float32).type(0.001), reverse0=False, dtype=np.float32, mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0, engine=nki.isa.unknown_engine)
        v10[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.reciprocal(data=v9[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0, dtype=np.float32)
        v11[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(data=v8[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], op0=nl.multiply, operand0=np.dtype(np.float32).type(0.5), reverse0=True, dtype=np.float32, mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0, engine=nki.isa.unknown_engine)
        v12[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.subtract(v11[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], v10[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0, dtype=np.float32)
        nl.store(v3[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]], value=v12[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], mask=-128 * i0 + -1 * nl.arange(128)[:, None] + 199 >= 0)
    return v3
