"""A reference's inputs drawn without their data: what the timed shapes need, in no time and memory.

Trace-only timing needs the shapes and dtypes of a reference's inputs, not their values, yet drawing
them for real costs seconds at full size (gigabytes of random numbers; fresh memory is slow on virtual
machines). While a reference draws here, NumPy's random functions give arrays without data
(work.Tally.ghost: one element, zero strides) of the size asked for, and everything computed from
them stays so (work.Counted's shape-only hooks: `.astype`, reshapes, `np.abs`, ...). Only the thread
drawing sees those stand-ins: every other thread keeps NumPy's own functions. A draw that reads its
values, a random function not stood in for, or a 0-d input (a scalar whose value the kernel gets)
raises ShapeOnlyError; the caller then draws for real.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .work import Counted, ShapeOnlyError, Tally


def _shape(size: Any, *parameters: Any) -> tuple[int, ...]:
    """The shape of a draw of `size` (None: as the parameters broadcast, which must then be numbers)."""
    if size is None:
        if any(np.ndim(p) for p in parameters):
            raise ShapeOnlyError("a draw shaped by its parameters' arrays")
        return ()
    return tuple(int(n) for n in np.atleast_1d(size))


def _ghost(tally: Tally, shape: tuple[int, ...], dtype: Any) -> Any:
    if not shape:  # a single number the reference may compute with: the whole draw is then made for real
        raise ShapeOnlyError("a single random number")
    return tally.ghost(shape, dtype)


class GhostGenerator:
    """np.random.Generator's common draws, as arrays without data."""

    def __init__(self, tally: Tally):
        self._tally = tally

    def standard_normal(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        return _ghost(self._tally, _shape(size), dtype)

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        return _ghost(self._tally, _shape(size, loc, scale), np.float64)

    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        return _ghost(self._tally, _shape(size), dtype)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        return _ghost(self._tally, _shape(size, low, high), np.float64)

    def integers(self, low: Any, high: Any = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> Any:
        return _ghost(self._tally, _shape(size, low, high), dtype)

    def __getattr__(self, name: str) -> Any:
        raise ShapeOnlyError(f"Generator.{name} is not drawn by shapes")


def _legacy(tally: Tally) -> dict[str, Callable[..., Any]]:
    """np.random's module functions (the legacy global generator), as arrays without data."""
    rng = GhostGenerator(tally)
    return {
        "normal": rng.normal, "uniform": rng.uniform, "standard_normal": rng.standard_normal,
        "random": rng.random, "random_sample": rng.random, "ranf": rng.random, "sample": rng.random,
        "rand": lambda *dims: rng.random(dims or None), "randn": lambda *dims: rng.standard_normal(dims or None),
        "randint": lambda low, high=None, size=None, dtype=int: rng.integers(low, high, size, dtype),
        "seed": lambda seed=None: None, "default_rng": lambda seed=None: rng,
    }


_patch_lock = threading.Lock()


@contextlib.contextmanager
def random_without_data(tally: Tally) -> Iterator[GhostGenerator]:
    """While inside, this thread's np.random draws are arrays without data; other threads' are NumPy's.
    Yields the Generator to hand a native reference."""
    owner = threading.get_ident()
    stand_ins = _legacy(tally)

    def gated(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def draw(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != owner:
                return original(*args, **kwargs)
            return stand_ins[name](*args, **kwargs)

        return draw

    with _patch_lock:
        originals = {name: getattr(np.random, name) for name in stand_ins}
        for name, original in originals.items():
            setattr(np.random, name, gated(name, original))
        try:
            yield GhostGenerator(tally)
        finally:
            for name, original in originals.items():
                setattr(np.random, name, original)


def without_data(drawn: Any) -> Any:
    """What a draw by shapes gave (an array or a sequence of them), or ShapeOnlyError where an input is a
    number without its value (a 0-d input is a scalar the kernel computes with; a constant one is real)."""
    arrays = drawn if isinstance(drawn, (tuple, list)) else [drawn]
    if any(isinstance(a, Counted) and a.ndim == 0 for a in arrays):
        raise ShapeOnlyError("a scalar input's value is the kernel's to use")
    return drawn
