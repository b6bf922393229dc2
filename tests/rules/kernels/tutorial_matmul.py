import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a_t, b):
    k_size, m_size = a_t.shape
    _, n_size = b.shape
    out = nl.ndarray((m_size, n_size), dtype=a_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // 128):
        for n in nl.affine_range(n_size // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // 128):
                # prepared on the Vector engine, multiplied on the Tensor engine
                lhs = nl.multiply(nl.load(a_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128]), 0.5)
                w = nl.load(b[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nl.matmul(lhs, w, transpose_x=True)
            result = nl.copy(acc, dtype=out.dtype)
            nl.store(out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=result)
    return out
