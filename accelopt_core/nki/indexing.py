"""Index expressions (`nl.arange`, `nl.mgrid`, affine arithmetic on them), masks, and subscripts.

An `IndexExpr` stays in affine form (offset + sum of coefficient x grid position) as long as the
kernel only adds, subtracts and scales it, so that its bounds are known without building an array;
this keeps trace-only mode fast. Anything else (`//`, `%`, products of two expressions) falls back
to a materialised NumPy array.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .errors import HardwareRuleError, KernelUsageError, UnsupportedApiError

Term = tuple[int, int]  # (axis of the broadcast grid, coefficient)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcasting of two shapes, in plain Python: subscripts broadcast their index shapes on
    every instruction operand, where np.broadcast_shapes costs more than the rest of the subscript."""
    if a == b or not b:
        return a
    if not a:
        return b
    width = max(len(a), len(b))
    shape = []
    for x, y in zip((1,) * (width - len(a)) + a, (1,) * (width - len(b)) + b, strict=True):
        if x != y and x != 1 and y != 1:
            raise KernelUsageError(f"index shapes {a} and {b} do not broadcast")
        shape.append(y if x == 1 else x)
    return tuple(shape)


class IndexExpr:
    """An integer index array over a grid of `shape`, usually affine in the grid position."""

    __slots__ = ("_values", "offset", "shape", "terms")

    def __init__(self, shape: tuple[int, ...], offset: int = 0, terms: tuple[Term, ...] = (),
                 values: np.ndarray | None = None):
        self.shape = shape
        self.offset = offset
        self.terms = terms
        self._values = values

    @property
    def affine(self) -> bool:
        return self._values is None

    @property
    def values(self) -> np.ndarray:
        if self._values is None:
            out = np.full(self.shape, self.offset, dtype=np.int64)
            for axis, coef in self.terms:
                grid_shape = [1] * len(self.shape)
                grid_shape[axis] = self.shape[axis]
                out = out + coef * np.arange(self.shape[axis], dtype=np.int64).reshape(grid_shape)
            return out
        return self._values

    def bounds(self) -> tuple[int, int]:
        """Smallest and largest value, inclusive."""
        if self._values is None:
            lo = hi = self.offset
            for axis, coef in self.terms:
                span = coef * (self.shape[axis] - 1)
                if span > 0:
                    hi += span
                else:
                    lo += span
            return lo, hi
        return int(self._values.min()), int(self._values.max())

    def single_stride(self) -> int | None:
        """Step between consecutive values when one grid axis varies (0 for a constant), else None."""
        if self._values is not None or len(self.terms) > 1:
            return None
        return self.terms[0][1] if self.terms else 0

    # --- reshaping with [:, None] and friends -------------------------------------------------
    def __getitem__(self, key: Any) -> IndexExpr:
        key = key if isinstance(key, tuple) else (key,)
        new_shape: list[int] = []
        axis_map: dict[int, int] = {}
        src = 0
        for item in key:
            if item is None:
                new_shape.append(1)
            elif isinstance(item, slice) and item == slice(None):
                axis_map[src] = len(new_shape)
                new_shape.append(self.shape[src])
                src += 1
            else:
                raise KernelUsageError("index expressions only support [:, None]-style reshaping")
        while src < len(self.shape):
            axis_map[src] = len(new_shape)
            new_shape.append(self.shape[src])
            src += 1
        if self._values is not None:
            return IndexExpr(tuple(new_shape), values=self._values.reshape(new_shape))
        terms = tuple((axis_map[axis], coef) for axis, coef in self.terms)
        return IndexExpr(tuple(new_shape), self.offset, terms)

    # --- arithmetic --------------------------------------------------------------------------
    def _aligned_terms(self, ndim: int) -> tuple[Term, ...]:
        shift = ndim - len(self.shape)
        return tuple((axis + shift, coef) for axis, coef in self.terms)

    def __add__(self, other: Any) -> IndexExpr:
        if isinstance(other, IndexExpr):
            shape = _broadcast(self.shape, other.shape)
            if self.affine and other.affine:
                merged: dict[int, int] = {}
                for axis, coef in self._aligned_terms(len(shape)) + other._aligned_terms(len(shape)):
                    merged[axis] = merged.get(axis, 0) + coef
                terms = tuple((a, c) for a, c in sorted(merged.items()) if c and shape[a] > 1)
                return IndexExpr(shape, self.offset + other.offset, terms)
            return IndexExpr(shape, values=self.values + other.values)
        other = _as_int(other)
        if self.affine:
            return IndexExpr(self.shape, self.offset + other, self.terms)
        return IndexExpr(self.shape, values=self._values + other)

    __radd__ = __add__

    def __neg__(self) -> IndexExpr:
        return self * -1

    def __sub__(self, other: Any) -> IndexExpr:
        return self + (-other)

    def __rsub__(self, other: Any) -> IndexExpr:
        return (-self) + other

    def __mul__(self, other: Any) -> IndexExpr:
        if isinstance(other, IndexExpr):
            shape = _broadcast(self.shape, other.shape)
            return IndexExpr(shape, values=self.values * other.values)
        other = _as_int(other)
        if self.affine:
            return IndexExpr(self.shape, self.offset * other, tuple((a, c * other) for a, c in self.terms))
        return IndexExpr(self.shape, values=self._values * other)

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> IndexExpr:
        return IndexExpr(self.shape, values=self.values // _values_of(other))

    def __mod__(self, other: Any) -> IndexExpr:
        return IndexExpr(self.shape, values=self.values % _values_of(other))

    # --- comparisons build masks ---------------------------------------------------------------
    def __lt__(self, other: Any) -> Mask:
        return Mask(self.values < _values_of(other))

    def __le__(self, other: Any) -> Mask:
        return Mask(self.values <= _values_of(other))

    def __gt__(self, other: Any) -> Mask:
        return Mask(self.values > _values_of(other))

    def __ge__(self, other: Any) -> Mask:
        return Mask(self.values >= _values_of(other))

    def __eq__(self, other: Any) -> Mask:  # type: ignore[override]
        return Mask(self.values == _values_of(other))

    def __ne__(self, other: Any) -> Mask:  # type: ignore[override]
        return Mask(self.values != _values_of(other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IndexExpr(shape={self.shape}, bounds={self.bounds()})"


_run_time_keys = itertools.count()  # one key per access whose indices are read at run time


class DynamicIndex(IndexExpr):
    """Indices read from a tile at run time (indirect DMA). The tile is an operand of the instruction
    and the positions it may address are the whole dimension. Its values count in the dimension it
    indexes, of `size` positions, which may be a view of step `step` from `start` of the tensor; they
    are read when the instruction that uses them runs, as the DMA engine reads them (numeric mode
    only; zeros when tracing), clipped into that dimension so masked-off garbage never addresses
    outside, and `check` rejects an active element whose index is out of range."""

    __slots__ = ("size", "source", "start", "step")

    def __init__(self, source: Any, size: int, step: int = 1, start: int = 0):
        super().__init__(tuple(source.shape), values=_UNREAD)
        self.source = source
        self.size = size
        self.step = step
        self.start = start

    @property
    def raw(self) -> np.ndarray:
        """The indices the source tile holds now."""
        tile = self.source
        if tile.storage.data is None:
            return np.zeros(tile.shape, dtype=np.int64)
        data = np.asarray(tile.read())
        if data.dtype.kind == "f" and not np.all(np.isfinite(data) & (data == np.floor(data))):
            raise KernelUsageError(f"indices in {tile.name} must be integers")
        return data.astype(np.int64)

    @property
    def values(self) -> np.ndarray:
        return np.clip(self.raw, 0, self.size - 1) * self.step + self.start

    def bounds(self) -> tuple[int, int]:
        return self.start, self.start + (self.size - 1) * self.step

    def mapped(self, step: int, start: int) -> DynamicIndex:
        """The same indices, addressing the tensor a view of step `step` from `start` was taken from."""
        return DynamicIndex(self.source, self.size, self.step * step, self.start * step + start)

    def check(self, name: str, active: np.ndarray | None, shape: tuple[int, ...]) -> None:
        raw = self.raw
        outside = np.broadcast_to((raw < 0) | (raw >= self.size), shape)
        if active is not None:
            outside = outside & active
        if outside.any():
            bad = np.broadcast_to(raw, shape)[outside]
            raise HardwareRuleError(f"indirect index {int(bad[0])} from {self.source.name} is out of bounds for "
                                    f"{name} (size {self.size})")


_UNREAD = np.zeros(0, dtype=np.int64)  # a DynamicIndex's stand-in for stored values: it reads them when used


def _as_int(value: Any) -> int:
    if isinstance(value, (int, np.integer)):
        return int(value)
    raise KernelUsageError(f"index arithmetic needs integers, got {type(value).__name__}")


def _values_of(value: Any) -> Any:
    return value.values if isinstance(value, IndexExpr) else value


class Mask:
    """A compile-time predicate over a tile's elements (`mask=` argument), combined with & and |."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray):
        self.values = np.asarray(values, dtype=bool)

    def __and__(self, other: Mask | bool) -> Mask:
        return Mask(self.values & _predicate(other))

    def __or__(self, other: Mask | bool) -> Mask:
        return Mask(self.values | _predicate(other))

    __rand__ = __and__
    __ror__ = __or__

    def __invert__(self) -> Mask:
        return Mask(~self.values)

    def __bool__(self) -> bool:
        raise KernelUsageError("a mask is a per-element predicate; it cannot be used as a Python bool")


def _predicate(value: Any) -> Any:
    """What a mask combines with: another mask's values, or a condition already decided at trace time."""
    if isinstance(value, Mask):
        return value.values
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise KernelUsageError(f"a mask combines with masks and conditions, not {type(value).__name__}")


def as_mask(value: Any) -> Mask | None:
    """A `mask=` argument as a Mask: a predicate that folds to a Python bool at trace time (`i * 128 <
    n` with a loop counter) selects everything (True, same as no mask) or nothing (False)."""
    if value is None or isinstance(value, Mask):
        return value
    if isinstance(value, (bool, np.bool_)):
        return None if value else Mask(np.zeros((), dtype=bool))
    raise KernelUsageError(f"mask= takes a predicate built from index expressions, got {type(value).__name__}")


def arange(*args: int) -> IndexExpr:
    """`nl.arange(n)` / `nl.arange(start, stop[, step])` as a 1-D index expression."""
    start, stop, step = slice(*args).indices(10**18) if len(args) > 1 else (0, args[0], 1)
    count = max(0, (stop - start + step - 1) // step)
    return IndexExpr((count,), start, ((0, step),) if count > 1 else ())


class MGrid:
    """`nl.mgrid[0:128, 0:512]`: one index expression per dimension, also as `.p` and `.x`."""

    def __getitem__(self, key: Any) -> GridIndices:
        key = key if isinstance(key, tuple) else (key,)
        shape = tuple(len(range(*s.indices(10**18))) for s in key)
        # like numpy.mgrid, every component spans the whole grid (an expression built from some of
        # them, `3 * g.y + g.z`, still has the grid's shape, as iota of it does)
        exprs = []
        for axis, s in enumerate(key):
            start, _, step = s.indices(10**18)
            exprs.append(IndexExpr(shape, start, ((axis, step),) if shape[axis] > 1 else ()))
        return GridIndices(exprs)


class GridIndices:
    """The result of `nl.mgrid[...]`: unpackable, with `.p` for the partition and `.x` for the free axis."""

    def __init__(self, exprs: list[IndexExpr]):
        self.exprs = exprs

    def __iter__(self) -> Iterator[IndexExpr]:
        return iter(self.exprs)

    def __getitem__(self, i: int) -> IndexExpr:
        return self.exprs[i]

    @property
    def p(self) -> IndexExpr:
        return self.exprs[0]

    @property
    def x(self) -> IndexExpr:
        return self.exprs[1]

    @property
    def y(self) -> IndexExpr:
        return self.exprs[2]

    @property
    def z(self) -> IndexExpr:
        return self.exprs[3]


mgrid = MGrid()


def ds(start: int, size: int) -> slice:
    """`nl.ds(start, size)`: a dynamic slice of `size` elements."""
    return slice(start, start + size)


# --------------------------------------------------------------------------------------------
# Subscripts on tensors
# --------------------------------------------------------------------------------------------
IndexItem = int | slice | IndexExpr


class Subscript:
    """A normalised subscript of a tensor: one item per tensor dimension.

    Items are ints (the dimension is dropped), normalised slices (start, stop, positive step) or
    index expressions. Slices and index expressions do not mix in one subscript (NKI forbids it).

    An index expression may run past the tensor (the ragged last tile of a loop): that is legal
    only when every instruction using the tile masks the overhang off, so instead of failing here
    the subscript keeps the error message in `overhang` and the instruction checks its mask.
    `region` is then clipped to the tensor.
    """

    __slots__ = ("_box", "_kept_elements", "_run", "advanced", "count", "dims", "items", "overhang", "region", "shape")

    def __init__(self, items: tuple[IndexItem, ...], shape: tuple[int, ...],
                 region: tuple[tuple[int, int], ...], advanced: bool, overhang: str | None = None,
                 dims: tuple[int, ...] = ()):
        self.items = items
        self.shape = shape
        self.region = region
        self.advanced = advanced
        self.overhang = overhang
        self.dims = dims
        self.count = math.prod(shape)  # elements of the tile
        self._box: tuple[tuple[Any, ...], tuple[int, ...], tuple[Any, ...]] | bool | None = False
        self._run: tuple[tuple[int, ...], int] | None = None  # the last contiguous_elements asked and answered
        # the last `elements` of a strided box asked and answered (a gather's index array is made anew each time)
        self._kept_elements: tuple[tuple[int, ...], tuple[Any, ...] | None] | None = None

    def view(self, data: np.ndarray) -> np.ndarray | None:
        """The elements this subscript selects, as a view of `data` shaped as the tile, when they are a
        strided box: every index expression steps along a grid axis of its own (`nl.arange(128)[:, None]`
        with `nl.arange(512)[None, :]`), the compiler-style subscript. Reading and writing the view is
        NumPy's basic indexing, many times faster than the gather of `numpy_key`; None for any other
        subscript (gathers, repeated or mixed axes, overhangs), which `numpy_key` serves."""
        if not self.advanced:
            return data[(*self.items, Ellipsis)]  # type: ignore[index]  (a 0-d view for t[0, 0], not a copy)
        if self._box is False:
            self._box = self._box_plan()
        if self._box is None:
            return None
        key, order, expand = self._box  # type: ignore[misc]
        return data[key].transpose(order)[expand]

    def _box_plan(self) -> tuple[tuple[Any, ...], tuple[int, ...], tuple[Any, ...]] | None:
        """Basic indices, the order of the grid axes they step along, and where the tile has unit axes."""
        if self.overhang is not None:
            return None
        ndim = len(self.shape)
        key: list[int | slice] = []
        axes: list[int] = []
        for item in self.items:
            if type(item) is int:
                key.append(item)
                continue
            if type(item) is not IndexExpr or not item.affine or len(item.terms) > 1:
                return None
            if not item.terms:
                key.append(item.offset)
                continue
            axis, step = item.terms[0]
            axis += ndim - len(item.shape)
            if step == 0 or axis in axes:
                return None
            last = item.offset + step * (self.shape[axis] - 1)
            if last < 0:
                return None
            # a reversed axis is a negative step: a view too, never a gather's index arrays (a copy with every
            # dimension reversed made index arrays eight bytes an element each, outside the memory budget)
            key.append(slice(item.offset, last + (1 if step > 0 else -1) if last or step > 0 else None, step))
            axes.append(axis)
        if any(n != 1 for axis, n in enumerate(self.shape) if axis not in axes):
            return None  # an axis no index steps along: the tile repeats elements (a broadcast gather)
        order = tuple(sorted(range(len(axes)), key=lambda k: axes[k]))
        expand = tuple(slice(None) if axis in axes else None for axis in range(ndim))
        return (*key, Ellipsis), order, expand  # the Ellipsis keeps a view when every index is a number

    def elements(self, dims: tuple[int, ...]) -> tuple[tuple[Any, ...] | None, np.ndarray | None]:
        """Which set of elements of the tensor (of shape `dims`) this subscript selects, exactly, so that two
        accesses sharing a bounding box are told apart (a reuse or a distinct-bytes count taken from `region`
        alone would be fooled by disjoint strided or gathered pieces of one box): None when the set is the whole
        box `region` (in whatever order), else a hashable key equal only for the same set, and for a gather the
        set's flat indices too (sorted). Indices read at run time get a key of their own: their elements are not
        known while tracing."""
        kept = self._kept_elements
        if kept is not None and kept[0] == dims:
            return kept[1], None
        key, flat = self._elements(dims)
        if flat is None and not (key and key[0] == "run time"):
            self._kept_elements = (dims, key)  # every instruction reading the block asks again
        return key, flat

    def _elements(self, dims: tuple[int, ...]) -> tuple[tuple[Any, ...] | None, np.ndarray | None]:
        volume = math.prod(hi - lo for lo, hi in self.region)
        if not self.advanced:
            if self.count == volume:
                return None, None
            return tuple(i if type(i) is int else (i.start, i.stop, i.step) for i in self.items), None
        if any(isinstance(i, DynamicIndex) for i in self.items):
            return ("run time", next(_run_time_keys)), None
        if self._box is False:
            self._box = self._box_plan()
        if self._box is not None:  # a strided box: each element once
            if self.count == volume:
                return None, None
            key = self._box[0]  # type: ignore[index]
            return ("box", *(i if type(i) is int else (i.start, i.stop, i.step) for i in key[:-1])), None
        if self._covers_box():
            return None, None
        keep = None if self.overhang is None else self.in_bounds()
        box = tuple(hi - lo for lo, hi in self.region)
        local = tuple((np.broadcast_to(k, self.shape) if keep is None else np.broadcast_to(k, self.shape)[keep]) - lo
                      for k, (lo, _) in zip(self.numpy_key(), self.region, strict=True))
        marks = np.zeros(volume, dtype=bool)
        marks[np.ravel_multi_index(local, box).ravel()] = True
        if marks.all():
            return None, None
        inside = np.unravel_index(np.flatnonzero(marks), box)
        flat = np.ravel_multi_index(tuple(k + lo for k, (lo, _) in zip(inside, self.region, strict=True)), dims)
        return ("gather", hashlib.blake2b(np.packbits(marks).tobytes(), digest_size=16).digest()), flat

    def _covers_box(self) -> bool:
        """Whether the affine index expressions select every element of the box `region` exactly once, told from
        their terms instead of marking the elements: each grid axis the tile spans is stepped by one term, and the
        terms of one expression are digits of a mixed radix (coefficients 1, n1, n1 * n2, ... in size, either
        sign), so each expression runs over a whole range of consecutive indices. The compiler writes a block's
        [P, 8, 128] view of 1024 columns so (`128 * nl.arange(8)[None, :, None] + nl.arange(128)[None, None, :]`):
        marking its 131,072 elements took 2.6 ms at each access."""
        if self.overhang is not None:
            return False
        ndim = len(self.shape)
        stepped = [False] * ndim
        for item in self.items:
            if type(item) is int:
                continue
            if type(item) is not IndexExpr or not item.affine or len(item.shape) > ndim:
                return False
            digit = 1
            for axis, coef in sorted(item.terms, key=lambda term: abs(term[1])):
                extent = item.shape[axis]
                axis += ndim - len(item.shape)
                if abs(coef) != digit or stepped[axis] or extent != self.shape[axis]:
                    return False
                stepped[axis] = True
                digit *= extent
        return all(stepped[axis] or n == 1 for axis, n in enumerate(self.shape))

    def numpy_key(self) -> tuple[Any, ...]:
        if not self.advanced:
            return self.items  # type: ignore[return-value]
        if self.overhang is not None:  # clip so reads of masked-off elements stay inside the array
            return tuple(np.clip(i.values, 0, n - 1) if isinstance(i, IndexExpr) else i
                         for i, n in zip(self.items, self.dims, strict=True))
        return tuple(i.values if isinstance(i, IndexExpr) else i for i in self.items)

    def index_tiles(self) -> tuple[Any, ...]:
        """The tiles whose values address this subscript (indirect addressing)."""
        if not self.advanced:
            return ()
        return tuple(i.source for i in self.items if isinstance(i, DynamicIndex))

    def check_dynamic_bounds(self, name: str, active: np.ndarray | None) -> None:
        """Numeric mode: every active element's indirect index lies inside the tensor."""
        if self.advanced:
            for item in self.items:
                if isinstance(item, DynamicIndex):
                    item.check(name, active, self.shape)

    def in_bounds(self) -> np.ndarray:
        """Per element of the tile: does its index fall inside the tensor? (only for overhangs)"""
        inside = np.ones(self.shape, dtype=bool)
        for item, n in zip(self.items, self.dims, strict=True):
            if isinstance(item, IndexExpr):
                values = item.values
                inside &= np.broadcast_to((values >= 0) & (values < n), self.shape)
        return inside

    def contiguous_elements(self, dims: tuple[int, ...]) -> int:
        """Longest run of consecutive elements in row-major memory that this subscript touches (kept for
        the tensor shape last asked: a subscript is asked about its own tensor on every access)."""
        known = self._run
        if known is not None and known[0] == dims:
            return known[1]
        run = self._contiguous(dims)
        self._run = (dims, run)
        return run

    def _contiguous(self, dims: tuple[int, ...]) -> int:
        if self.advanced:
            walked = self._walked_run(dims)
            if walked is not None:
                return walked
        run = 1
        for dim in range(len(dims) - 1, -1, -1):
            item = self.items[dim]
            if isinstance(item, int):
                extent, unit = 1, True
            elif isinstance(item, slice):
                extent = len(range(item.start, item.stop, item.step))
                unit = item.step == 1
            else:
                stride = item.single_stride()
                lo, hi = item.bounds()
                extent, unit = hi - lo + 1, stride in (0, 1)
            if not unit:
                return run
            run *= extent
            if extent != dims[dim]:
                return run
        return run

    def _walked_run(self, dims: tuple[int, ...]) -> int | None:
        """Consecutive elements in memory along the tile's own order (its innermost axis first): a DMA
        walks the tile, so `x[i_m, i_k]` with k on partitions and m along the free axis reads one element
        per step, however contiguous its footprint. None for indices that are not affine."""
        strides = [math.prod(dims[d + 1:]) for d in range(len(dims))]
        steps = [0] * len(self.shape)
        for d, item in enumerate(self.items):
            if isinstance(item, (int, np.integer)):
                continue
            if not isinstance(item, IndexExpr) or item._values is not None:
                return None
            shift = len(self.shape) - len(item.shape)
            for axis, coef in item.terms:
                steps[axis + shift] += coef * strides[d]
        run = 1
        for axis in range(len(self.shape) - 1, -1, -1):
            extent = self.shape[axis]
            if extent == 1:
                continue
            if steps[axis] != run:
                break
            run *= extent
        return run


@functools.lru_cache(maxsize=4096)
def full_subscript(shape: tuple[int, ...]) -> Subscript:
    """The subscript of a whole tensor (shared: subscripts are never mutated)."""
    items = tuple(slice(0, n, 1) for n in shape)
    return Subscript(items, shape, tuple((0, n) for n in shape), False)


_SLICED: dict[tuple, Subscript] = {}  # subscripts of ints, slices and affine expressions, by _memo_key
_SLICED_LIMIT = 1 << 16


def access_pattern(pattern: Sequence[Sequence[int]], offset: int, dims: tuple[int, ...]) -> tuple[IndexExpr, ...]:
    """`tensor.ap(pattern, offset)` (newer NKI) as one index per tensor dimension over the pattern's grid:
    the element at grid point g is the flattened tensor's `offset + sum(g[k] * step[k])`. Each step
    that is a whole number of one dimension's rows stays affine in that dimension (the usual case);
    any other pattern becomes the gather of its flat indices."""
    try:
        steps = [int(step) for step, _ in pattern]
        nums = tuple(int(num) for _, num in pattern)
    except (TypeError, ValueError):
        raise KernelUsageError(f"an access pattern is a list of [step, num] pairs, got {pattern!r}") from None
    if not nums or min(nums) < 1:
        raise KernelUsageError(f"an access pattern needs at least one [step, num] pair with num >= 1, got {pattern!r}")
    strides = [math.prod(dims[d + 1:]) for d in range(len(dims))]
    affine = _affine_pattern(steps, nums, offset, dims, strides)
    if affine is not None and all(lo >= 0 and hi < n for (lo, hi), n in zip((e.bounds() for e in affine), dims,
                                                                          strict=True)):
        return affine
    flat = np.full(nums, offset, dtype=np.int64)
    for axis, step in enumerate(steps):
        grid = [1] * len(nums)
        grid[axis] = nums[axis]
        flat = flat + step * np.arange(nums[axis], dtype=np.int64).reshape(grid)
    if flat.min() >= 0 and flat.max() < math.prod(dims):  # rows wrap into the next: the gather of them
        return tuple(IndexExpr(nums, values=coords) for coords in np.unravel_index(flat, dims))
    if affine is not None:  # past the tensor's end: an overhang, an error only where the view is used unmasked
        return affine
    raise HardwareRuleError(f"access pattern {pattern!r} at offset {offset} reaches elements "
                            f"[{flat.min()}, {flat.max()}] of a tensor of {math.prod(dims)}")


def _affine_pattern(steps: list[int], nums: tuple[int, ...], offset: int, dims: tuple[int, ...],
                    strides: list[int]) -> tuple[IndexExpr, ...] | None:
    """One affine index per dimension when every step is a whole number of some dimension's rows."""
    if not 0 <= offset < math.prod(dims):
        return None
    start = np.unravel_index(offset, dims)
    terms: list[list[tuple[int, int]]] = [[] for _ in dims]
    for axis, (step, num) in enumerate(zip(steps, nums, strict=True)):
        if step == 0 or num == 1:
            continue  # a repeat (broadcast) or a single element: no term
        dim = next((d for d, stride in enumerate(strides) if abs(step) >= stride and step % stride == 0), None)
        if dim is None:
            return None
        terms[dim].append((axis, step // strides[dim]))
    return tuple(IndexExpr(nums, int(start[d]), tuple(terms[d])) for d in range(len(dims)))


def normalize(key: Any, dims: tuple[int, ...], name: str, from_the_end: bool = False) -> Subscript:
    """Turn a kernel's subscript into a `Subscript` over a tensor of shape `dims`, checking bounds. One of
    ints and slices only (the tutorials' `a[m * 128:(m + 1) * 128, k * 128:(k + 1) * 128]`) is worked out
    once per shape and numbers: a loop nest names the same few blocks again and again.

    `from_the_end`: negative slice bounds count from the end, as the newer API's tensors take them
    (NkiTensor.__getitem__); in the legacy one a negative bound is a computed offset gone out of bounds,
    refused as the compiler does. Such subscripts skip the memo, so the two never mix."""
    if isinstance(key, GridIndices):  # `x[nl.mgrid[0:128, 0:512]]`: one index per axis
        key = tuple(key.exprs)
    key = key if isinstance(key, tuple) else (key,)
    memo = _memo_key(key, dims, name)
    if memo is None:
        return _normalize(key, dims, name, from_the_end)
    memo = (*memo, from_the_end)
    known = _SLICED.get(memo)
    if known is None:
        known = _normalize(key, dims, name, from_the_end)
        if len(_SLICED) >= _SLICED_LIMIT:  # a long-lived worker starts afresh rather than stop remembering
            _SLICED.clear()
        _SLICED[memo] = known
    return known


def _memo_key(key: tuple[Any, ...], dims: tuple[int, ...], name: str) -> tuple[Any, ...] | None:
    """What decides a subscript of ints, non-negative slices and affine index expressions (the compiler-style
    `t[i, nl.arange(128)[:, None], nl.arange(512)[None, :]]`, remade on every iteration of its loop); with
    expressions, the tensor's name too (a subscript running past the end names its tensor). None for any
    other key (indices read from a tile or given as values), worked out each time."""
    parts: list[Any] = [dims]
    named = False
    for k in key:
        kind = type(k)
        if kind is int:
            parts.append(k)
        elif kind is slice and (k.start or 0) >= 0 and (k.stop or 0) >= 0:
            parts.append((k.start, k.stop, k.step))
        elif kind is IndexExpr and k.affine:
            parts.append((k.shape, k.offset, k.terms))
            named = True
        else:
            return None
    if named:
        parts.append(name)
    return tuple(parts)


def _normalize(key: tuple[Any, ...], dims: tuple[int, ...], name: str, from_the_end: bool = False) -> Subscript:
    if len(key) == len(dims):
        plain = _in_bounds_indices(key, dims)
        if plain is not None:
            return plain
    if any(k is Ellipsis for k in key):
        at = key.index(Ellipsis)
        fill = (slice(None),) * (len(dims) - len(key) + 1)
        key = key[:at] + fill + key[at + 1:]
    if len(key) > len(dims):
        raise KernelUsageError(f"too many indices for {name} of shape {dims}")
    key = key + (slice(None),) * (len(dims) - len(key))
    advanced = any(type(k) is not int and type(k) is not slice and (isinstance(k, (IndexExpr, np.ndarray))
                                                                   or hasattr(k, "storage")) for k in key)
    items: list[IndexItem] = []
    region: list[tuple[int, int]] = []
    shape: list[int] = []
    adv_shape: tuple[int, ...] = ()
    overhang: str | None = None
    for dim, (k, size) in enumerate(zip(key, dims, strict=True)):
        if isinstance(k, np.ndarray):
            k = IndexExpr(k.shape, values=k.astype(np.int64))
        if type(k) is IndexExpr:  # the commonest item first (nl.arange expressions), then ints
            lo, hi = k.bounds()
            if lo < 0 or hi >= size:
                if overhang is None:
                    overhang = (f"index range [{lo}, {hi}] is out of bounds for dimension {dim} of {name} "
                                f"(size {size}); mask the elements past the end (mask=...)")
                lo, hi = min(max(lo, 0), size), max(min(hi, size - 1), -1)
            items.append(k)
            region.append((lo, max(lo, hi + 1)))
            adv_shape = _broadcast(adv_shape, k.shape)
        elif isinstance(k, (int, np.integer)):
            k = int(k)
            if k < 0:
                k += size
            if not 0 <= k < size:
                raise HardwareRuleError(f"index {k} is out of bounds for dimension {dim} of {name} "
                                        f"(size {size})")
            items.append(k)
            region.append((k, k + 1))
        elif isinstance(k, slice):
            if advanced:
                raise KernelUsageError(f"{name}: a subscript cannot mix slices with nl.arange/mgrid "
                                       f"indices (dimension {dim}); index every dimension with an "
                                       "index expression or an integer")
            start, stop, step = k.indices(size) if k.step is None or k.step > 0 else (None, None, None)
            if step is None:
                raise KernelUsageError(f"{name}: negative slice steps are not supported")
            raw_start, raw_stop = k.start or 0, k.stop if k.stop is not None else size
            if from_the_end:
                raw_start += size if raw_start < 0 else 0
                raw_stop += size if raw_stop < 0 else 0
            if raw_start < 0 or raw_stop > size or raw_start > size:
                raise HardwareRuleError(f"slice {k.start}:{k.stop} is out of bounds for dimension {dim} "
                                        f"of {name} (size {size})")
            count = len(range(start, stop, step))
            items.append(slice(start, stop, step))
            shape.append(count)
            region.append((start, start + (count - 1) * step + 1) if count else (start, start))
        elif isinstance(k, DynamicIndex):  # indices read from a tile, as a replayed subscript names them
            lo, hi = k.bounds()
            if lo < 0 or hi >= size:
                raise HardwareRuleError(f"indirect indices address [{lo}, {hi}], outside dimension {dim} of {name} "
                                        f"(size {size})")
            items.append(k)
            region.append((lo, hi + 1))
            adv_shape = _broadcast(adv_shape, k.shape)
        elif isinstance(k, Mask):
            raise UnsupportedApiError(f"{name}: indexing a tile with a mask (matmul operand masking) is not "
                                      "supported by this simulator; pass mask= to the instruction instead")
        elif hasattr(k, "storage"):  # a Tile: indirect (data-dependent) indexing
            if k.buffer == "hbm":
                raise HardwareRuleError(f"{name}: indices for indirect addressing must be in SBUF; "
                                        f"{k.name} is in HBM")
            expr = DynamicIndex(k, size)
            items.append(expr)
            region.append((0, size))
            adv_shape = _broadcast(adv_shape, expr.shape)
        else:
            raise KernelUsageError(f"{name}: unsupported index of type {type(k).__name__}")
    final_shape = adv_shape if advanced else tuple(shape)
    if overhang is not None:
        return Subscript(tuple(items), final_shape, tuple(region), advanced, overhang, dims)
    return Subscript(tuple(items), final_shape, tuple(region), advanced)


def _in_bounds_indices(key: tuple[Any, ...], dims: tuple[int, ...]) -> Subscript | None:
    """`normalize` of the commonest subscript, in one pass: one in-bounds int or affine index expression
    per dimension, at least one expression (every instruction operand of compiler-style code, and most
    of the tutorials'); None for anything else, which the general path handles (and words the errors of)."""
    region: list[tuple[int, int]] = []
    shape: tuple[int, ...] = ()
    advanced = False
    for k, size in zip(key, dims, strict=True):
        kind = type(k)
        if kind is int:
            if not 0 <= k < size:
                return None
            region.append((k, k + 1))
        elif kind is IndexExpr and k._values is None:
            lo, hi = k.bounds()
            if lo < 0 or hi >= size:
                return None
            region.append((lo, hi + 1))
            shape = _broadcast(shape, k.shape)
            advanced = True
        else:
            return None
    return Subscript(key, shape, tuple(region), True) if advanced else None


def compose(outer: Subscript, key: Any, name: str, dims: tuple[int, ...], from_the_end: bool = False) -> Subscript:
    """Index a view again: map a subscript on the view's shape back onto the tensor's dimensions `dims`
    (`from_the_end`: as `normalize`)."""
    inner = normalize(key, outer.shape, name, from_the_end)
    if outer.advanced:
        return _compose_advanced(outer, inner, name, dims)
    if inner.overhang is not None:
        raise HardwareRuleError(inner.overhang.split(";")[0])
    items: list[IndexItem] = []
    region: list[tuple[int, int]] = []
    view_dim = 0
    for item, (lo, hi) in zip(outer.items, outer.region, strict=True):
        if isinstance(item, int):
            items.append(item)
            region.append((lo, hi))
            continue
        sub = inner.items[view_dim]
        start, step = item.start, item.step
        if isinstance(sub, int):
            pos = start + step * sub
            items.append(pos)
            region.append((pos, pos + 1))
        elif isinstance(sub, slice):
            new = slice(start + step * sub.start, start + step * sub.stop, step * sub.step)
            count = len(range(sub.start, sub.stop, sub.step))
            items.append(new)
            region.append((new.start, new.start + (count - 1) * new.step + 1) if count else (new.start,) * 2)
        elif isinstance(sub, DynamicIndex):
            items.append(sub.mapped(step, start))
            region.append((lo, hi))
        else:
            mapped = sub * step + start
            mlo, mhi = mapped.bounds()
            items.append(mapped)
            region.append((mlo, mhi + 1))
        view_dim += 1
    return Subscript(tuple(items), inner.shape, tuple(region), inner.advanced)


def _compose_advanced(outer: Subscript, inner: Subscript, name: str, dims: tuple[int, ...]) -> Subscript:
    """A view taken with index expressions (an access pattern, `x[i_p, i_f]`) indexed again with ints and
    slices: each expression restricted to the part of its grid the new key keeps (`out[0:T, ds(o, n)]`
    of an `.ap()` view, nki-library's MLP)."""
    if inner.advanced or any(type(item) is DynamicIndex for item in outer.items):
        raise KernelUsageError(f"{name}: indexing a tile taken with index expressions again with index "
                               "expressions is not supported; index the tensor once")
    grid = outer.shape
    keys = list(inner.items)
    items = tuple(item if isinstance(item, int) else _restricted(item, grid, keys) for item in outer.items)
    return normalize(items, dims, name)


def _restricted(expr: IndexExpr, grid: tuple[int, ...], keys: list[Any]) -> IndexExpr:
    """`expr` (over the trailing axes of `grid`) on the sub-grid `keys` (an int or a slice per grid axis)
    selects; ints drop their axis."""
    lead = len(grid) - len(expr.shape)
    if not expr.affine:
        values = np.broadcast_to(expr.values, expr.shape)
        own = tuple(k if expr.shape[a] == grid[a + lead] else (0 if isinstance(k, int) else slice(None))
                    for a, k in enumerate(keys[lead:]))
        values = values[own]
        return IndexExpr(values.shape, values=np.ascontiguousarray(values))
    offset, terms, shape, kept = expr.offset, [], [], {}
    for axis, size in enumerate(expr.shape):
        key = keys[axis + lead]
        if isinstance(key, int):
            continue
        kept[axis] = len(shape)
        shape.append(len(range(key.start, key.stop, key.step)) if size == grid[axis + lead] else 1)
    for axis, coef in expr.terms:
        key = keys[axis + lead]
        if expr.shape[axis] != grid[axis + lead]:
            continue  # broadcast along this grid axis: every position reads index 0 of it
        start = key if isinstance(key, int) else key.start
        offset += coef * start
        if not isinstance(key, int):
            terms.append((kept[axis], coef * key.step))
    return IndexExpr(tuple(shape), offset, tuple(terms))
