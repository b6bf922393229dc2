"""`nki.language` (newer NKI): the legacy names, except that every loop form is unrolled at trace
time (the range helpers are aliases of Python's `range`), so loops are recorded as static."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import language as _legacy
from ..tensor import current
from ..trace import LoopKind


def affine_range(*args: int, **_: Any) -> Iterator[int]:
    return current().loop(LoopKind.STATIC, args)


sequential_range = static_range = affine_range


def dynamic_range(*args: int, **_: Any) -> Iterator[int]:
    """An on-device loop: iterations run in order."""
    return current().loop(LoopKind.SEQUENTIAL, args)


def __getattr__(name: str) -> Any:
    return getattr(_legacy, name)
