"""The instruction trace: what a kernel did, in the order the simulator executed it.

The simulator appends one `Instruction` per hardware instruction it executes. Everything the
performance model needs lives here and nowhere else: which engine ran it, what it read and wrote
(tensor and exact bounding region, so dependencies can be computed), how many elements per
partition it processed (the `N` of the ISA cost formulas), flops, the kernel source line and the
loop nest it ran in.

Records use `__slots__` and share interned loop-nest tuples, because a large kernel produces
hundreds of thousands of them and tracing must stay fast and small.

A recording run also keeps the trace's *tape* (`Trace.tape`): every call of an instruction the
kernel's own code made (ops.py), with its exact operands (tensor and subscript: ints, slices, affine
or materialised index expressions, indirect index tiles), scalars, masks, dtypes, engines and flags,
and every tensor the kernel's code created itself (inputs, allocations with their direct placement,
reshaped views, host data). The tape is the computation: executing its calls again with the same
simulator (replay.py) rebuilds the instruction list exactly and, on real inputs, the outputs. Its
wire form (`tape_to_plain`, read back by `TapeReader`) is plain JSON, versioned, bounded in size, and
is what a sandboxed kernel hands to the trusted side instead of a verdict.
"""

from __future__ import annotations

import base64
import enum
import gc
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
        hbm_read = hbm_write = sbuf_read = sbuf_write = psum_read = psum_write = 0
        flops = transpose_flops = 0
        for inst in self.instructions:
            for acc in inst.reads:
                if acc.buffer == "hbm":
                    hbm_read += acc.nbytes
                elif acc.buffer == "sbuf":
                    sbuf_read += acc.nbytes
                else:
                    psum_read += acc.nbytes
            for acc in inst.writes:
                if acc.buffer == "hbm":
                    hbm_write += acc.nbytes
                elif acc.buffer == "sbuf":
                    sbuf_write += acc.nbytes
                else:
                    psum_write += acc.nbytes
            if inst.engine == Engine.TENSOR:
                flops += inst.flops
                if inst.attrs and inst.attrs.get("is_transpose"):
                    transpose_flops += inst.flops
        return {
            "instruction_count": len(self.instructions),
            "instructions_by_engine": self.count_by_engine(),
            "hbm_read_bytes": hbm_read,
            "hbm_write_bytes": hbm_write,
            "sbuf_read_bytes": sbuf_read,
            "sbuf_write_bytes": sbuf_write,
            "psum_read_bytes": psum_read,
            "psum_write_bytes": psum_write,
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


DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "tfloat32": 4,
    "int32": 4,
    "uint32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int16": 2,
    "uint16": 2,
    "float8_e4m3": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float64": 8,
    "int64": 8,
}


# --------------------------------------------------------------------------------------------
# The tape and its wire form
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


TAPE_FORMAT = "accelopt-trace"
TAPE_VERSION = 2
# Bounds of what the trusted side reads: a recorded run of the largest NKIBench kernels is far below them.
MAX_ENTRIES = 2_000_000
MAX_ARRAY_BYTES = 256 * 1024 * 1024  # masks, materialised index expressions and host constants, decoded
MAX_LOOPS = 1_000_000
MAX_VALUE_DEPTH = 8
MAX_DIMS = 32  # NumPy's own limit; the calibration kernels' block tensors have up to 9
_UNSHOWN = re.compile(r"[^A-Za-z0-9_.\-]")


class TapeError(ValueError):
    """A tape that is not what a recording run writes (malformed, forged or too large)."""


def tape_to_plain(trace: Trace) -> dict[str, Any]:
    """The tape of a recording run as plain JSON data (format: `TapeReader`). Tensors are dropped right
    after the entry that last uses them, so a replay holds no more than the kernel did."""
    if trace.tape is None:
        raise ValueError("this trace was not recorded (run_kernel(..., record=True))")
    with collector_paused():
        return assemble([TapeWriter(trace).chunk(last=True)])


TABLES = ("arrays", "exprs", "loops", "nests")


class TapeWriter:
    """Turns a recording run's tape into plain data, chunk by chunk as the kernel runs (a chunk holds the
    entries recorded since the previous one and the rows of the interned tables they added: loop nests,
    index expressions, arrays), so the trusted side can replay a tape while it is being recorded. The
    first chunk names the format; the last also lists where tensors are dropped (`assemble`)."""

    def __init__(self, trace: Trace):
        from .indexing import DynamicIndex, IndexExpr, Mask, full_subscript
        from .ops import LoopReduction, op_name
        from .tensor import Buffer, Tile

        self.trace = trace
        self._classes = (Tile, Mask, IndexExpr, DynamicIndex, LoopReduction, Buffer)
        self._full = full_subscript
        self._op_name = op_name
        self.arrays: list[list[Any]] = []
        self._array_index: dict[tuple[Any, ...], int] = {}
        self._by_object: dict[int, int] = {}
        self.nests: list[list[int]] = [[]]
        self._nest_index: dict[LoopNest, int] = {(): 0}
        self.exprs: list[list[Any]] = []
        self._expr_index: dict[tuple[Any, ...], int] = {}
        self.last_use: dict[int, int] = {}
        self.kept: set[int] = set()
        self.position = 0
        self.written = 0  # entries already in a chunk
        self._sent = dict.fromkeys(TABLES, 0)  # rows of each table already in a chunk

    def pending(self) -> int:
        """Entries recorded since the last chunk."""
        return len(self.trace.tape or ()) - self.written

    def chunk(self, last: bool = False) -> dict[str, Any]:
        tape = self.trace.tape or []
        entries = []
        for position in range(self.written, len(tape)):
            self.position = position
            entries.append(self.entry(tape[position]))
        chunk: dict[str, Any] = {} if self.written else {"format": TAPE_FORMAT, "version": TAPE_VERSION}
        self.written = len(tape)
        loops = [[loop.kind, loop.trip_count, loop.line, loop.parent.id if loop.parent is not None else -1]
                 for loop in self.trace.loops[self._sent["loops"]:]]
        for name, rows in (("arrays", self.arrays), ("exprs", self.exprs), ("nests", self.nests)):
            chunk[name] = rows[self._sent[name]:]
        chunk["loops"] = loops
        self._sent = {name: self._sent[name] + len(chunk[name]) for name in TABLES}
        chunk["entries"] = entries
        if last:
            drops: dict[int, list[int]] = {}
            for tensor, position in self.last_use.items():
                if tensor not in self.kept:
                    drops.setdefault(position, []).append(tensor)
            chunk["drops"] = [[position, sorted(drops[position])] for position in sorted(drops)]
        return chunk

    def entry(self, entry: Any) -> list[Any]:
        if isinstance(entry, Called):
            for tensor in range(entry.ids_before + 1, entry.ids_before + entry.created + 1):
                self.last_use[tensor] = self.position
            arguments = {name: self.value(value) for name, value in entry.arguments.items()}
            return ["call", entry.op, arguments, entry.line, self.nest(entry.loops), entry.created, entry.emitted,
                    entry.raised]
        if isinstance(entry, Declared):
            return self.declared(entry)
        kind = entry[0]
        if kind == "return":
            tiles = [self.value(tile) for tile in entry[1]]
            self.kept.update(tile.storage.id for tile in entry[1])
            return ["return", tiles]
        return [kind, *[list(part) for part in entry[1:]]]  # "program", "launch" with its grid

    def declared(self, entry: Declared) -> list[Any]:
        storage = entry.storage
        self.last_use[storage.id] = self.position
        info = self.trace.tensors.get(storage.id)
        line, nest = (info.line, self.nest(info.loops)) if info is not None else (0, 0)
        if entry.role == "input":
            return ["input", storage.id, storage.name, storage.dtype_name, list(storage.shape)]
        if entry.role == "view":
            self.last_use[entry.init] = self.position
            return ["view", storage.id, entry.init, list(storage.shape), line, nest, storage.dtype_name]
        if entry.role == "fill":
            values = entry.init
            plain = ["array", self.array(values)] if isinstance(values, np.ndarray) else self.value(values)
            return ["fill", storage.id, plain, line]
        slots = storage.slots
        placement = None if slots is None else [self.array(slots.slot_of_block),
                                                [list(location) for location in slots.locations]]
        return ["tensor", storage.id, storage.name, storage.buffer, storage.dtype_name, list(storage.shape),
                storage.partition_axis, placement, line, nest]

    def nest(self, loops: LoopNest) -> int:
        index = self._nest_index.get(loops)
        if index is None:
            index = self._nest_index[loops] = len(self.nests)
            self.nests.append([n for loop, iteration in loops for n in (loop.id, iteration)])
        return index

    def array(self, values: np.ndarray) -> int:
        index = self._by_object.get(id(values))
        if index is not None:
            return index
        plain = np.asarray(values)
        raw = plain.tobytes(order="C")
        key = (plain.dtype.name, plain.shape, raw)
        index = self._array_index.get(key)
        if index is None:
            index = self._array_index[key] = len(self.arrays)
            self.arrays.append([plain.dtype.name, list(plain.shape),
                                base64.b64encode(zlib.compress(raw, 1)).decode("ascii")])
        self._by_object[id(values)] = index
        return index

    def value(self, value: Any) -> Any:
        """An argument as plain data: JSON scalars as themselves, everything else a list tagged by kind."""
        kind = type(value)
        if value is None or kind is bool or kind is int or kind is float or kind is str:
            return value
        tile, mask, expr, dynamic, reduction, buffer = self._classes
        if kind is tile:
            return self.tile(value)
        if isinstance(value, np.generic):
            return ["np", value.dtype.name, value.item()]
        if kind is mask:
            return ["mask", self.array(value.values)]
        if kind is tuple or kind is list:
            return ["tuple" if kind is tuple else "list", *[self.value(v) for v in value]]
        if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, (np.generic, int, float))):
            return ["dtype", np.dtype(value).name]
        if isinstance(value, expr) and not isinstance(value, dynamic):
            return self.expr(value)
        if kind is reduction:
            return ["reduce", self.tile(value.tile), self.value(value.op), self.value(value.dtype),
                    self.value(value.mask)]
        if isinstance(value, np.ndarray):
            return ["array", self.array(value)]
        if isinstance(value, buffer):
            return value.kind
        if hasattr(value, "_engine"):
            return value._engine
        if isinstance(value, int):  # an IntEnum and friends
            return int(value)
        if isinstance(value, enum.Enum):
            return value.name
        if callable(value):
            return self._op_name(value)
        raise TapeError(f"an instruction argument of type {kind.__name__} cannot be recorded")

    def tile(self, tile: Any) -> list[Any]:
        storage = tile.storage
        self.last_use[storage.id] = self.position
        sub = tile.sub
        if sub is self._full(storage.shape):
            return ["tile", storage.id]
        items: list[Any] = ["tile", storage.id]
        dynamic = self._classes[3]
        for item in sub.items:
            kind = type(item)
            if kind is int:
                items.append(item)
            elif kind is slice:
                items.append(["s", item.start, len(range(item.start, item.stop, item.step)), item.step])
            elif kind is dynamic:
                items.append(["d", self.tile(item.source), item.size, item.step, item.start])
            else:
                items.append(self.expr(item))
        return items

    def expr(self, expr: Any) -> list[Any]:
        if not expr.affine:
            return ["v", self.array(expr.values)]
        key = (expr.shape, expr.offset, expr.terms)
        index = self._expr_index.get(key)
        if index is None:  # the same few expressions index every iteration's tiles: each is written once
            index = self._expr_index[key] = len(self.exprs)
            self.exprs.append([list(expr.shape), expr.offset, [n for term in expr.terms for n in term]])
        return ["x", index]


def assemble(chunks: list[Any]) -> dict[str, Any]:
    """The wire form of a whole tape (`TapeReader`) from the chunks a `TapeWriter` wrote, in order: tables
    and entries joined, a drop entry after each entry the last chunk says a tensor was last used at."""
    if not chunks:
        raise TapeError("the tape has no chunks")
    tape: dict[str, Any] = {"format": None, "version": None, **{name: [] for name in (*TABLES, "entries")}}
    drops = None
    for index, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or drops is not None:
            raise TapeError(f"tape chunk {index} is not an object, or follows the last chunk")
        if not index:
            tape["format"], tape["version"] = chunk.get("format"), chunk.get("version")
        for name in (*TABLES, "entries"):
            tape[name] += _listed(chunk, name)
        if "drops" in chunk:
            drops = _listed(chunk, "drops")
    if drops is None:
        raise TapeError("the tape ends before its last chunk")
    tape["entries"] = _with_drops(tape["entries"], drops)
    return tape


def _with_drops(entries: list[Any], drops: list[Any]) -> list[Any]:
    """`entries` with ["drop", ids] after each position `drops` ([position, ids], positions increasing) names."""
    joined: list[Any] = []
    start = 0
    for item in drops:
        if not (isinstance(item, list) and len(item) == 2 and type(item[0]) is int and start <= item[0] < len(entries)):
            raise TapeError(f"drop {_shown(item)} is not [position, tensors] after the previous one")
        joined += entries[start:item[0] + 1]
        joined.append(["drop", item[1]])
        start = item[0] + 1
    return joined + entries[start:]


class TapeReader:
    """A tape's wire form, checked as it is read. The top level and its tables are checked here; each
    entry is checked when the replay (replay.py) reaches it: `value` rebuilds an argument, `resolve`
    (given by the replay) turns a tensor reference into a tile of the replay's own tensors.

    Wire form (version 2), a JSON object:
      format, version; arrays: [dtype, shape, base64 of zlib of the little-endian bytes] (masks,
      materialised index expressions, host constants, direct-allocation slot maps); exprs: [shape,
      offset, [axis, coef, ...]] (the affine index expressions, each once); loops: [kind,
      trip_count, line, parent loop or -1]; nests: flat [loop, iteration, ...] pairs, outermost first;
      entries, in program order:
        ["input", id, name, dtype, shape]                     the next array argument
        ["tensor", id, name, buffer, dtype, shape, partition_axis, placement, line, nest]
                                                              placement: null | [slot array, locations]
        ["view", id, viewed id, shape, line, nest, dtype]      a reshape of a whole tensor, its bytes as dtype
        ["fill", id, value | ["array", k], line]               host data into a whole HBM tensor
        ["call", op, {parameter: value}, line, nest, created, emitted, raised]
        ["drop", [ids]]                                        tensors no later entry uses
        ["program"], ["launch", grid]                          SPMD: a program starts, a launch ends
        ["return", [tiles]]                                    the kernel's outputs
      values: null, bool, int, float, str, or a tagged list: ["tile", id, item...] (no items: the whole
      tensor; an item is an int, ["s", start, count, step], an index expression or ["d", tile, size,
      step, start] for indices read from a tile), ["x", k] (affine index expression k of exprs),
      ["v", k] (materialised one), ["mask", k], ["np", dtype, value], ["dtype", name],
      ["tuple", ...], ["list", ...], ["reduce", tile, op, dtype, mask] (nl.loop_reduce), ["array", k].
    """

    def __init__(self, data: Any):
        from .indexing import IndexExpr, Mask
        from .ops import LoopReduction

        self._classes = (IndexExpr, Mask, LoopReduction)
        if not isinstance(data, dict) or data.get("format") != TAPE_FORMAT:
            raise TapeError("not a trace tape")
        if data.get("version") != TAPE_VERSION:
            raise TapeError(f"trace tape version {data.get('version')!r}; this side reads version {TAPE_VERSION}")
        self._arrays: list[Any] = []
        self._exprs: list[Any] = []
        self._decoded_exprs: dict[int, Any] = {}
        self.entries: list[Any] = []
        self.loops: list[Loop] = []
        self.nests: list[LoopNest] = []
        self.extend(data)
        self._decoded: dict[int, np.ndarray] = {}
        self._masks: dict[int, Any] = {}
        self._array_bytes = 0
        self.resolve: Callable[[list[Any]], Any] = _no_tensors
        # waits for the next chunk of a tape still being recorded and `extend`s with it; False once the tape is
        # whole (a reader following a recording sets it: profiling/streams.py)
        self.more: Callable[[], bool] = _whole
        # tile references already decoded, by the identity of their entry, for a tape replayed more than
        # once (the seeds of a check meet the same entries, on tensors of the same shapes: replay.py,
        # `_Replay.tile`); None: each replay decodes its own (one replay gains nothing from keeping them)
        self.subscripts: dict[int, tuple[list[Any], tuple[int, ...], Any]] | None = None

    def detach(self) -> None:
        """Forget the replay that resolved tensor references (it has ended)."""
        self.resolve = _no_tensors

    def extend(self, chunk: Any) -> None:
        """Add a chunk of the tape (`TapeWriter.chunk`): its table rows and entries, the tables checked.
        A tape replayed while it is being recorded grows this way (`more`)."""
        if not isinstance(chunk, dict):
            raise TapeError("a tape chunk is not an object")
        self._arrays += _listed(chunk, "arrays")
        self._exprs += _listed(chunk, "exprs")
        self.entries += _listed(chunk, "entries")
        if len(self.entries) > MAX_ENTRIES:
            raise TapeError(f"{len(self.entries)} tape entries, more than {MAX_ENTRIES}")
        self._read_loops(_listed(chunk, "loops"))
        self.nests += [self._read_nest(nest) for nest in _listed(chunk, "nests")]

    def _read_loops(self, plain: list[Any]) -> None:
        loops = self.loops
        if len(loops) + len(plain) > MAX_LOOPS:
            raise TapeError(f"{len(loops) + len(plain)} loops, more than {MAX_LOOPS}")
        for item in plain:
            index = len(loops)
            if not (isinstance(item, list) and len(item) == 4 and item[0] in LOOP_KINDS):
                raise TapeError(f"loop {index} is not [kind, trip_count, line, parent]")
            kind, trips, line, parent = item
            if not (_count(trips) and _count(line) and type(parent) is int and -1 <= parent < index):
                raise TapeError(f"loop {index} has a bad trip count, line or parent")
            loops.append(Loop(index, kind, trips, line, loops[parent] if parent >= 0 else None))

    def _read_nest(self, plain: Any) -> LoopNest:
        if not isinstance(plain, list) or len(plain) % 2:
            raise TapeError("a loop nest is not a list of (loop, iteration) pairs")
        nest = []
        for position in range(0, len(plain), 2):
            loop, iteration = plain[position], plain[position + 1]
            if not (type(loop) is int and 0 <= loop < len(self.loops) and type(iteration) is int):
                raise TapeError("a loop nest names a loop that does not exist")
            nest.append((self.loops[loop], iteration))
        return tuple(nest)

    def nest(self, index: Any) -> LoopNest:
        if type(index) is not int or not 0 <= index < len(self.nests):
            raise TapeError(f"loop nest {index!r} does not exist")
        return self.nests[index]

    def array(self, index: Any, dtype: str | None = None) -> np.ndarray:
        """Array `index` of the table (read-only), checked against its declared dtype and shape."""
        if type(index) is not int or not 0 <= index < len(self._arrays):
            raise TapeError(f"array {index!r} does not exist")
        values = self._decoded.get(index)
        if values is None:
            values = self._decoded[index] = self._decode_array(self._arrays[index])
        if dtype is not None and values.dtype.name != dtype:
            raise TapeError(f"array {index} holds {values.dtype.name}, not {dtype}")
        return values

    def _decode_array(self, plain: Any) -> np.ndarray:
        if not (isinstance(plain, list) and len(plain) == 3 and isinstance(plain[2], str)):
            raise TapeError("an array is not [dtype, shape, data]")
        dtype, shape = self.dtype(plain[0]), self.shape(plain[1], allow_empty=True)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if self._array_bytes + size > MAX_ARRAY_BYTES:
            raise TapeError(f"the tape's arrays hold more than {MAX_ARRAY_BYTES} bytes")
        self._array_bytes += size
        try:
            inflate = zlib.decompressobj()
            raw = inflate.decompress(base64.b64decode(plain[2], validate=True), size + 1)
        except (ValueError, zlib.error) as exc:
            raise TapeError(f"an array's data does not decode: {exc}") from None
        if len(raw) != size or inflate.unconsumed_tail:
            raise TapeError(f"an array's data is not {size} bytes of {dtype.name}{list(shape)}")
        values = np.frombuffer(raw, dtype=dtype).reshape(shape)
        values.flags.writeable = False
        return values

    @staticmethod
    def dtype(name: Any) -> np.dtype:
        from .dtypes import named

        dtype = named(name) if isinstance(name, str) else None
        if dtype is None:
            raise TapeError(f"dtype {name!r} is not one a kernel may use")
        return dtype

    @staticmethod
    def shape(plain: Any, allow_empty: bool = False) -> tuple[int, ...]:
        if not isinstance(plain, list) or len(plain) > MAX_DIMS or not all(
                type(n) is int and (n > 0 or (allow_empty and n == 0)) for n in plain):
            raise TapeError(f"shape {plain!r} is not a list of sizes")
        return tuple(plain)

    def value(self, plain: Any, depth: int = 0) -> Any:
        """An argument back as the simulator's objects (the inverse of the writer's `value`)."""
        kind = type(plain)
        if plain is None or kind is bool or kind is int or kind is float or kind is str:
            return plain
        if kind is not list or not plain or type(plain[0]) is not str or depth > MAX_VALUE_DEPTH:
            raise TapeError(f"{_shown(plain)} is not a recorded value")
        tag = plain[0]
        if tag == "tile":
            return self.resolve(plain)
        if tag == "tuple" or tag == "list":
            items = [self.value(item, depth + 1) for item in plain[1:]]
            return tuple(items) if tag == "tuple" else items
        if tag == "mask" and len(plain) == 2:
            mask = self._masks.get(plain[1])
            if mask is None:
                mask = self._masks[plain[1]] = self._classes[1](self.array(plain[1], "bool"))
            return mask
        if tag == "x" or tag == "v":
            return self.expr(plain)
        if tag == "np" and len(plain) == 3 and type(plain[2]) in (bool, int, float):
            try:
                return self.dtype(plain[1]).type(plain[2])
            except (OverflowError, ValueError):
                raise TapeError(f"{_shown(plain)} is not a scalar of its dtype") from None
        if tag == "dtype" and len(plain) == 2:
            return self.dtype(plain[1])
        if tag == "reduce" and len(plain) == 5:
            return self._classes[2](self.resolve(plain[1]), self.value(plain[2], depth + 1),
                                    self.value(plain[3], depth + 1), self.value(plain[4], depth + 1))
        if tag == "array" and len(plain) == 2:
            return self.array(plain[1])
        raise TapeError(f"{_shown(plain)} is not a recorded value")

    def expr(self, plain: list[Any]) -> Any:
        """An index expression: ["x", k] (affine, k in exprs) or ["v", k] (materialised, k in arrays)."""
        if len(plain) != 2:
            raise TapeError(f"{_shown(plain)} is not an index expression")
        if plain[0] == "v":
            values = self.array(plain[1], "int64")
            return self._classes[0](values.shape, values=values)
        index = plain[1]
        expr = self._decoded_exprs.get(index) if type(index) is int else None
        if expr is None:
            expr = self._decoded_exprs[index] = self._decode_expr(index)
        return expr

    def _decode_expr(self, index: Any) -> Any:
        """Affine expression `index` of the table, checked (once: its uses share it, as they never change it)."""
        if type(index) is not int or not 0 <= index < len(self._exprs):
            raise TapeError(f"index expression {index!r} does not exist")
        plain = self._exprs[index]
        if not (isinstance(plain, list) and len(plain) == 3 and type(plain[1]) is int and isinstance(plain[2], list)
                and not len(plain[2]) % 2):
            raise TapeError(f"{_shown(plain)} is not an index expression")
        shape = self.shape(plain[0], allow_empty=True)
        flat = plain[2]
        terms = tuple((flat[i], flat[i + 1]) for i in range(0, len(flat), 2))
        if not all(type(a) is int and 0 <= a < len(shape) and type(c) is int for a, c in terms):
            raise TapeError(f"{_shown(plain)} has a term on an axis it does not have")
        return self._classes[0](shape, plain[1], terms)


LOOP_KINDS = (LoopKind.AFFINE, LoopKind.SEQUENTIAL, LoopKind.STATIC)


def _whole() -> bool:
    return False


def _no_tensors(plain: list[Any]) -> Any:
    raise TapeError("a tensor reference outside a replay")


def _listed(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        raise TapeError(f"the tape's {key} is not a list")
    return value


def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value < 2**31


def _shown(value: Any) -> str:
    """A value for an error message, cut short (it comes from the kernel's process)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def shown_name(value: Any) -> str:
    """A tensor name from a tape as messages may show it: at most 64 letters, digits and _.- (the name
    comes from the kernel's process and only ever labels a tensor)."""
    if not isinstance(value, str):
        raise TapeError(f"tensor name {_shown(value)} is not text")
    return _UNSHOWN.sub("_", value[:64])
