"""`tensor.ap(pattern, offset)` (newer NKI): element g of the view is the flattened tensor's
`offset + sum(g[k] * step[k])`; nki-library reads and writes most tiles this way."""

from __future__ import annotations

import numpy as np

HEADER = """
import nki
import nki.isa as nisa
import nki.language as nl
"""


def test_a_strided_pattern_reads_every_other_column(run, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    sb = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x)
    even = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=even, src=sb.ap(pattern=[[64, 128], [2, 16]], offset=1))
    nisa.dma_copy(dst=out.ap([[16, 128], [1, 16]]), src=even)
    return out
""", x)
    np.testing.assert_array_equal(both.out, x[:, 1:33:2])
    copy = next(i for i in both.instructions if i.op == "tensor_copy")
    assert (copy.partitions, copy.free_elements) == (128, 16)


def test_a_view_starts_where_it_starts_and_a_zero_step_repeats(run, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 4, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    sb = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x)
    rep = nl.ndarray((128, 4, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=rep, src=sb[:, 8:24].ap([[64, 128], [0, 4], [1, 16]]))
    nisa.dma_copy(dst=out, src=rep)
    return out
""", x)
    np.testing.assert_array_equal(both.out, np.repeat(x[:, None, 8:24], 4, axis=1))


def test_a_pattern_across_rows_gathers_and_a_dtype_reads_the_bytes(run, rng):
    x = rng.standard_normal((4, 32)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    flat = nl.ndarray((1, 128), dtype=nl.int32, buffer=nl.shared_hbm)
    sb = nl.ndarray((1, 128), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x.ap([[128, 1], [1, 128]], 0))
    nisa.dma_copy(dst=flat, src=sb.ap([[128, 1], [1, 128]], dtype=nl.int32))
    return flat
""", x)
    np.testing.assert_array_equal(both.out, x.reshape(1, 128).view(np.int32))


def test_a_pattern_past_the_end_is_an_error_only_where_it_is_used(run, fails, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    kernel = HEADER + """
@nki.jit
def kernel(x):
    sb = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x)
    late = sb.ap(pattern=[[64, 128], [2, 32]], offset=2)  # its last column is one past the row
    tmp = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=tmp, src=USED)  # ERR
    out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tmp)
    return out
"""
    both = run(kernel.replace("USED", "sb.ap(pattern=[[64, 128], [2, 32]], offset=1)"), x)
    np.testing.assert_array_equal(both.out, x[:, 1::2])
    fails(kernel.replace("USED", "late"), x)


def test_a_view_taken_with_a_pattern_or_index_grids_is_sliced_again(run, rng):
    """nki-library's MLP writes `out_tile[0:T, ds(o, n)]` of a tile its allocator made with `.ap()`."""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    sb = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x)
    odd = sb.ap([[64, 128], [2, 32]], offset=1)[0:64, 4:20]
    grid = sb[nl.arange(128)[:, None], nl.arange(64)[None, :]][32:96, 3]
    out = nl.ndarray((64, 17), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:16], src=odd)
    nisa.dma_copy(dst=out[:, 16], src=grid)
    return out
""", x)
    np.testing.assert_array_equal(both.out[:, :16], x[0:64, 9:41:2])
    np.testing.assert_array_equal(both.out[:, 16], x[32:96, 3])


def test_a_pattern_starts_where_an_sbuf_index_says_at_run_time(run, rng):
    """scalar_offset on a dimension the pattern does not walk (nki-library cross_entropy picks each row's
    target logit) and vector_offset, one row per partition (a gather)."""
    logits = rng.standard_normal((4, 32)).astype(np.float32)
    targets = np.array([[3], [31], [0], [17]], dtype=np.int32)
    rows = np.array([[2], [0], [3]], dtype=np.int32)
    both = run(HEADER + """
@nki.jit
def kernel(logits, targets, rows):
    t = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=targets)
    r = nl.ndarray((3, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=r, src=rows)
    picked = nl.ndarray((4, 1), dtype=nl.float32, buffer=nl.sbuf)
    for p in range(4):
        nisa.dma_copy(dst=picked[p:p + 1, :],
                      src=logits.ap(pattern=[[32, 1], [1, 1]], offset=p * 32,
                                    scalar_offset=t.ap(pattern=[[1, 1], [1, 1]], offset=p), indirect_dim=1))
    gathered = nl.ndarray((3, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=gathered, src=logits.ap([[32, 3], [1, 32]], 0, vector_offset=r, indirect_dim=0))
    out = nl.ndarray((4, 33), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:1], src=picked)
    nisa.dma_copy(dst=out[0:3, 1:33], src=gathered)
    return out
""", logits, targets, rows)
    np.testing.assert_array_equal(both.out[:, 0], logits[np.arange(4), targets[:, 0]])
    np.testing.assert_array_equal(both.out[0:3, 1:], logits[rows[:, 0]])
