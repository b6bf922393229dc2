import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(q_t, k_t, v):
    """softmax(q @ k.T) @ v for one head; q_t and k_t hold the head dimension on the partitions."""
    d_head, seq_q = q_t.shape
    _, seq_k = k_t.shape
    out = nl.ndarray((seq_q, d_head), dtype=q_t.dtype, buffer=nl.shared_hbm)
    keys = nl.load(k_t)
    for r in nl.affine_range(seq_q // 128):
        queries = nl.load(q_t[:, r * 128:(r + 1) * 128])
        scores = nl.matmul(queries, keys, transpose_x=True)
        row_max = nl.max(scores, axis=[1], keepdims=True)
        e = nl.exp(nl.subtract(scores, row_max))
        total = nl.sum(e, axis=[1], keepdims=True)
        inv = nl.reciprocal(total)
        probs = nl.multiply(e, inv)
        acc = nl.zeros((128, d_head), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range(seq_k // 128):
            p_t = nisa.nc_transpose(probs[:, j * 128:(j + 1) * 128])
            p_t_sb = nl.copy(p_t)
            values = nl.load(v[j * 128:(j + 1) * 128, :])
            acc += nisa.nc_matmul(p_t_sb, values)
        result = nl.copy(acc, dtype=out.dtype)
        nl.store(out[r * 128:(r + 1) * 128, :], value=result)
    return out
