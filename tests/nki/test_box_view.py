"""Subscripts whose index expressions each step along a grid axis of their own are read and written as
strided views (`Subscript.view`): they must select exactly what NumPy's gather of `numpy_key` selects."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accelopt_core.nki.indexing import arange, normalize


@st.composite
def box_subscripts(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[object, ...]]:
    """A tensor shape and a subscript of ints and one-axis index expressions over a 2-D grid, as
    compiler-style kernels write them (`t[i, j, nl.arange(P)[:, None], nl.arange(F)[None, :] + 64 * k]`)."""
    ndim = draw(st.integers(2, 5))
    dims = tuple(draw(st.integers(1, 9)) for _ in range(ndim))
    grid_dims = draw(st.lists(st.sampled_from(range(ndim)), min_size=1, max_size=2, unique=True))
    key: list[object] = []
    for dim, size in enumerate(dims):
        if dim not in grid_dims:
            key.append(draw(st.integers(0, size - 1)))
            continue
        step = draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))  # negative: a reversed axis
        count = draw(st.integers(1, max(1, (size - 1) // abs(step) + 1)))
        reach = abs(step) * (count - 1)
        start = draw(st.integers(0, size - 1 - reach) if step > 0 else st.integers(reach, size - 1))
        expr = arange(count) * step + start
        grid_axis = grid_dims.index(dim) if len(grid_dims) == 2 else 0
        key.append(expr[:, None] if (len(grid_dims) == 2 and grid_axis == 0) else
                   expr[None, :] if len(grid_dims) == 2 else expr)
    if len(grid_dims) == 2 and draw(st.booleans()):  # the grid's axes in the other order than the tensor's
        first, second = grid_dims
        key[first], key[second] = key[second], key[first]
        if not _fits(key, dims):
            key[first], key[second] = key[second], key[first]
    return dims, tuple(key)


def _fits(key: list[object], dims: tuple[int, ...]) -> bool:
    return all(type(k) is int or 0 <= k.bounds()[0] <= k.bounds()[1] < n  # type: ignore[attr-defined]
               for k, n in zip(key, dims, strict=True))


@settings(max_examples=200, deadline=None)
@given(box_subscripts())
def test_a_box_view_reads_what_the_gather_reads(case: tuple[tuple[int, ...], tuple[object, ...]]) -> None:
    dims, key = case
    data = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
    sub = normalize(key, dims, "t")
    view = sub.view(data)
    assert view is not None
    np.testing.assert_array_equal(view, data[sub.numpy_key()])
    assert np.shares_memory(view, data)


@settings(max_examples=100, deadline=None)
@given(box_subscripts(), st.integers(0, 2**31))
def test_a_masked_write_through_the_view_writes_what_the_gather_writes(
        case: tuple[tuple[int, ...], tuple[object, ...]], seed: int) -> None:
    dims, key = case
    sub = normalize(key, dims, "t")
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(sub.shape).astype(np.float32)
    mask = rng.random(sub.shape) < 0.5
    through_view, through_gather = np.zeros(dims, np.float32), np.zeros(dims, np.float32)
    view = sub.view(through_view)
    np.copyto(view, values, where=mask)
    gathered = sub.numpy_key()
    through_gather[tuple(np.broadcast_to(k, sub.shape)[mask] for k in gathered)] = values[mask]
    np.testing.assert_array_equal(through_view, through_gather)


def test_subscripts_that_are_not_boxes_have_no_view() -> None:
    data = np.zeros((8, 8), np.float32)
    diagonal = normalize((arange(8), arange(8)), (8, 8), "t")  # both dimensions step along one grid axis
    flattened = normalize((0, arange(2)[:, None] * 4 + arange(4)[None, :]), (8, 16), "t")  # two axes in one dim
    broadcast = normalize((arange(4)[:, None], 3 + 0 * arange(5)[None, :]), (8, 8), "t")
    assert diagonal.view(data) is None
    assert flattened.view(np.zeros((8, 16), np.float32)) is None
    assert broadcast.view(data) is None


@st.composite
def affine_subscripts(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[object, ...]]:
    """A 2-D tensor shape and a subscript of two index expressions over a 3-D grid, each a sum of terms with
    coefficients that are often, not always, the digits of a mixed radix (`128 * nl.arange(8)[None, :, None] +
    nl.arange(128)[None, None, :]`), of either sign: some cover their box once, some repeat or skip elements."""
    grid = tuple(draw(st.integers(1, 4)) for _ in range(3))
    axes = draw(st.permutations(range(3)))
    split = draw(st.integers(0, 3))
    key: list[object] = []
    dims: list[int] = []
    for part in (axes[:split], axes[split:]):
        expr = arange(1)[None, None, :] * 0 if not part else None
        digit = 1
        for axis in part:
            coef = draw(st.sampled_from([digit, -digit, digit + 1, 1, 2]))
            term = arange(grid[axis]) * coef
            term = term[:, None, None] if axis == 0 else term[None, :, None] if axis == 1 else term[None, None, :]
            expr = term if expr is None else expr + term
            digit *= grid[axis]
        low, high = expr.bounds()  # type: ignore[union-attr]
        key.append(expr + (-low))  # type: ignore[operator]
        dims.append(high - low + 1 + draw(st.integers(0, 2)))
    return tuple(dims), tuple(key)


@settings(max_examples=300, deadline=None)
@given(affine_subscripts())
def test_an_affine_subscript_said_to_cover_its_box_selects_each_of_its_elements_once(
        case: tuple[tuple[int, ...], tuple[object, ...]]) -> None:
    dims, key = case
    sub = normalize(key, dims, "t")
    flat = np.ravel_multi_index(tuple(np.broadcast_to(k, sub.shape) for k in sub.numpy_key()), dims).ravel()
    box = np.zeros(dims, bool)
    box[tuple(slice(lo, hi) for lo, hi in sub.region)] = True
    once = len(np.unique(flat)) == flat.size and np.array_equal(np.sort(flat), np.flatnonzero(box))
    if sub._covers_box():
        assert once
    if sub._box is False or sub._box is None:  # not a strided box: the set is told apart from its box by marking
        assert (sub.elements(dims)[0] is None) == bool(np.isin(np.flatnonzero(box), flat).all())


def test_the_compilers_block_view_of_columns_covers_its_box_without_marking_it() -> None:
    """`v[i, nl.arange(128)[:, None, None], 128 * nl.arange(8)[None, :, None] + nl.arange(128)[None, None, :]]`
    selects the block's 1024 columns once each: the whole box, told from the coefficients; with a coefficient
    that is not the next digit (256: columns skipped) it is marked and found a gather."""
    whole = normalize((0, arange(128)[:, None, None], 128 * arange(8)[None, :, None] + arange(128)[None, None, :]),
                      (2, 128, 1024), "v")
    sparse = normalize((0, arange(128)[:, None, None], 256 * arange(8)[None, :, None] + arange(128)[None, None, :]),
                       (2, 128, 2048), "v")
    assert whole._covers_box() and whole.elements((2, 128, 1024)) == (None, None)
    assert not sparse._covers_box() and sparse.elements((2, 128, 2048))[0][0] == "gather"
