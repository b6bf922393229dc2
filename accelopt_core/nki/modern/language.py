"""`nki.language` (newer NKI): the legacy names, except that every loop form is unrolled at trace
time (the range helpers are aliases of Python's `range`), so loops are recorded as static."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from .. import language as _legacy
from .. import ops
from ..errors import KernelUsageError
from ..tensor import Tile, current
from ..trace import LoopKind
from .scalar import runtime_bound


def affine_range(*args: int, **_: Any) -> Iterator[int]:
    return current().loop(LoopKind.STATIC, args)


sequential_range = static_range = affine_range


def dynamic_range(*args: int, **_: Any) -> Iterator[int]:
    """An on-device loop: iterations run in order."""
    return current().loop(LoopKind.SEQUENTIAL, args)


NkiTensor = Tile  # `def kernel(x: nl.NkiTensor)`: NKI 0.8's name for the tensor type


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[int], Any], step: int = 1, unroll: bool = False,
              **_: Any) -> None:
    """NKI 0.7's compiled loop: `body_fun(i)` for i in range(lower, upper, step), run on device (a sequential
    loop; `unroll=True` is unrolled by the compiler, a static one). Bounds read on device are not simulated."""
    bounds = (runtime_bound(lower, "nl.fori_loop"), runtime_bound(upper, "nl.fori_loop"), int(step))
    if bounds[2] < 1:
        raise KernelUsageError(f"nl.fori_loop: step must be a positive int, got {step}")
    for i in current().loop(LoopKind.STATIC if unroll else LoopKind.SEQUENTIAL, bounds):
        body_fun(i)


def while_loop(init: Any, body_fun: Callable[[int], Any], **_: Any) -> None:
    """NKI 0.7's compiled while loop: `r = init; while r != 0: r = body_fun(r)`. The condition must be known
    while tracing (an int the body returns; one read on device is not simulated), so the trip count is only
    known once the body has run: the iterations are recorded unrolled, as a Python `while` is."""
    condition = runtime_bound(init, "nl.while_loop")
    while condition != 0:
        condition = runtime_bound(body_fun(condition), "nl.while_loop")


@contextlib.contextmanager
def no_reorder(**_: Any) -> Iterator[None]:
    """`with nl.no_reorder():` keeps the compiler from reordering the block's instructions: accepted,
    not modelled (the simulator schedules in program order per engine anyway)."""
    yield


def shared_identity_matrix(n: int, dtype: Any = _legacy.uint8, **_: Any) -> Tile:
    """An identity matrix in SBUF (the newer API's; the legacy one is an HBM constant to load): the
    constant the compiler bakes in, brought on chip once."""
    return ops.dma_copy(_legacy.shared_identity_matrix(n, dtype))


class NKIObject:
    """The base class of the plain Python objects library code passes into kernels (configurations,
    tiled ranges): the compiler traces through them, so here they are ordinary objects.

    As `@dataclass` NKIObjects are written in nki-library: unannotated class attributes (`section_idx =
    None`) are fields too, and a field the constructor is not given is None (its MLP constants leave
    one out); a plain dataclass refuses both."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        annotations = dict(inspect.get_annotations(cls))
        for name in annotations:
            if name not in vars(cls):
                setattr(cls, name, None)
        for name, value in vars(cls).items():
            if (name.startswith("_") or name in annotations or callable(value) or type(value).__hash__ is None
                    or isinstance(value, (property, classmethod, staticmethod))):
                continue
            annotations[name] = Any
        cls.__annotations__ = annotations


def __getattr__(name: str) -> Any:
    return getattr(_legacy, name)
