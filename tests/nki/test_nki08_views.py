"""NKI 0.8's NkiTensor view methods, in kernels written as its documentation writes them: each view is
checked against the same view taken with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt_core.nki import KernelUsageError
from accelopt_core.nki.views import Pattern, flatten_dims, rearrange, reshape_dim

HEADER = """
import nki
import nki.language as nl
import nki.isa as nisa
"""


def copy_through(view: str, out_shape: tuple[int, ...], *, on_chip: bool) -> str:
    """A kernel that copies `x` into SBUF, takes `view` of it (`t`), and stores the view as the output."""
    if on_chip:
        body = f"""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    v = {view}
    res = nl.ndarray(v.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=v)
    nisa.dma_copy(dst=out, src=res)"""
    else:
        body = f"""
    t = x
    v = {view}
    res = nl.ndarray(v.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=res, src=v)
    nisa.dma_copy(dst=out, src=res)"""
    return HEADER + f"""
@nki.jit
def kernel(x):
    out = nl.ndarray({out_shape}, dtype=x.dtype, buffer=nl.shared_hbm){body}
    return out
"""


CASES = [
    # (view written as NKI 0.8 documents it, input shape, the same view in NumPy, on chip)
    ("t.permute((0, 2, 1))", (128, 4, 8), lambda a: a.transpose(0, 2, 1), True),
    ("t.permute((1, 0, 2))", (4, 128, 8), lambda a: a.transpose(1, 0, 2), False),
    ("t.slice(1, 4, 16, 2)", (128, 32), lambda a: a[:, 4:16:2], True),
    ("t.slice(0, 0, 64)", (128, 32), lambda a: a[0:64], True),
    ("t.select(1, 3)", (128, 8, 16), lambda a: a[:, 3], True),
    ("t.reshape_dim(1, (4, 6))", (128, 24), lambda a: a.reshape(128, 4, 6), True),
    ("t.reshape_dim(1, (4, -1))", (128, 24), lambda a: a.reshape(128, 4, 6), True),
    ("t.flatten_dims(1, 2)", (128, 4, 6), lambda a: a.reshape(128, 24), True),
    ("t.expand_dim(1)", (128, 16), lambda a: a[:, None, :], True),
    ("t.squeeze_dim(1)", (128, 1, 16), lambda a: a[:, 0, :], True),
    ("t.broadcast(1, 8)", (128, 1), lambda a: np.broadcast_to(a, (128, 8)), True),
    ("t.rearrange(('b', ('h', 'w')), ('b', 'w', 'h'), {'h': 4})", (128, 24),
     lambda a: a.reshape(128, 4, 6).transpose(0, 2, 1), True),
    ("t.rearrange(('a', 'p', 'b'), ('p', 'a', 'b'))", (4, 128, 6), lambda a: a.transpose(1, 0, 2), False),
    ("t.slice(1, 0, 16).reshape_dim(1, (4, 4)).permute((0, 2, 1))", (128, 32),
     lambda a: a[:, :16].reshape(128, 4, 4).transpose(0, 2, 1), True),
]


@pytest.mark.parametrize(("view", "shape", "expected", "on_chip"), CASES, ids=[c[0] for c in CASES])
def test_a_view_reads_what_numpy_reads(run, rng, view, shape, expected, on_chip):
    x = rng.standard_normal(shape).astype(np.float32)
    want = np.ascontiguousarray(expected(x))
    both = run(copy_through(view, want.shape, on_chip=on_chip), x)
    np.testing.assert_array_equal(both.out, want)


def test_rearrange_of_a_pattern_splits_reorders_and_merges():
    start = Pattern(0, ((24, 128), (1, 24)))
    assert rearrange(start, ("b", ("h", "w")), ("b", "w", "h"), {"h": 4}).steps == ((24, 128), (1, 6), (6, 4))
    assert flatten_dims(reshape_dim(start, 1, (4, 6)), 1, 2) == start


def test_flattening_dimensions_that_are_not_contiguous_is_a_usage_error():
    with pytest.raises(KernelUsageError, match="not contiguous"):
        flatten_dims(Pattern(0, ((24, 128), (1, 6), (6, 4))), 1, 2)


def test_get_pattern_and_a_view_written_through(run, rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    assert t.slice(1, 2, 10, 4).get_pattern() == [[16, 128], [4, 2]]
    assert t.is_contiguous() and not t.slice(1, 0, 16, 2).is_contiguous()
    nisa.dma_copy(dst=out.permute((1, 0)).permute((1, 0)), src=t)
    return out
""", x)
    np.testing.assert_array_equal(both.out, x)


def test_select_with_an_index_read_at_run_time_and_vector_select(run, rng):
    table = rng.standard_normal((6, 128, 8)).astype(np.float32)
    rows = rng.standard_normal((32, 8)).astype(np.float32)
    which = np.array([[4]], dtype=np.int32)
    picks = rng.integers(0, 32, size=(128, 1)).astype(np.int32)
    both = run(HEADER + """
@nki.jit
def kernel(table, rows, which, picks):
    out = nl.ndarray((2, 128, 8), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=which)
    per_row = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=per_row, src=picks)
    got = nl.ndarray((128, 8), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=got, src=table.select(dim=0, index=idx))
    nisa.dma_copy(dst=out[0], src=got)
    gathered = nl.ndarray((128, 8), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=gathered, src=rows.vector_select(0, per_row))
    nisa.dma_copy(dst=out[1], src=gathered)
    return out
""", table, rows, which, picks)
    np.testing.assert_array_equal(both.out[0], table[4])
    np.testing.assert_array_equal(both.out[1], rows[picks[:, 0]])


def test_reinterpret_cast_reads_the_bits_as_another_dtype(run, rng):
    x = rng.standard_normal((128, 4)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t.reinterpret_cast(nl.int32))
    return out
""", x)
    np.testing.assert_array_equal(both.out, x.view(np.int32))


def test_a_block_dimension_is_refused_in_an_nki_kernel_and_kept_in_a_legacy_one(fails, run, rng):
    err = fails(HEADER + """
@nki.jit
def kernel(x):
    t = nl.ndarray((2, nl.par_dim(128), 64), dtype=x.dtype, buffer=nl.sbuf)  # ERR
    return x
""", np.zeros((128, 64), np.float32), error=KernelUsageError)
    assert "no block dimensions" in err.message
    x = rng.standard_normal((128, 64)).astype(np.float32)
    legacy = run("""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((2, nl.par_dim(128), 64), dtype=x.dtype, buffer=nl.sbuf)
    t[1] = nl.load(x)
    nl.store(out, value=t[1])
    return out
""", x)
    np.testing.assert_array_equal(legacy.out, x)
