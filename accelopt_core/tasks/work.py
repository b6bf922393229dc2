"""A reference's own NumPy work, counted while it runs: "% of peak" for any NumPy reference.

The reference runs on its inputs viewed as `Counted` arrays, an ndarray subclass whose NumPy hooks
(`__array_ufunc__`, `__array_function__`) add each operation's flops to one `Tally` and hand back
`Counted` results, so everything computed from an input is counted too. What counts, after
docs/nkibench.md ("What each task counts"):

- a product of two matrices (`@`, np.matmul, np.dot, np.inner, np.einsum, np.tensordot, multi_dot): 2 flops
  per multiply-add, as matmul flops. When one side has a single row or column (a matrix-vector
  product, a dot of two vectors) nothing is reused and the work is vector work: the same 2 flops per
  multiply-add as vector flops (mamba's `state @ C[:, m]` is part of its 8MCS);
- an element-wise ufunc: one vector flop per output element (np.outer and np.kron: one multiply each); a
  reduction or a scan (sum, max, the sum inside mean, cumsum): one per element reduced; np.where: one (a
  select) per output element; np.linalg.norm: two per element (a square and an add);
- "scalar constants folded into neighbouring ops are not counted": scaling by a constant (a
  multiplication by one, a division by one, a negation) is the scale operand of the instruction next
  to it and costs nothing; an added constant is an operation of its own (silu's `1 + exp(-x)` is 3MN,
  adamw's `sqrt(v) + 1e-8` is part of its 7MN). A constant is a single value that does not come from
  the inputs (a Python or NumPy number, a one-element array made in the reference);
- no flops: casts, copies, reshapes, transposes, indexing, concatenation, repeat, sort and arg-reductions;
  gufuncs other than the products (np.linalg's solvers) are not counted either;
- bytes: every array input and every output once (4 per float32 element); an output of a float type
  wider than the widest float input (a reference computing in float64 what the kernel writes in
  float32) is counted at the inputs' width.

Only NumPy is seen: work done with torch, with Python numbers (`.item()`, `.tolist()`) or on arrays
built without the inputs is not counted.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..nki import dtypes


@dataclass(frozen=True)
class PeakWork:
    """The work of a task (docs/nkibench.md): matmul flops, vector flops, HBM bytes. `counted` when it is
    what the reference did (counted here) rather than the analytic minimum its author declared."""

    mm_flops: float
    vec_flops: float
    hbm_bytes: float
    counted: bool = False
    mm_dtype: str = "float32"  # the precision the matmuls may run at: the narrowest float input (counted)


class ShapeOnlyError(Exception):
    """What the reference did depends on its data, or is not known to the count by shapes: count it on data."""


class Tally:
    """Flops of one reference run. `shapes_only`: its arrays hold no data (`ghost`), so nothing is computed
    and no memory is touched; the count is the same as on data for a reference whose work does not
    depend on its values, and anything that would let the values matter raises ShapeOnlyError."""

    def __init__(self, shapes_only: bool = False) -> None:
        self.mm_flops = 0
        self.vec_flops = 0
        self.shapes_only = shapes_only

    def track(self, array: np.ndarray) -> Counted:
        counted = array.view(Counted)
        counted.tally = self
        return counted

    def ghost(self, shape: tuple[int, ...], dtype: Any) -> Counted:
        """A read-only array of `shape` and `dtype` with no data behind it (one element, zero strides)."""
        return self.track(np.broadcast_to(np.zeros((), dtype), shape))

    def product(self, rows: int, cols: int, inner: int, batch: int = 1) -> None:
        """A batch of (rows x inner) @ (inner x cols) products."""
        flops = 2 * batch * rows * cols * inner
        if rows > 1 and cols > 1:
            self.mm_flops += flops
        else:
            self.vec_flops += flops


class Counted(np.ndarray):
    """An array whose NumPy operations are counted into its `tally` (see the module's docstring)."""

    tally: Tally | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self.tally = getattr(obj, "tally", None)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        tally = _tally_of((*inputs, *kwargs.get("out", ())))
        if tally.shapes_only:
            with np.errstate(all="ignore"):  # its probes compute on zeros (0 / 0) only for the result's type
                return _ufunc_by_shape(tally, ufunc, method, inputs, kwargs)
        out = kwargs.get("out")
        kwargs = {k: tuple(_plain(o) for o in v) if k == "out" else _plain(v) for k, v in kwargs.items()}
        with _warnings_at_the_reference(ufunc):
            result = getattr(ufunc, method)(*(_plain(x) for x in inputs), **kwargs)
        _count_ufunc(tally, ufunc, method, inputs, result)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _counted(result, tally, scalars=True)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        tally = _tally_of((*args, *kwargs.values()))
        counter = _OWN_COUNT.get(func)
        if tally.shapes_only and (func in _DATA_SHAPED or (func is np.where and len(args) == 1)):
            raise ShapeOnlyError(f"np.{func.__name__} gives a result shaped by the data")
        if counter is None:  # run as NumPy does: the ufuncs and products inside are counted on their own
            return _counted(super().__array_function__(func, types, args, kwargs), tally)
        if tally.shapes_only:
            shape, dtype = _RESULT_OF[func](args, kwargs)
            result = tally.ghost(shape, dtype)
            counter(tally, args, kwargs, result)
            return result
        result = func(*_plain_tree(args), **_plain_tree(kwargs))
        counter(tally, args, kwargs, result)
        out = kwargs.get("out")
        return out if out is not None else _counted(result, tally, scalars=True)

    def dot(self, other: Any, out: Any = None) -> Any:  # the method bypasses __array_function__
        return np.dot(self, other, out=out)

    # -- without data (Tally.shapes_only): what would copy makes a ghost; what would read the values raises

    def _ghostly(self) -> bool:
        return self.tally is not None and self.tally.shapes_only

    def _values_read(self, what: str) -> None:
        if self._ghostly():
            raise ShapeOnlyError(f"the reference reads its data ({what})")

    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> Any:
        if self._ghostly():
            return self.tally.ghost(self.shape, np.zeros(1, self.dtype).astype(dtype, *args, **kwargs).dtype)
        return super().astype(dtype, *args, **kwargs)

    def copy(self, order: Any = "C") -> Any:
        return self.tally.ghost(self.shape, self.dtype) if self._ghostly() else super().copy(order)

    def __getitem__(self, key: Any) -> Any:
        if self._ghostly() and any(np.asarray(k).dtype == bool for k in (key if isinstance(key, tuple) else (key,))
                                   if isinstance(k, (np.ndarray, list))):
            raise ShapeOnlyError("a boolean mask selects elements by their values")
        item = super().__getitem__(key)
        if self._ghostly() and isinstance(item, np.generic):  # one element: a value to read, so it stays a ghost
            return self.tally.ghost((), item.dtype)
        return item


def _reading(name: str, what: str) -> Callable[..., Any]:
    """Counted's `name` method (a conversion to Python, nonzero): ShapeOnlyError on an array without data."""
    def method(self: Counted, *args: Any) -> Any:
        self._values_read(what)
        return getattr(super(Counted, self), name)(*args)

    method.__name__ = name
    return method


for _name, _what in (("nonzero", "nonzero()"), ("__bool__", "a truth value"), ("__int__", "a Python int"),
                     ("__float__", "a Python float"), ("__index__", "an index"), ("item", "item()"),
                     ("tolist", "tolist()")):
    setattr(Counted, _name, _reading(_name, _what))


def count_work(call: Callable[[Callable[[Any], Any]], Any], shapes_only: bool = False
               ) -> tuple[Any, PeakWork | None]:
    """Run `call(wrap)` — the reference on its inputs, each passed through `wrap` — and count its work.
    Returns the reference's result and its work; no work when none of its inputs is a NumPy array.
    `shapes_only` runs it on arrays without data, in no time and memory (a full-size attention reference
    makes gigabytes of temporaries); its result is then of no use, and ShapeOnlyError says where a count
    needs the data."""
    tally = Tally(shapes_only)
    inputs: list[np.ndarray] = []

    def wrap(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            inputs.append(value)
            return tally.ghost(value.shape, value.dtype) if shapes_only else tally.track(value)
        return value

    with _arrays_keep_counting(), (np.errstate(all="ignore") if shapes_only else contextlib.nullcontext()):
        result = call(wrap)
    if not inputs:
        return result, None
    outputs = [np.asarray(v) for v in (result if isinstance(result, (tuple, list)) else [result])]
    floats = [a.dtype for a in inputs if dtypes.is_float(a.dtype)]
    narrowest = min(floats, key=lambda d: d.itemsize).name if floats else "float32"
    return result, PeakWork(tally.mm_flops, tally.vec_flops, _bytes(inputs, outputs), counted=True,
                            mm_dtype=narrowest)


def _bytes(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> int:
    # bfloat16 and the fp8 types are floats too, though not NumPy's np.floating
    widest = max((a.itemsize for a in inputs if dtypes.is_float(a.dtype)), default=None)

    def written(array: np.ndarray) -> int:
        if widest is not None and dtypes.is_float(array.dtype) and array.itemsize > widest:
            return array.size * widest
        return array.nbytes

    return sum(a.nbytes for a in inputs) + sum(written(a) for a in outputs)


# -- the hooks' helpers -----------------------------------------------------------------------------------


def _warnings_at_the_reference(ufunc: np.ufunc) -> contextlib.AbstractContextManager[Any]:
    """NumPy's floating-point warnings (overflow in exp, ...) as the reference would get them without
    counting, pointing at its own line rather than at this module; errors it asked to raise or ignore
    stay as they are."""
    modes = {kind: "call" if mode == "warn" else mode for kind, mode in np.geterr().items()}

    def warn(error: str, flag: int) -> None:
        frame = sys._getframe(1)
        while frame.f_back is not None and (frame.f_code.co_filename == __file__
                                            or f"{os.sep}numpy{os.sep}" in frame.f_code.co_filename):
            frame = frame.f_back
        warnings.warn_explicit(f"{error} encountered in {ufunc.__name__}", RuntimeWarning, frame.f_code.co_filename,
                               frame.f_lineno, module=frame.f_globals.get("__name__"),
                               registry=frame.f_globals.setdefault("__warningregistry__", {}))

    return np.errstate(call=warn, **modes)



def _tally_of(values: Sequence[Any]) -> Tally:
    for value in values:
        if isinstance(value, Counted) and value.tally is not None:
            return value.tally
        if isinstance(value, (tuple, list)):
            for item in value:
                if isinstance(item, Counted) and item.tally is not None:
                    return item.tally
    return Tally()  # a Counted array that lost its tally: counted nowhere


def _plain(value: Any) -> Any:
    return value.view(np.ndarray) if isinstance(value, Counted) else value


def _plain_tree(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return type(value)(_plain_tree(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain_tree(v) for k, v in value.items()}
    return _plain(value)


def _counted(value: Any, tally: Tally, scalars: bool = False) -> Any:
    """Results as Counted arrays, so what is computed from them is counted; with `scalars`, NumPy scalars
    too (a value computed from the inputs is no constant)."""
    if isinstance(value, Counted):
        return value
    if isinstance(value, np.ndarray):
        return tally.track(value)
    if scalars and isinstance(value, np.generic):
        return tally.track(np.asarray(value))
    if isinstance(value, (tuple, list)):
        return type(value)(_counted(v, tally, scalars) for v in value)
    return value


def _constant(value: Any) -> bool:
    return not isinstance(value, Counted) and np.size(value) == 1


def _folded(ufunc: np.ufunc, inputs: Sequence[Any]) -> bool:
    """A scaling by a constant: the scale of the neighbouring instruction, not an operation."""
    if ufunc in (np.negative, np.positive):
        return True
    if ufunc is np.multiply:
        return any(_constant(x) for x in inputs)
    return ufunc is np.divide and _constant(inputs[1])


def _count_ufunc(tally: Tally, ufunc: np.ufunc, method: str, inputs: Sequence[Any], result: Any) -> None:
    if method == "__call__" and ufunc.signature is not None:
        product = _GUFUNC_PRODUCTS.get(ufunc)
        if product is not None:
            product(tally, np.shape(inputs[0]), np.shape(inputs[1]))
    elif method == "__call__":
        if not _folded(ufunc, inputs):
            tally.vec_flops += int(np.size(result[0] if isinstance(result, tuple) else result))
    elif method in ("reduce", "accumulate", "reduceat"):
        tally.vec_flops += int(np.size(inputs[0]))
    elif method == "outer":
        tally.vec_flops += int(np.size(result))
    elif method == "at":
        tally.vec_flops += int(np.size(_plain(inputs[0])[inputs[1]]))


# -- counting by shapes ---------------------------------------------------------------------------------


def _probe(value: Any) -> Any:
    """A stand-in of `value` for learning a result's dtype: at most one element, of its dtype and (up to one)
    dimensions, so NumPy promotes it as it would the value; Python numbers stay as they are."""
    if isinstance(value, np.ndarray):
        return np.zeros((min(value.size, 1),) if value.ndim else (), value.dtype)
    return value


def _ufunc_by_shape(tally: Tally, ufunc: np.ufunc, method: str, inputs: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """A ufunc on arrays without data: the result's shape from the operands', its dtype from the ufunc on
    one-element stand-ins, its work counted as on data; results written into `out` are left unwritten."""
    out = kwargs.pop("out", None)
    where = kwargs.pop("where", True)
    plain = [_plain(x) for x in inputs]
    if method == "__call__" and ufunc.signature is None:
        shape = np.broadcast_shapes(*(np.shape(x) for x in (*plain, where)))
        probed = ufunc(*(_probe(x) for x in plain), **kwargs)
    elif method == "__call__" and ufunc in _GUFUNC_PRODUCTS and len(plain) == 2:
        a, b = np.shape(plain[0]), np.shape(plain[1])
        shape = _product_shape(ufunc, a, b)
        probed = np.zeros((), np.result_type(*plain, *([kwargs["dtype"]] if kwargs.get("dtype") else [])))
    elif method == "reduce" and where is True:
        x = plain[0]
        axes = _axes(kwargs.get("axis", 0), x.ndim)
        kept = tuple(min(n, 1) if i in axes else n for i, n in enumerate(x.shape))
        probed = ufunc.reduce(np.broadcast_to(np.zeros((), x.dtype), kept), **kwargs)
        shape = np.shape(probed)
    elif method == "accumulate":
        shape = np.shape(plain[0])
        probed = ufunc.accumulate(np.zeros(1, plain[0].dtype), dtype=kwargs.get("dtype"))
    elif method == "outer":
        shape = np.shape(plain[0]) + np.shape(plain[1])
        probed = ufunc(_probe(plain[0]), _probe(plain[1]), **kwargs)
    elif method == "at":
        _count_ufunc(tally, ufunc, method, inputs, None)
        return None
    else:
        raise ShapeOnlyError(f"{ufunc.__name__}.{method} is not counted by shapes")
    probes = probed if isinstance(probed, tuple) else (probed,)
    results = tuple(tally.ghost(shape, np.asarray(p).dtype) for p in probes)
    _count_ufunc(tally, ufunc, method, inputs, results if len(results) > 1 else results[0])
    if out is not None:
        return out[0] if len(out) == 1 else out
    return results if len(results) > 1 else results[0]


def _axes(axis: Any, ndim: int) -> set[int]:
    """The axes of an `ndim`-dimensional array that `axis` names (None: all; an int or several, negative ones
    counted from the end), as a reduction or a contraction takes them."""
    return set(range(ndim)) if axis is None else {a % max(ndim, 1) for a in np.atleast_1d(axis).tolist()}


def _product_shape(ufunc: Any, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The result shape of np.matmul (and the NumPy 2 vecdot, matvec, vecmat) on operands of shapes a and b."""
    if ufunc is np.matmul:
        batch = np.broadcast_shapes(a[:-2], b[:-2])
        return batch + (a[-2:-1] if len(a) > 1 else ()) + (b[-1:] if len(b) > 1 else ())
    name = ufunc.__name__
    if name == "vecdot":
        return np.broadcast_shapes(a[:-1], b[:-1])
    if name == "matvec":
        return np.broadcast_shapes(a[:-2], b[:-1]) + a[-2:-1]
    return np.broadcast_shapes(a[:-1], b[:-2]) + b[-1:]


# -- products -------------------------------------------------------------------------------------------


def _matmul(tally: Tally, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    """np.matmul's shapes: (..., m, k) @ (..., k, n), a 1-D side being a vector."""
    rows = a[-2] if len(a) > 1 else 1
    cols = b[-1] if len(b) > 1 else 1
    batch = math.prod(np.broadcast_shapes(a[:-2], b[:-2])) if len(a) > 2 or len(b) > 2 else 1
    tally.product(rows, cols, a[-1], batch)


def _vecdot(tally: Tally, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    tally.product(1, 1, a[-1], math.prod(np.broadcast_shapes(a[:-1], b[:-1])))


def _matvec(tally: Tally, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    tally.product(a[-2], 1, a[-1], math.prod(np.broadcast_shapes(a[:-2], b[:-1])))


def _vecmat(tally: Tally, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    tally.product(1, b[-1], a[-1], math.prod(np.broadcast_shapes(a[:-1], b[:-2])))


_GUFUNC_PRODUCTS: dict[Any, Callable[[Tally, tuple[int, ...], tuple[int, ...]], None]] = {np.matmul: _matmul}
for _name, _count in (("vecdot", _vecdot), ("matvec", _matvec), ("vecmat", _vecmat)):  # NumPy 2.0 / 2.2
    if hasattr(np, _name):
        _GUFUNC_PRODUCTS[getattr(np, _name)] = _count


def _last_axis_product(tally: Tally, args: Any, kwargs: Any, result: Any) -> None:
    """np.dot and np.inner: the last axis of `a` against one axis of `b` of the same length (np.dot's
    second-to-last, np.inner's last); every other axis of either side is a row or a column."""
    a, b = np.shape(args[0]), np.shape(args[1])
    if not a or not b:
        _count_ufunc(tally, np.multiply, "__call__", args[:2], result)
        return
    inner = a[-1]
    tally.product(math.prod(a) // inner, math.prod(b) // inner if inner else 0, inner)


def _tensordot(tally: Tally, args: Any, kwargs: Any, result: Any) -> None:
    """np.tensordot: `axes` of `a` (its last N, or those listed) against as many of `b`."""
    a = np.shape(args[0])
    axes = args[2] if len(args) > 2 else kwargs.get("axes", 2)
    contracted = list(range(len(a) - axes, len(a))) if isinstance(axes, int) else np.atleast_1d(axes[0]).tolist()
    inner = math.prod(a[i] for i in contracted)
    if inner:
        tally.product(math.prod(a) // inner, int(np.size(args[1])) // inner, inner)


def _vdot(tally: Tally, args: Any, kwargs: Any, result: Any) -> None:
    tally.product(1, 1, int(np.size(args[0])))


def _outer(tally: Tally, args: Any, kwargs: Any, result: Any) -> None:
    tally.vec_flops += int(np.size(result))  # one multiply per element


def _norm(tally: Tally, args: Any, kwargs: Any, result: Any) -> None:
    tally.vec_flops += 2 * int(np.size(args[0]))  # a square and an add per element


def _where(tally: Tally, args: Any, kwargs: Any, result: Any) -> None:
    if len(args) == 3:
        tally.vec_flops += int(np.size(result))


def _einsum(tally: Tally, args: Any, kwargs: Any, result: Any) -> None:
    """np.einsum with subscripts: each operand contracted into the running result, left to right."""
    if not isinstance(args[0], str):
        return  # the interleaved (operand, sublist) form is not counted
    operands = args[1:]
    inputs, output = _subscripts(args[0], [np.ndim(op) for op in operands])
    sizes: dict[str, int] = {}
    for letters, operand in zip(inputs, operands, strict=True):
        sizes.update(zip(letters, np.shape(operand), strict=True))
    current = inputs[0]
    if len(inputs) == 1:
        if set(current) - set(output):  # a reduction (sum, trace); otherwise a transpose or a copy
            tally.vec_flops += math.prod(sizes[i] for i in set(current))
        return
    for position, other in enumerate(inputs[1:], start=2):
        needed = set(output).union(*inputs[position:])
        both = set(current) | set(other)
        summed = (set(current) & set(other)) - needed
        batch = (set(current) & set(other)) & needed
        rows = math.prod(sizes[i] for i in set(current) - set(other))
        cols = math.prod(sizes[i] for i in set(other) - set(current))
        inner = math.prod(sizes[i] for i in summed)
        if summed:
            tally.product(rows, cols, inner, math.prod(sizes[i] for i in batch))
        else:
            tally.vec_flops += math.prod(sizes[i] for i in both)  # an element-wise or outer product
        current = "".join(sorted(both & needed))


def _subscripts(spec: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Explicit letters for every operand and the output, ellipses spelled out and implicit outputs made
    explicit (the letters seen once, in alphabetical order, as NumPy does)."""
    spec = spec.replace(" ", "")
    left, arrow, right = spec.partition("->")
    terms = left.split(",")
    spare = iter(sorted(set("ABCDEFGHIJKLMNOPQRSTUVWXYZ") - set(spec)))
    width = max((rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks, strict=True)
                 if "..." in term), default=0)
    dots = "".join(next(spare) for _ in range(width))
    terms = [term.replace("...", dots[len(dots) - (rank - len(term.replace("...", ""))):])
             for term, rank in zip(terms, ranks, strict=True)]
    if arrow:
        return terms, right.replace("...", dots)
    letters = "".join(terms)
    return terms, dots + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in dots))


# functions counted as a whole: NumPy's own code for the last three converts its inputs to base-class arrays
_OWN_COUNT: dict[Any, Callable[[Tally, Any, Any, Any], None]] = {
    np.dot: _last_axis_product, np.inner: _last_axis_product, np.vdot: _vdot, np.einsum: _einsum, np.where: _where,
    np.tensordot: _tensordot, np.outer: _outer, np.linalg.norm: _norm}


# functions whose result's shape depends on the values: counted on data only
_DATA_SHAPED = {np.nonzero, np.argwhere, np.flatnonzero, np.unique, np.compress, np.extract, np.count_nonzero}


def _operand_shapes(args: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return np.shape(args[0]), np.shape(args[1])


def _dtype_of(*values: Any) -> np.dtype:
    return np.result_type(*(_probe(_plain(v)) for v in values))


def _dot_result(args: Any, kwargs: Any) -> tuple[tuple[int, ...], np.dtype]:
    a, b = _operand_shapes(args)
    if not a or not b:
        return np.broadcast_shapes(a, b), _dtype_of(args[0], args[1])
    return a[:-1] + (b[:-2] + b[-1:] if len(b) > 1 else ()), _dtype_of(args[0], args[1])


def _inner_result(args: Any, kwargs: Any) -> tuple[tuple[int, ...], np.dtype]:
    a, b = _operand_shapes(args)
    return (np.broadcast_shapes(a, b) if not a or not b else a[:-1] + b[:-1]), _dtype_of(args[0], args[1])


def _tensordot_result(args: Any, kwargs: Any) -> tuple[tuple[int, ...], np.dtype]:
    a, b = _operand_shapes(args)
    axes = args[2] if len(args) > 2 else kwargs.get("axes", 2)
    if isinstance(axes, int):
        kept = a[:len(a) - axes] + b[axes:]
    else:
        drop_a, drop_b = _axes(axes[0], len(a)), _axes(axes[1], len(b))
        kept = (tuple(n for i, n in enumerate(a) if i not in drop_a)
                + tuple(n for i, n in enumerate(b) if i not in drop_b))
    return kept, _dtype_of(args[0], args[1])


def _einsum_result(args: Any, kwargs: Any) -> tuple[tuple[int, ...], np.dtype]:
    if not isinstance(args[0], str):
        raise ShapeOnlyError("np.einsum's interleaved form is not counted by shapes")
    operands = args[1:]
    inputs, output = _subscripts(args[0], [np.ndim(op) for op in operands])
    sizes: dict[str, int] = {}
    for letters, operand in zip(inputs, operands, strict=True):
        sizes.update((c, n) for c, n in zip(letters, np.shape(operand), strict=True) if n != 1 or c not in sizes)
    return tuple(sizes[c] for c in output), _dtype_of(*operands)


def _norm_result(args: Any, kwargs: Any) -> tuple[tuple[int, ...], np.dtype]:
    x = _plain(args[0])
    axis = args[2] if len(args) > 2 else kwargs.get("axis")
    keepdims = args[3] if len(args) > 3 else kwargs.get("keepdims", False)
    axes = _axes(axis, x.ndim)
    shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape)) if keepdims else tuple(
        n for i, n in enumerate(x.shape) if i not in axes)
    return shape, np.linalg.norm(np.zeros((1,) * x.ndim, x.dtype), *args[1:], **kwargs).dtype


def _where_result(args: Any, kwargs: Any) -> tuple[tuple[int, ...], np.dtype]:
    return np.broadcast_shapes(*(np.shape(a) for a in args)), _dtype_of(args[1], args[2])


# each counted function's result (shape, dtype) from its operands' shapes alone
_RESULT_OF: dict[Any, Callable[[Any, Any], tuple[tuple[int, ...], np.dtype]]] = {
    np.dot: _dot_result, np.inner: _inner_result, np.vdot: lambda args, kwargs: ((), _dtype_of(args[0], args[1])),
    np.einsum: _einsum_result, np.where: _where_result, np.tensordot: _tensordot_result,
    np.outer: lambda args, kwargs: ((int(np.size(args[0])), int(np.size(args[1]))), _dtype_of(args[0], args[1])),
    np.linalg.norm: _norm_result}


# -- array constructors that would drop the subclass ----------------------------------------------------

_CONSTRUCTORS = ("array", "asarray", "ascontiguousarray", "asfortranarray")
_patch_lock = threading.Lock()
_patch_depth = 0


def _keeping(make: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def wrapper(*args: Any, **kwargs: Any) -> np.ndarray:
        tally = args[0].tally if args and isinstance(args[0], Counted) else None
        if tally is None:
            return make(*args, **kwargs)  # exactly the original call
        if tally.shapes_only:
            shape = args[0].shape
            probe = make(np.zeros((1,) * len(shape), args[0].dtype), *args[1:], **kwargs)
            return tally.ghost((1,) * (probe.ndim - len(shape)) + shape, probe.dtype)
        return tally.track(make(_plain(args[0]), *args[1:], **kwargs))

    wrapper.__wrapped__ = make
    return wrapper


@contextlib.contextmanager
def _arrays_keep_counting() -> Iterator[None]:
    """`np.asarray(x, dtype=np.float64)` and its kin make base-class arrays, so a reference that starts with
    one would be counted as doing nothing. While some count runs, numpy's module functions of those names
    keep a Counted input counted; for any other input they are the originals, so other threads' NumPy
    calls are unaffected."""
    global _patch_depth
    with _patch_lock:
        if _patch_depth == 0:
            for name in _CONSTRUCTORS:
                setattr(np, name, _keeping(getattr(np, name)))
        _patch_depth += 1
    try:
        yield
    finally:
        with _patch_lock:
            _patch_depth -= 1
            if _patch_depth == 0:
                for name in _CONSTRUCTORS:
                    setattr(np, name, getattr(np, name).__wrapped__)
