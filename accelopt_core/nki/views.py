"""The view methods of NKI 0.8's `NkiTensor` (`permute`, `slice`, `select`, `rearrange`, ...).

Every view is an access pattern over the tensor's flat elements: an offset and one [step, count] pair per
dimension of the view. A view method works on that pattern, then hands it to `tensor.ap`, so a view is
indexed, recorded, replayed and priced as any access pattern is, and no data moves.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from .errors import KernelUsageError, UnsupportedApiError
from .indexing import IndexExpr

HBM = "hbm"  # tensor.HBM (tensor.py imports this module, so the name is repeated here)


@dataclass(frozen=True)
class Pattern:
    """Where a view's elements sit in its tensor: element g is flat element `offset + sum(g[k] * steps[k][0])`."""

    offset: int
    steps: tuple[tuple[int, int], ...]  # (step, count) per dimension of the view, outermost first

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(count for _, count in self.steps)

    def as_list(self) -> list[list[int]]:
        return [[step, count] for step, count in self.steps]


def pattern_of(items: tuple[Any, ...], shape: tuple[int, ...], dims: tuple[int, ...]) -> Pattern:
    """The pattern of a subscript (ints, normalised slices or affine index expressions) of a tensor of
    shape `dims`, viewed with shape `shape`; a gather has no pattern."""
    strides = [math.prod(dims[d + 1:]) for d in range(len(dims))]
    offset = 0
    if not any(isinstance(item, IndexExpr) for item in items):
        steps = []
        for item, stride in zip(items, strides, strict=True):
            if isinstance(item, slice):
                offset += item.start * stride
                steps.append((item.step * stride, len(range(item.start, item.stop, item.step))))
            else:
                offset += int(item) * stride
        return Pattern(offset, tuple(steps))
    grid_steps = [0] * len(shape)
    for item, stride in zip(items, strides, strict=True):
        if not isinstance(item, IndexExpr) or not item.affine or item.shape != shape:
            raise UnsupportedApiError("a view method on a gathered tile (indices that are not one stride per "
                                      "dimension) is not simulated")
        offset += item.offset * stride
        for axis, coef in item.terms:
            grid_steps[axis] += coef * stride
    return Pattern(offset, tuple(zip(grid_steps, shape, strict=True)))


def _dim(dim: Any, ndim: int, what: str) -> int:
    position = int(dim) + (ndim if int(dim) < 0 else 0)
    if not 0 <= position < ndim:
        raise KernelUsageError(f"{what}: dimension {dim} is out of range for a view of {ndim} dimensions")
    return position


def permute(pattern: Pattern, dims: Any, on_chip: bool) -> Pattern:
    """The dimensions in the order `dims`; on chip the partition dimension stays first."""
    order = tuple(int(d) for d in dims)
    if sorted(order) != list(range(len(pattern.steps))):
        raise KernelUsageError(f"permute: {order} is not a permutation of the view's {len(pattern.steps)} dimensions")
    if on_chip and order[0] != 0:
        raise KernelUsageError(f"permute{order}: the partition dimension of an SBUF or PSUM tensor stays first")
    return Pattern(pattern.offset, tuple(pattern.steps[d] for d in order))


def slice_dim(pattern: Pattern, dim: Any, start: int, end: int, step: int = 1) -> Pattern:
    """Elements start, start + step, ... before end of one dimension (end past the dimension is clipped)."""
    d = _dim(dim, len(pattern.steps), "slice")
    stride, count = pattern.steps[d]
    if int(step) < 1 or not 0 <= int(start) < count:
        raise KernelUsageError(f"slice({dim}, {start}, {end}, {step}): start must lie in [0, {count}) and step be "
                               "at least 1")
    kept = len(range(int(start), min(int(end), count), int(step)))
    steps = list(pattern.steps)
    steps[d] = (stride * int(step), kept)
    return Pattern(pattern.offset + stride * int(start), tuple(steps))


def select(pattern: Pattern, dim: Any, index: int) -> Pattern:
    """One index of a dimension, the dimension dropped."""
    d = _dim(dim, len(pattern.steps), "select")
    stride, count = pattern.steps[d]
    if not 0 <= int(index) < count:
        raise KernelUsageError(f"select({dim}, {index}): index out of range [0, {count})")
    return Pattern(pattern.offset + stride * int(index), pattern.steps[:d] + pattern.steps[d + 1:])


def broadcast(pattern: Pattern, dim: Any, size: int) -> Pattern:
    """A dimension of one repeated `size` times (step 0)."""
    d = _dim(dim, len(pattern.steps), "broadcast")
    if pattern.steps[d][1] != 1:
        raise KernelUsageError(f"broadcast({dim}, {size}): only a dimension of size 1 broadcasts, this one has "
                               f"{pattern.steps[d][1]}")
    return Pattern(pattern.offset, (*pattern.steps[:d], (0, int(size)), *pattern.steps[d + 1:]))


def expand_dim(pattern: Pattern, dim: Any) -> Pattern:
    """A new dimension of size 1 at `dim`."""
    position = int(dim) + (len(pattern.steps) + 1 if int(dim) < 0 else 0)
    if not 0 <= position <= len(pattern.steps):
        raise KernelUsageError(f"expand_dim({dim}): out of range for a view of {len(pattern.steps)} dimensions")
    return Pattern(pattern.offset, (*pattern.steps[:position], (1, 1), *pattern.steps[position:]))


def squeeze_dim(pattern: Pattern, dim: Any) -> Pattern:
    """A dimension of size 1 removed."""
    d = _dim(dim, len(pattern.steps), "squeeze_dim")
    if pattern.steps[d][1] != 1:
        raise KernelUsageError(f"squeeze_dim({dim}): the dimension has size {pattern.steps[d][1]}, not 1")
    return Pattern(pattern.offset, pattern.steps[:d] + pattern.steps[d + 1:])


def reshape_dim(pattern: Pattern, dim: Any, shape: Any) -> Pattern:
    """One dimension split into `shape` (one entry may be -1, worked out from the others)."""
    d = _dim(dim, len(pattern.steps), "reshape_dim")
    stride, count = pattern.steps[d]
    sizes = [int(s) for s in shape]
    if sizes.count(-1) == 1:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = count // known if known and count % known == 0 else 0
    if math.prod(sizes) != count or min(sizes, default=0) < 1:
        raise KernelUsageError(f"reshape_dim({dim}, {tuple(shape)}): {count} elements do not split so")
    split = tuple((stride * math.prod(sizes[k + 1:]), size) for k, size in enumerate(sizes))
    return Pattern(pattern.offset, pattern.steps[:d] + split + pattern.steps[d + 1:])


def flatten_dims(pattern: Pattern, start_dim: Any, end_dim: Any) -> Pattern:
    """Dimensions start_dim..end_dim (inclusive) merged into one; they must be contiguous in each other."""
    first = _dim(start_dim, len(pattern.steps), "flatten_dims")
    last = _dim(end_dim, len(pattern.steps), "flatten_dims")
    if last < first:
        raise KernelUsageError(f"flatten_dims({start_dim}, {end_dim}): the end comes before the start")
    merged = pattern.steps[first:last + 1]
    for (outer, _), (inner, inner_count) in itertools.pairwise(merged):
        if outer != inner * inner_count:
            raise KernelUsageError(f"flatten_dims({start_dim}, {end_dim}): the dimensions are not contiguous in "
                                   f"each other (steps {[s for s, _ in merged]})")
    whole = (merged[-1][0], math.prod(count for _, count in merged))
    return Pattern(pattern.offset, (*pattern.steps[:first], whole, *pattern.steps[last + 1:]))


def rearrange(pattern: Pattern, src: Any, dst: Any, fixed_sizes: dict[str, int] | None) -> Pattern:
    """einops-style: `src` names each dimension (a tuple of names splits it), `dst` orders the names
    (a tuple of names merges them); `fixed_sizes` gives the sizes a split cannot work out."""
    src_groups = [(g,) if isinstance(g, str) else tuple(g) for g in src]
    if len(src_groups) != len(pattern.steps):
        raise KernelUsageError(f"rearrange: {src!r} names {len(src_groups)} dimensions; the view has "
                               f"{len(pattern.steps)}")
    sizes = dict(fixed_sizes or {})
    names: list[str] = []
    view = pattern
    dim = 0
    for group in src_groups:
        unknown = [n for n in group if n not in sizes]
        if len(unknown) > 1:
            raise KernelUsageError(f"rearrange: give the size of all but one of {group} in fixed_sizes")
        split = [sizes.get(n, -1) for n in group]
        view = reshape_dim(view, dim, split)
        for name, (_, size) in zip(group, view.steps[dim:dim + len(group)], strict=True):
            sizes[name] = size
        names.extend(group)
        dim += len(group)
    dst_groups = [(g,) if isinstance(g, str) else tuple(g) for g in dst]
    order = [n for g in dst_groups for n in g]
    if sorted(order) != sorted(names) or len(set(names)) != len(names):
        raise KernelUsageError(f"rearrange: {dst!r} must use each name of {src!r} once")
    steps = [view.steps[names.index(n)] for n in order]
    view = Pattern(view.offset, tuple(steps))
    for at, group in enumerate(dst_groups):
        if len(group) > 1:
            view = flatten_dims(view, at, at + len(group) - 1)
    return view


class TensorViews:
    """The view methods `Tile` offers as NKI 0.8's `NkiTensor`: each returns a new view of the same memory."""

    __slots__ = ()

    def get_pattern(self) -> list[list[int]]:
        """The view's access pattern as [[step, count], ...] over the tensor's flat elements."""
        return self._pattern().as_list()

    def _pattern(self) -> Pattern:
        sub = self.sub  # type: ignore[attr-defined]
        return pattern_of(sub.items, sub.shape, self.storage.shape)  # type: ignore[attr-defined]

    def _viewed(self, pattern: Pattern) -> Any:
        if not pattern.steps:
            pattern = Pattern(pattern.offset, ((1, 1),))  # every view keeps a dimension (a [1] element)
        return self.ap(pattern=pattern.as_list(), offset=pattern.offset)  # type: ignore[attr-defined]

    def _on_chip(self) -> bool:
        return self.storage.buffer != HBM  # type: ignore[attr-defined]

    def permute(self, dims: Any) -> Any:
        return self._viewed(permute(self._pattern(), dims, self._on_chip()))

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> Any:
        return self._viewed(slice_dim(self._pattern(), dim, start, end, step))

    def select(self, dim: int, index: Any) -> Any:
        """A fixed index drops the dimension; an index held in a [1, 1] SBUF tile is read when the view is
        used (a dynamic select, the view's tensor in HBM)."""
        if isinstance(index, int):
            return self._viewed(select(self._pattern(), dim, index))
        pattern = self._pattern()
        d = _dim(dim, len(pattern.steps), "select")
        if self._on_chip() or d != 0 or pattern.offset or not self.is_whole:  # type: ignore[attr-defined]
            raise UnsupportedApiError("select with a runtime index is simulated on the first dimension of a whole "
                                      "HBM tensor")
        rest = [[s, n] for s, n in pattern.steps[1:]] or [[1, 1]]
        return self.ap(pattern=rest, offset=0, scalar_offset=_index_tile(index),  # type: ignore[attr-defined]
                       indirect_dim=0)

    def vector_select(self, dim: int, vector_offset: Any) -> Any:
        """Row `vector_offset[p]` of dimension `dim` for each partition p (a gather read when used)."""
        pattern = self._pattern()
        if _dim(dim, len(pattern.steps), "vector_select") != 0 or len(pattern.steps) != 2:
            raise UnsupportedApiError("vector_select is simulated on dimension 0 of a 2-D view")
        rows = int(vector_offset.shape[0])
        return self.ap(pattern=[[pattern.steps[0][0], rows], list(pattern.steps[1])],  # type: ignore[attr-defined]
                       offset=pattern.offset, vector_offset=vector_offset, indirect_dim=0)

    def broadcast(self, dim: int, size: int) -> Any:
        return self._viewed(broadcast(self._pattern(), dim, size))

    def expand_dim(self, dim: int) -> Any:
        return self._viewed(expand_dim(self._pattern(), dim))

    def squeeze_dim(self, dim: int) -> Any:
        return self._viewed(squeeze_dim(self._pattern(), dim))

    def reshape_dim(self, dim: int, shape: Any) -> Any:
        return self._viewed(reshape_dim(self._pattern(), dim, shape))

    def flatten_dims(self, start_dim: int, end_dim: int) -> Any:
        return self._viewed(flatten_dims(self._pattern(), start_dim, end_dim))

    def rearrange(self, src_pattern: Any, dst_pattern: Any, fixed_sizes: dict[str, int] | None = None) -> Any:
        return self._viewed(rearrange(self._pattern(), src_pattern, dst_pattern, fixed_sizes))

    def reinterpret_cast(self, dtype: Any) -> Any:
        """The bytes read as `dtype` (NKI 0.8's name for `view(dtype)`)."""
        return self.view(dtype)  # type: ignore[attr-defined]

    def is_contiguous(self) -> bool:
        """True when the view's elements are one run of the tensor's memory, in order."""
        expected = 1
        for step, count in reversed(self._pattern().steps):
            if count > 1 and step != expected:
                return False
            expected *= count
        return True


def _index_tile(index: Any) -> Any:
    """The [1, 1] tile a runtime index is read from: a tile, or the tile an NkiScalar was loaded from."""
    source = getattr(index, "source_tile", None)
    tile = source() if callable(source) else index
    if getattr(tile, "size", None) != 1:
        raise UnsupportedApiError(f"a runtime index must be one element of an SBUF tile, got {index!r}")
    return tile
