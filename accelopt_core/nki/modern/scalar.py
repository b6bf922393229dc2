"""NKI 0.8's `NkiScalar` (`nisa.scalar_load` / `nisa.scalar_store`) and the register API it replaces.

A scalar is a value known only on device, so a kernel's trace cannot depend on it. Here every scalar lives
in a [1, 1] SBUF tile: `scalar_load` of an SBUF tile is that tile, and arithmetic on scalars is recorded as
one-element `tensor_scalar` / `tensor_tensor` instructions into a fresh tile. The trace is then the same
for every input, as the replay requires, and a scalar used as a `scalar_offset` is the index tile the
access pattern reads when it runs. Arithmetic runs on the Vector engine's ALU in float32 (exact for
offsets below 2**24; the device's sequencer wraps 32-bit values instead), and is priced as such.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import language as _language
from .. import ops
from ..errors import KernelUsageError, UnsupportedApiError
from ..tensor import HBM, PSUM, Tile
from ..trace import Alu

SCALAR_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.int64))


class NkiScalar:
    """One integer computed on device, held in a [1, 1] SBUF tile."""

    __slots__ = ("tile",)

    def __init__(self, tile: Tile):
        self.tile = tile

    @property
    def dtype(self) -> np.dtype:
        return self.tile.dtype

    def source_tile(self) -> Tile:
        """The [1, 1] SBUF tile an access pattern reads this value from when it runs."""
        return self.tile

    def _apply(self, alu: Alu, other: Any, reverse: bool = False) -> NkiScalar:
        op = alu.value  # the tape records plain names
        result = _language.ndarray((1, 1), dtype=np.int32 if op in _COMPARISONS else self.dtype, buffer=_language.sbuf)
        if isinstance(other, NkiScalar):
            if other.dtype != self.dtype and op not in _COMPARISONS:
                raise KernelUsageError(f"NkiScalar arithmetic needs one dtype, got {self.dtype} and {other.dtype}")
            first, second = (other.tile, self.tile) if reverse else (self.tile, other.tile)
            ops.tensor_tensor(first, second, op, dst=result)
        elif isinstance(other, (int, np.integer)):
            ops.tensor_scalar(self.tile, op, int(other), reverse, dst=result)
        else:
            return NotImplemented
        return NkiScalar(result)

    def __add__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.ADD, other)

    def __radd__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.ADD, other, reverse=True)

    def __sub__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.SUBTRACT, other)

    def __rsub__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.SUBTRACT, other, reverse=True)

    def __mul__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.MULTIPLY, other)

    def __rmul__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.MULTIPLY, other, reverse=True)

    def __neg__(self) -> NkiScalar:
        return self._apply(Alu.SUBTRACT, 0, reverse=True)

    def __lt__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.LESS, other)

    def __le__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.LESS_EQUAL, other)

    def __gt__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.GREATER, other)

    def __ge__(self, other: Any) -> NkiScalar:
        return self._apply(Alu.GREATER_EQUAL, other)

    def __eq__(self, other: Any) -> NkiScalar:  # type: ignore[override]
        return self._apply(Alu.EQUAL, other)

    def __ne__(self, other: Any) -> NkiScalar:  # type: ignore[override]
        return self._apply(Alu.NOT_EQUAL, other)

    __hash__ = object.__hash__

    def __index__(self) -> int:
        raise KernelUsageError("an NkiScalar is known only on device: use it as a scalar_offset, a select index or "
                               "in scalar_store, not as a Python int")

    def __bool__(self) -> bool:
        raise KernelUsageError("an NkiScalar has no truth value while tracing (the condition is known only on "
                               "device); nl.while_loop takes it as its condition")

    def __repr__(self) -> str:
        return f"NkiScalar({self.tile.name}, {self.dtype.name})"


_COMPARISONS = {Alu.LESS, Alu.LESS_EQUAL, Alu.GREATER, Alu.GREATER_EQUAL, Alu.EQUAL, Alu.NOT_EQUAL}


def scalar_load(src: Tile, engine: Any = None, **_: Any) -> NkiScalar:
    """The one element of a [1, 1] int32 / uint32 / int64 tile in SBUF or HBM as a scalar."""
    if not isinstance(src, Tile) or src.size != 1:
        raise KernelUsageError(f"scalar_load reads a 1x1 tile, got {src!r}")
    if src.dtype not in SCALAR_DTYPES:
        raise KernelUsageError(f"scalar_load needs an int32, uint32 or int64 tile, {src.name} is {src.dtype.name}")
    if src.buffer == PSUM:
        raise KernelUsageError("scalar_load cannot read PSUM: nisa.tensor_copy the value to SBUF first")
    if src.buffer == HBM:
        on_chip = _language.ndarray((1, 1), dtype=src.dtype, buffer=_language.sbuf)
        ops.dma_copy(src, dst=on_chip)
        return NkiScalar(on_chip)
    return NkiScalar(src)


def scalar_store(dst: Tile, value: Any, engine: Any = None, **_: Any) -> None:
    """Write a scalar (or a Python int) into a [1, 1] tile."""
    if not isinstance(dst, Tile) or dst.size != 1:
        raise KernelUsageError(f"scalar_store writes a 1x1 tile, got {dst!r}")
    if isinstance(value, NkiScalar):
        if dst.buffer == HBM:
            ops.dma_copy(value.tile, dst=dst)
        else:
            ops.tensor_copy(value.tile, dst=dst)
    elif isinstance(value, (int, np.integer)):
        ops.memset(dst.shape, int(value), dst.dtype, dst=dst)
    else:
        raise KernelUsageError(f"scalar_store stores an NkiScalar or an int, got {value!r}")


class VirtualRegister:
    """`nisa.register_alloc()`: the register API NkiScalar replaced, kept for kernels written before it."""

    __slots__ = ("value",)

    def __init__(self, value: NkiScalar | int | None):
        self.value = value


def register_alloc(value: Any = None, **_: Any) -> VirtualRegister:
    return VirtualRegister(value)


def register_load(dst: VirtualRegister, src: Tile, **_: Any) -> None:
    dst.value = scalar_load(src)


def register_store(dst: Tile, src: VirtualRegister, **_: Any) -> None:
    if src.value is None:
        raise KernelUsageError("register_store of a register nothing was loaded into")
    scalar_store(dst, src.value)


def register_move(dst: VirtualRegister, imm: Any, **_: Any) -> None:
    dst.value = imm.value if isinstance(imm, VirtualRegister) else imm


def runtime_bound(value: Any, what: str) -> int:
    """A loop bound: a Python int, else an unsupported-API error (a trip count read on device would make
    the trace depend on the inputs)."""
    if isinstance(value, VirtualRegister):
        if value.value is None:
            raise KernelUsageError(f"{what}: the register bounding it was never loaded")
        value = value.value
    if isinstance(value, NkiScalar):
        raise UnsupportedApiError(f"{what} with a bound or condition read on device (NkiScalar, VirtualRegister) "
                                  "is not simulated: the simulator traces one instruction list for every input; "
                                  "give the bound as a Python int")
    return int(value)
