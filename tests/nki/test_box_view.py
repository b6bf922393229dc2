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
