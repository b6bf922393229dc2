import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    m_size, k_size = a.shape
    _, n_size = b.shape
    out = nl.ndarray((m_size, n_size), dtype=a.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // 128):
        rows = nl.load(a[m * 128:(m + 1) * 128, :])  # [M, K]: nl.matmul transposes each slice it is given
        for n in nl.affine_range(2):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // 128):
                w = nl.load(b[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nl.matmul(rows[:, k * 128:(k + 1) * 128], w)
            nl.store(out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=out.dtype))
    return out
