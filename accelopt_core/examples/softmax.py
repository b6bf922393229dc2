"""Row softmax of an [N, D] matrix (N a multiple of 128, D <= 512), one 128-row tile at a time.

Each tile takes four passes over its rows: the row maximum (reduced with negate=True so it can be
used directly as the activation bias), exp(x - max) as one Scalar-engine activation with that bias,
the row sum of the exponentials, and a multiply by the sum's reciprocal. A straightforward first
version: the sum could instead ride along with the activation as its free reduction.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    n_rows, n_cols = x.shape
    rows = nl.tile_size.pmax  # 128 rows per tile, one per partition
    out = nl.ndarray((n_rows, n_cols), dtype=x.dtype, buffer=nl.shared_hbm)

    for r in nl.affine_range(n_rows // rows):
        tile = nl.load(x[r * rows:(r + 1) * rows, :])
        neg_max = nisa.tensor_reduce(nl.maximum, tile, axis=1, negate=True, keepdims=True)
        shifted_exp = nisa.activation(op=nl.exp, data=tile, bias=neg_max, dtype=nl.float32)
        row_sum = nisa.tensor_reduce(nl.add, shifted_exp, axis=1, keepdims=True)
        inv_sum = nisa.reciprocal(row_sum)
        probs = nisa.tensor_scalar(shifted_exp, nl.multiply, inv_sum, dtype=x.dtype)
        nl.store(out[r * rows:(r + 1) * rows, :], value=probs)
    return out
