"""The instruction trace: what a kernel did, in the order the simulator executed it.

The simulator appends one `Instruction` per hardware instruction it executes. Everything the
performance model needs lives here and nowhere else: which engine ran it, what it read and wrote
(tensor and exact bounding region, so dependencies can be computed), how many elements per
partition it processed (the `N` of the ISA cost formulas), flops, the kernel source line and the
loop nest it ran in.

Records use `__slots__` and share interned loop-nest tuples, because a large kernel produces
hundreds of thousands of them and tracing must stay fast and small.

A recording run also keeps the trace's *tape* (`Trace.tape`): every call of an instruction the
kernel's own code made (`Called`) and every tensor it created itself (`Declared`), enough to run the
kernel again (replay.py). Its wire form is tape.py's. This module imports no simulator module: the
performance model reads traces without the simulator, and the simulator records into them.
"""

from __future__ import annotations

import enum
import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dtypes import DTYPE_SIZES
from .instructions import Engine, Op


class Alu(enum.StrEnum):
    """The arithmetic operators instructions apply, as an instruction's `attrs` name them ("op", "op0", "op1",
    "reduce_op") and as NKI spells them (`nl.add` is "add"); str-valued like `Op`."""

    ADD = "add"
    SUBTRACT = "subtract"
    MULTIPLY = "multiply"
    DIVIDE = "divide"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    POWER = "power"
    MOD = "mod"
    FMOD = "fmod"
    EQUAL = "equal"
    NOT_EQUAL = "not_equal"
    GREATER = "greater"
    GREATER_EQUAL = "greater_equal"
    LESS = "less"
    LESS_EQUAL = "less_equal"
    LOGICAL_AND = "logical_and"
    LOGICAL_OR = "logical_or"
    LOGICAL_XOR = "logical_xor"
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    LEFT_SHIFT = "left_shift"
    RIGHT_SHIFT = "right_shift"
    ABS_MAX = "abs_max"
    RSQRT = "rsqrt"  # the unary ones tensor_scalar also takes (their operand is ignored)
    RECIPROCAL = "reciprocal"
    ABS = "abs"


def unknown_op(value: object) -> str:
    """Why a name is not an instruction, with the names that are (for a typo)."""
    return f"{value!r} is not an instruction the simulator emits (known: {', '.join(sorted(Op))})"


class LoopKind:
    """How the iterations of a kernel loop may be scheduled.

    affine: no loop-carried dependency, iterations may overlap across engines.
    sequential: iterations keep their order (a loop-carried dependency may exist).
    static: unrolled at trace time (legacy `static_range`, and every loop of the newer `nki` API);
    only data dependencies order its instructions.
    """

    AFFINE = "affine"
    SEQUENTIAL = "sequential"
    STATIC = "static"


@dataclass(slots=True, eq=False)
class Loop:
    """One loop statement in the kernel (one object per execution of the `for`, not per iteration)."""

    id: int
    kind: str
    trip_count: int
    line: int
    parent: Loop | None


# A loop nest is a tuple of (loop, iteration index) pairs, outermost first. The simulator builds
# one tuple per iteration and every instruction of that iteration shares it.
LoopNest = tuple[tuple[Loop, int], ...]


LEVELS = ("hbm", "sbuf", "psum")  # the memories a tensor lives in (`TensorInfo.buffer`, `Access.buffer`)


@dataclass(slots=True, eq=False)
class TensorInfo:
    """A tensor allocated by the kernel or passed to it."""

    id: int
    name: str
    buffer: str  # "hbm", "sbuf" or "psum"
    shape: tuple[int, ...]
    dtype: str
    partition_axis: int  # index of the partition dimension (0 unless par_dim moved it); -1 for HBM
    bytes_per_partition: int  # on-chip footprint of one partition, all block dims included; 0 for HBM
    line: int
    loops: LoopNest
    alias_of: int = -1  # id of the tensor this one reshapes (same memory), -1 for its own allocation
    # Direct allocation (nki.compiler): the tensor's physical tiles, block dimension first in `shape`,
    # and where each lives, (start_partition, byte_addr) in SBUF or (bank, start_partition, byte_addr)
    # in PSUM; accesses name tiles by their index. None: the compiler allocates.
    placement: tuple[tuple[int, ...], ...] | None = None

    @property
    def nbytes(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count * DTYPE_SIZES.get(self.dtype, 4)


@dataclass(slots=True, unsafe_hash=True)  # not frozen: a frozen init costs 8 % of a trace
class Access:
    """One operand of an instruction: which tensor, which region, how many bytes.

    `region` is a half-open bounding box `((lo, hi), ...)` in the tensor's own coordinates, one pair
    per tensor dimension. For strided or gathered accesses it is the smallest box that holds every
    element touched, so dependencies computed from it are conservative, never missed.
    """

    tensor: int
    buffer: str
    dtype: str
    shape: tuple[int, ...]  # shape of the tile as the instruction sees it (partition dim first)
    region: tuple[tuple[int, int], ...]
    nbytes: int  # bytes actually read or written (elements x item size)
    contiguous_bytes: int  # longest contiguous run in the tensor's memory layout (DMA efficiency)
    # which elements exactly (`Subscript.elements`): None when they are the whole `region`, else a key that is
    # equal only for the same elements, and for a gather their flat indices
    elements: tuple[Any, ...] | None = field(default=None, compare=False)
    gathered: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.shape else 1


@dataclass(slots=True, eq=False)
class Instruction:
    """One executed hardware instruction.

    `partitions` and `free_elements` describe the work: an instruction processes `free_elements`
    elements on each of `partitions` lanes (for DMA, `free_elements` is per partition of the
    on-chip side). `attrs` carries op-specific facts the cost model needs, e.g. for `nc_matmul`:
    `stationary_free`, `moving_free`, `contraction`, `accumulate`, `is_transpose`; for
    `activation`: `func`; for DMA: `direction` ("hbm_to_sbuf", "sbuf_to_hbm", ...).
    """

    index: int
    engine: str
    op: Op
    reads: tuple[Access, ...]
    writes: tuple[Access, ...]
    partitions: int
    free_elements: int
    flops: int
    line: int
    loops: LoopNest
    attrs: dict[str, Any] | None = None
    dtype: str = "float32"  # dtype the engine computes or moves


@dataclass(slots=True)
class Trace:
    """Every instruction a kernel executed, plus the tensors it used."""

    instructions: list[Instruction] = field(default_factory=list)
    tensors: dict[int, TensorInfo] = field(default_factory=dict)
    loops: list[Loop] = field(default_factory=list)
    kernel_file: str = ""
    kernel_name: str = ""
    # SPMD: the grid of every launch, and the index of the first instruction of every program. One
    # NeuronCore runs the programs of a launch one after another, so each start is a barrier.
    launches: list[tuple[int, ...]] = field(default_factory=list)
    program_starts: list[int] = field(default_factory=list)
    host_written: set[int] = field(default_factory=set)  # HBM tensors filled with host data (constants, nl.full)
    tape: list[Any] | None = None  # a recording run's replayable calls (module docstring), else None

    def __len__(self) -> int:
        return len(self.instructions)

    def count_by_engine(self) -> dict[str, int]:
        counts = dict.fromkeys(Engine.ALL, 0)
        for inst in self.instructions:
            counts[inst.engine] += 1
        return counts

    def summary(self) -> dict[str, Any]:
        """Counts that need no timing model: instructions, flops and bytes moved by level."""
        read = dict.fromkeys(LEVELS, 0)
        written = dict.fromkeys(LEVELS, 0)
        flops = transpose_flops = 0
        for inst in self.instructions:
            for acc in inst.reads:
                read[acc.buffer] += acc.nbytes
            for acc in inst.writes:
                written[acc.buffer] += acc.nbytes
            if inst.engine == Engine.TENSOR:
                flops += inst.flops
                if inst.attrs and inst.attrs.get("is_transpose"):
                    transpose_flops += inst.flops
        return {
            "instruction_count": len(self.instructions),
            "instructions_by_engine": self.count_by_engine(),
            **{f"{level}_{way}_bytes": moved[level] for level in LEVELS
               for way, moved in (("read", read), ("write", written))},
            "hardware_flops": flops,
            "transpose_flops": transpose_flops,
        }


_pauses = {"count": 0, "resume": False}
_pauses_lock = threading.Lock()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a trace-sized graph of small acyclic objects is
    built or walked (tracing, encoding, replaying, scheduling): it would rescan them over and over, for
    nothing. Counted, so threads doing this at once resume it only when the last one is done. On resuming,
    what was built meanwhile goes straight to the oldest generation: it is long-lived (a trace, a schedule),
    and the young generations' first pass over a million new objects would cost a quarter of a second.
    Objects someone else froze stay frozen: then nothing is moved."""
    with _pauses_lock:
        if not _pauses["count"]:
            _pauses["resume"] = gc.isenabled()
            gc.disable()
        _pauses["count"] += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses["count"] -= 1
            if not _pauses["count"] and _pauses["resume"]:
                if not gc.get_freeze_count():
                    gc.freeze()  # every tracked object to the permanent generation, unscanned ...
                    gc.unfreeze()  # ... and back into the oldest one
                gc.enable()


# --------------------------------------------------------------------------------------------
# The tape's entries (their wire form: tape.py)
# --------------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Declared:
    """What the kernel's own code did to a tensor outside any instruction. `role`: "input" (it is the
    next array argument), "tensor" (allocated), "view" (a reshape; `init` is the id of the tensor viewed)
    or "fill" (host data written into the whole HBM tensor; `init` is the value or the array)."""

    storage: Any  # tensor.Storage
    role: str
    init: Any = None


@dataclass(slots=True, eq=False)
class Called:
    """One call of an instruction (ops.py) by the kernel's own code: its arguments by parameter name,
    where it was made, and what it did (tensors created, instructions emitted, whether it raised)."""

    op: str
    arguments: dict[str, Any]
    line: int
    loops: LoopNest
    ids_before: int
    index_before: int
    created: int = 0
    emitted: int = 0
    raised: bool = False

    def finish(self, ids_used: int, instructions: int) -> None:
        self.created = ids_used - self.ids_before
        self.emitted = instructions - self.index_before
