"""Indexing: nl.arange / nl.mgrid expressions, affine arithmetic, slices, nl.ds, strides, masks."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt_core.nki import HardwareRuleError, KernelUsageError
from accelopt_core.nki.indexing import compose, normalize

HEADER = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""


def test_arange_partition_and_free(run, rng):
    a = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    t = nl.load(a[i_p, i_f])
    nl.store(out[i_p, i_f], value=t)
    return out
""", a)
    np.testing.assert_array_equal(both.out, a)
    load = both.instructions[0]
    assert load.reads[0].region == ((0, 128), (0, 512))
    assert load.reads[0].contiguous_bytes == 128 * 512 * 4  # whole rows: one contiguous run
    assert load.writes[0].shape == (128, 512)


@pytest.mark.parametrize("form", ["attrs", "unpack"])
def test_mgrid(run, rng, form):
    a = rng.standard_normal((256, 64)).astype(np.float32)
    index = "g = nl.mgrid[0:128, 0:64]\n    ip, ix = g.p, g.x" if form == "attrs" else \
        "ip, ix = nl.mgrid[0:128, 0:64]"
    both = run(HEADER + f"""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    {index}
    for i in nl.affine_range(2):
        t = nl.load(a[i * 128 + ip, ix])
        nl.store(out[i * 128 + ip, ix], value=nl.multiply(t, 2.0))
    return out
""", a)
    np.testing.assert_allclose(both.out, 2 * a)
    loads = [i for i in both.instructions if i.op == "dma_copy" and i.reads[0].tensor == 1]
    assert [inst.reads[0].region for inst in loads] == [((0, 128), (0, 64)), ((128, 256), (0, 64))]


def test_affine_expressions_and_negative_offsets(run, rng):
    a = rng.standard_normal((384, 32)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 32), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(32)[None, :]
    x = nl.load(a[256 + i_p - 128, i_f])    # rows 128..255
    y = nl.load(a[2 * 128 + i_p, 31 - i_f])  # rows 256..383, columns reversed
    nl.store(out[i_p, i_f], value=nl.add(x, y))
    return out
""", a)
    np.testing.assert_allclose(both.out, a[128:256] + a[256:384, ::-1])


def test_slices_partial_keys_and_ellipsis(run, rng):
    a = rng.standard_normal((256, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a[128:256])              # rows only: all columns
    y = nl.load(a[0:128, 256:512])
    z = x[:, 0:256]                      # a view of an SBUF tile
    nl.store(out[...], value=nl.add(z, y))
    return out
""", a)
    np.testing.assert_allclose(both.out, a[128:256, :256] + a[:128, 256:])
    add = next(i for i in both.instructions if i.op == "tensor_tensor")
    assert add.reads[0].region == ((0, 128), (0, 256))
    assert add.reads[0].shape == (128, 256)


def test_integer_block_index_in_front_of_partition_dim(run, rng):
    a = rng.standard_normal((2, 128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    buf = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    for b in nl.affine_range(2):
        buf[b, i_p, i_f] = nl.load(a[b, i_p, i_f])
        nl.store(out[b], value=nl.negative(buf[b, i_p, i_f]))
    return out
""", a)
    np.testing.assert_array_equal(both.out, -a)
    load = both.instructions[0]
    assert load.reads[0].region == ((0, 1), (0, 128), (0, 64))
    assert load.writes[0].region == ((0, 1), (0, 128), (0, 64))


def test_ds_dynamic_slice(run, rng):
    a = rng.standard_normal((256, 1024)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        for j in nl.affine_range(2):
            t = nl.load(a[nl.ds(i * 128, 128), nl.ds(j * 512, 512)])
            nl.store(out[nl.ds(i * 128, 128), nl.ds(j * 512, 512)], value=t)
    return out
""", a)
    np.testing.assert_array_equal(both.out, a)
    assert both.instructions[0].reads[0].contiguous_bytes == 512 * 4


def test_strided_free_axis(run, rng):
    a = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(256)[None, :]
    odd = nl.load(a[i_p, 2 * i_f + 1])
    even = nl.load(a[i_p, i_f * 2])
    nl.store(out, value=nl.subtract(odd, even))
    return out
""", a)
    np.testing.assert_allclose(both.out, a[:, 1::2] - a[:, 0::2])
    odd = both.instructions[0]
    assert odd.reads[0].region == ((0, 128), (1, 512))  # bounding box of the strided access
    assert odd.reads[0].nbytes == 128 * 256 * 4
    assert odd.reads[0].contiguous_bytes == 4  # stride 2: no two touched elements are adjacent


def test_sliced_step(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[:, 1:64:4])
    nl.store(out, value=t)
    return out
""", a)
    np.testing.assert_array_equal(both.out, a[:, 1::4])


def test_free_axes_permuted_by_copy(run, rng):
    a = rng.standard_normal((128, 4, 8)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 8, 4), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_x, i_y = nl.mgrid[0:128, 0:8, 0:4]
    t = nl.load(a)
    u = nl.copy(t[i_p, i_y, i_x])
    nl.store(out, value=u)
    return out
""", a)
    np.testing.assert_array_equal(both.out, a.transpose(0, 2, 1))


RAGGED = HEADER + """
import math

@nki.jit
def kernel(a):
    n, d = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range(math.ceil(n / 128)):
        i_p = t * 128 + nl.arange(128)[:, None]
        x = nl.load(a[i_p, i_f], mask=(i_p < n))
        y = nl.exp(x, mask=(i_p < n))
        nl.store(out[i_p, i_f], value=y, mask=(i_p < n))
    return out
"""


def test_mask_ragged_last_tile(run, rng):
    a = rng.standard_normal((300, 64)).astype(np.float32)
    both = run(RAGGED, a)
    np.testing.assert_allclose(both.out, np.exp(a), rtol=1e-6)
    loads = [i for i in both.instructions if i.op == "dma_copy" and i.attrs["direction"] == "hbm_to_sbuf"]
    assert [i.partitions for i in loads] == [128, 128, 44]
    assert loads[-1].reads[0].nbytes == 44 * 64 * 4
    assert loads[-1].reads[0].region == ((256, 300), (0, 64))  # clipped to the tensor
    exps = [i for i in both.instructions if i.op == "activation"]
    assert [i.partitions for i in exps] == [128, 128, 44]
    stores = [i for i in both.instructions if i.op == "dma_copy" and i.attrs["direction"] == "sbuf_to_hbm"]
    assert stores[-1].writes[0].nbytes == 44 * 64 * 4


def test_mask_on_free_axis_limits_the_work(run, rng):
    a = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    x = nl.load(a)
    y = nl.zeros((128, 512), dtype=nl.float32)
    y[i_p, i_f] = nl.square(x[i_p, i_f], mask=((i_p < 64) & (i_f < 256)))
    nl.store(out, value=y)
    return out
""", a)
    expected = np.zeros_like(a)
    expected[:64, :256] = a[:64, :256] ** 2
    np.testing.assert_allclose(both.out, expected, rtol=1e-6)
    square = next(i for i in both.instructions if i.op == "activation")
    assert (square.partitions, square.free_elements) == (64, 256)


def test_out_of_bounds_index_without_mask_is_an_error(fails):
    err = fails(RAGGED.replace("mask=(i_p < n))\n        y", "mask=None)  # ERR\n        y"),
                np.zeros((300, 64), np.float32), error=HardwareRuleError)
    assert "out of bounds" in err.message
    assert "[256, 383]" in err.message and "size 300" in err.message


@pytest.mark.parametrize("index", ["a[0:256, :]", "a[128 + nl.arange(128)[:, None], nl.arange(64)[None, :]]",
                                   "a[200, 0]", "a[:, 0:65]", "a[:, -1:]"])
def test_out_of_bounds_subscripts(fails, index):
    err = fails(HEADER + f"""
@nki.jit
def kernel(a):
    t = nl.load({index})  # ERR
    return a
""", np.zeros((200, 64), np.float32), error=HardwareRuleError)
    assert "out of bounds" in err.message


def test_negative_slice_bounds_count_from_the_end_only_when_asked():
    """The newer API's tensors take Python's negative slice bounds (the tensor says so); the legacy API refuses
    one as an offset computed out of bounds, also on a view."""
    last_two = (slice(None), slice(-2, None))
    assert normalize(last_two, (4, 8), "t", from_the_end=True).region == ((0, 4), (6, 8))
    with pytest.raises(HardwareRuleError, match="out of bounds"):
        normalize(last_two, (4, 8), "t")
    view = normalize((slice(None), slice(2, 8)), (4, 8), "t")
    assert compose(view, last_two, "t", (4, 8), from_the_end=True).region == ((0, 4), (6, 8))
    with pytest.raises(HardwareRuleError, match="out of bounds"):
        compose(view, last_two, "t", (4, 8))


def test_mask_that_does_not_cover_the_overhang_is_an_error(fails):
    # The docs only show masks that cut exactly at the tensor edge; what the compiler does with a
    # mask that lets out-of-bounds elements through is not documented. We reject it.
    err = fails(HEADER + """
@nki.jit
def kernel(a):
    i_p = 128 + nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    t = nl.load(a[i_p, i_f], mask=(i_p < 250))  # ERR
    return a
""", np.zeros((200, 64), np.float32), error=HardwareRuleError)
    assert "out of bounds" in err.message


def test_mixing_slices_and_aranges_is_rejected(fails):
    err = fails(HEADER + """
@nki.jit
def kernel(a):
    i_p = nl.arange(128)[:, None]
    t = nl.load(a[i_p, 0:64])  # ERR
    return a
""", np.zeros((128, 64), np.float32), error=KernelUsageError)
    assert "cannot mix slices" in err.message


def test_an_integer_partition_index_on_chip_is_one_partition(run, rng):
    """sb[0, :] of a [128, T] SBUF tensor is T elements on partition 0, not T partitions (nki-library
    find_nonzero_indices: a DMA into sb[0, :] with T = 256 stopped on the partition limit)."""
    x = rng.standard_normal((1, 256)).astype(np.float32)
    both = run("""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x):
    sb = nl.ndarray((128, 4, 256), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(src=x, dst=sb[0, 2, :])
    out = nl.ndarray((1, 256), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(src=sb[0, 2, :], dst=out[0, :])
    return out
""", x)
    np.testing.assert_array_equal(both.out, x)
    load = next(i for i in both.instructions if i.op == "dma_copy")
    assert (load.partitions, load.free_elements) == (1, 256)


@pytest.mark.parametrize("columns", [128, 64])
def test_a_load_transpose2d_mask_is_written_over_the_source(run, rng, columns):
    """`nl.load_transpose2d(x[i * 128 + i_r, i_c], mask=(i * 128 + i_r < n))`: the mask names the source
    rows of the ragged last block, which become the result's columns."""
    x = rng.standard_normal((200, columns)).astype(np.float32)
    both = run(HEADER + f"""
@nki.jit
def kernel(x):
    n, m = x.shape
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        i_r = nl.arange(128)[:, None]
        i_c = nl.arange({columns})[None, :]
        t = nl.load_transpose2d(x[i * 128 + i_r, i_c], mask=(i * 128 + i_r < n))
        i_o = nl.arange(128)[None, :]
        nl.store(out[nl.arange({columns})[:, None], i * 128 + i_o], value=t, mask=(i * 128 + i_o < n))
    return out
""", x)
    np.testing.assert_array_equal(both.out, x.T)


def test_a_dma_into_one_element_of_an_on_chip_tile(run):
    """dma_copy(dst=sb[0, 0], src=s[1, 0]) (nki-library attention_cte's sink): an internal IndexError, then
    a write into a copy of the element."""
    s = np.array([[2.0], [7.0]], dtype=np.float32)
    both = run("""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(s):
    sb = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=sb, value=0.0)
    nisa.dma_copy(dst=sb[0, 0], src=s[1, 0])
    out = nl.ndarray((2, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=sb[0:2, 0:1])
    return out
""", s)
    np.testing.assert_array_equal(both.out, [[7.0], [0.0]])


def test_a_column_taken_with_an_integer_is_indexed_again_as_its_one_column_layout(run, rng):
    """b[:, 3] of an SBUF tensor is a [P] tile laid out [P, 1]; nki-library's attention then takes
    bound[:num_p, :1] of it."""
    x = rng.standard_normal((128, 8)).astype(np.float32)
    both = run("""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x):
    sb = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x)
    column = sb[:, 3]
    out = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=column[:64, :1])
    return out
""", x)
    np.testing.assert_array_equal(both.out, x[:64, 3:4])


def test_a_whole_tensor_s_subscript_is_made_once_per_shape():
    """Every instruction's result and whole-tensor reference asks for the whole subscript of its shape: one
    shared object per shape, selecting every element."""
    from accelopt_core.nki.indexing import full_subscript

    whole = full_subscript((128, 512))
    assert full_subscript((128, 512)) is whole
    assert full_subscript((128, 256)) is not whole
    assert whole.shape == (128, 512) and whole.region == ((0, 128), (0, 512))


def test_a_block_s_element_set_is_worked_out_once_and_run_time_indices_never_shared():
    """A strided block's element set is kept for the tensor shape it was asked for (each instruction reading the
    block asks again); indices read at run time get a key of their own every time."""
    from accelopt_core.nki.indexing import DynamicIndex, Subscript, normalize

    strided = normalize((slice(0, 128, 1), slice(0, 512, 2)), (128, 1024), "t")
    first = strided.elements((128, 1024))
    assert first[0] is not None and first[1] is None
    assert strided.elements((128, 1024))[0] is first[0]
    assert strided.elements((128, 2048)) == strided._elements((128, 2048))

    class Indices:  # a tile of indices, as DynamicIndex reads it when the instruction runs
        shape = (1, 1)
        storage = None

    dynamic = Subscript((DynamicIndex(Indices(), 4, 1, 0),), (4,), ((0, 16),), True)
    assert dynamic.elements((16,))[0] != dynamic.elements((16,))[0]


def test_a_compiler_style_subscript_remade_each_iteration_is_worked_out_once():
    """`t[i, nl.arange(128)[:, None], nl.arange(512)[None, :]]` makes new index expressions on every iteration of
    its loop: the same numbers on the same tensor give the same subscript; other numbers, another tensor's
    name (an overhang's message names it) or indices given as values do not."""
    from accelopt_core.nki.indexing import IndexExpr, normalize

    def rows_and_columns(offset: int = 0) -> tuple[IndexExpr, IndexExpr]:
        return IndexExpr((128, 1), 0, ((0, 1),)), IndexExpr((1, 512), offset, ((1, 1),))

    first = normalize((3, *rows_and_columns()), (8, 128, 1024), "v4")
    assert normalize((3, *rows_and_columns()), (8, 128, 1024), "v4") is first
    assert normalize((4, *rows_and_columns()), (8, 128, 1024), "v4") is not first
    assert normalize((3, *rows_and_columns(512)), (8, 128, 1024), "v4").region[2] == (512, 1024)
    assert normalize((3, *rows_and_columns()), (8, 128, 1024), "v5") is not first
    ragged = normalize((*rows_and_columns(600),), (128, 1024), "a")
    assert "of a " in ragged.overhang and "of b " in normalize((*rows_and_columns(600),), (128, 1024), "b").overhang
    rows, columns = rows_and_columns()
    given = IndexExpr((1, 512), values=columns.values)
    assert normalize((rows, given), (128, 1024), "v4") is not normalize((rows, given), (128, 1024), "v4")
