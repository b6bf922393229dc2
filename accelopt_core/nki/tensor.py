"""Tensors, tiles and the running simulation.

A `Storage` is one allocation (an HBM tensor, an SBUF or PSUM buffer). A `Tile` is what kernel
code holds: a storage plus a subscript, so `t[i_p, i_f]` and a whole tensor are the same kind of
object. The `Simulation` is the state of one kernel run: mode (numeric or trace-only), hardware
limits, the loop nest being executed and the trace being recorded.
"""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..hardware import HardwareProfileError, load_hardware
from . import dtypes
from .allocation import Placement, Slots, place
from .blocks import LiveBlocks
from .errors import HardwareRuleError, KernelUsageError, UnsupportedApiError, kernel_location, trace_line
from .indexing import DynamicIndex, Mask, Subscript, access_pattern, compose, full_subscript, normalize
from .instructions import HBM, PSUM, SBUF
from .trace import Access, Declared, Instruction, Loop, LoopKind, LoopNest, Op, TensorInfo, Trace
from .views import TensorViews


class Buffer:
    """A memory kind as kernels name it (`nl.sbuf`, `nl.psum`, `nl.shared_hbm`, ...)."""

    def __init__(self, name: str, kind: str):
        self.name = name
        self.kind = kind

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __eq__(self, other: object) -> bool:
        """`t.buffer == nl.sbuf` (library kernels check where a tile lives): a tile's buffer is its kind."""
        if isinstance(other, Buffer):
            return self.kind == other.kind
        return isinstance(other, str) and other == self.kind

    def __hash__(self) -> int:
        return hash(self.kind)


class ParDim:
    """`nl.par_dim(n)`: marks which dimension of an on-chip tensor is the partition dimension."""

    def __init__(self, size: int):
        self.size = int(size)

    def __index__(self) -> int:
        return self.size

    def __int__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"par_dim({self.size})"


@dataclass(frozen=True)
class Limits:
    """The hardware facts the compiler checks (docs/fact-sheet.md A.3, A.4), read from the generation's
    profile so the simulator and the performance model cannot disagree about a generation."""

    name: str
    neuron_core_version: int
    pmax: int
    sbuf_partition_bytes: int
    sbuf_usable_bytes: int  # per partition, what kernels may allocate (KLR total_available_sbuf_size)
    psum_bank_bytes: int
    stationary_fmax: int
    moving_fmax: int

    @staticmethod
    def for_hardware(name: str) -> Limits:
        try:
            profile = load_hardware(name)
        except HardwareProfileError as exc:
            raise KernelUsageError(str(exc), "<config>", 0) from None
        return Limits(name=profile.name, neuron_core_version=profile.neuron_core_version,
                      pmax=profile.memory.sbuf_partitions,
                      sbuf_partition_bytes=profile.memory.sbuf_bytes_per_partition,
                      sbuf_usable_bytes=profile.memory.sbuf_usable_bytes_per_partition,
                      psum_bank_bytes=profile.memory.psum_bank_bytes,
                      stationary_fmax=profile.tensor.stationary_free_max, moving_fmax=profile.tensor.moving_free_max)


class Simulation:
    """One kernel run: mode, limits, loop nest and the trace being recorded."""

    def __init__(self, numeric: bool = True, hardware: str = "trn1", api: str = "legacy",
                 record: bool = False):
        self.numeric = numeric
        self.limits = Limits.for_hardware(hardware)
        self.api = api
        self.trace = Trace()
        self.nest: LoopNest = ()
        self.program_id: tuple[int, ...] = ()  # of the running SPMD program; () outside a grid launch
        self.grid: tuple[int, ...] = ()
        # shared_hbm tensors are one allocation for all SPMD instances: the n-th shared_hbm
        # allocation of every instance is the n-th one of the first instance.
        self.shared: list[Storage] = []
        self.shared_cursor = 0
        self.force_auto_alloc = False  # ncc.force_auto_alloc: direct-allocation buffers are ignored
        self.random = np.random.default_rng(0)  # what dropout draws from; nl.random_seed reseeds it
        # the per-partition reduce registers of the Scalar and Vector engines (nisa.reduce_cmd), numeric runs
        self.reduce_registers: dict[str, np.ndarray] = {}
        self.operand_masks = False  # whether the kernel has taken a tile[...][mask] (ops.instruction folds it)
        self._placements: dict[tuple[Any, ...], Slots] = {}  # direct allocations by site (see placed)
        self.fitting: set[tuple[Any, ...]] = set()  # (buffer, dims, partition axis, dtype) the rules allow
        self.constants: dict[tuple[Any, ...], Any] = {}  # tiles the compiler makes once per kernel (language.py)
        self._next_id = 0
        # The replayable record (trace.py): what the kernel's own code asked for, in order. `depth` counts
        # the recorded calls under way, so only the kernel's own calls are recorded, not their inner ones.
        self.tape: list[Any] | None = None
        if record:
            self.tape = self.trace.tape = []
        self.on_call: Callable[[Trace], None] | None = None  # told after each recorded call (measure.py streams)
        self.depth = 0
        # A replay's view of the tensors (replay.py): every storage by id, and the bytes they may hold.
        self.registry: dict[int, Storage] | None = None
        self.memory: MemoryBudget | None = None
        self.recycled: BufferPool | None = None  # large arrays of dropped tensors, for the next ones
        self.blocks: LiveBlocks | None = None  # large block tensors held block by block (blocks.py)

    def placed(self, placement: Placement, dims: tuple[int, ...], partition_axis: int, dtype: np.dtype) -> Slots:
        """The physical tiles of a directly allocated tensor. The legacy compiler traces an affine or
        sequential loop's body once, so an allocation inside one is one allocation, placed where its
        first iteration puts it (a kernel advancing an address counter in the body allocates once);
        static_range loops (and every loop of the new API) are unrolled: each iteration allocates."""
        filename, line = kernel_location()
        site = (filename, line, dims, tuple((loop.id, index if loop.kind == LoopKind.STATIC else None)
                                            for loop, index in self.nest))
        slots = self._placements.get(site)
        if slots is None:
            itemsize = dtypes.facts_of(dtype)[1]
            slots = self._placements[site] = place(placement, dims, partition_axis, itemsize,
                                                   self.limits.sbuf_partition_bytes)
        return slots

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    @property
    def ids_used(self) -> int:
        """How many tensor ids were handed out: the next tensor's id is one more."""
        return self._next_id

    def declared(self, storage: Storage, role: str, init: Any = None) -> None:
        """Record a tensor the kernel's own code created (not an instruction's result)."""
        if self.tape is not None and not self.depth:
            self.tape.append(Declared(storage, role, init))

    def emit(self, engine: str, op: Op, reads: tuple[Access, ...], writes: tuple[Access, ...],
             partitions: int, free_elements: int, flops: int = 0, attrs: dict[str, Any] | None = None,
             dtype: str = "float32") -> Instruction:
        line = trace_line()
        inst = Instruction(len(self.trace.instructions), engine, op, reads, writes, partitions,
                           free_elements, flops, line, self.nest, attrs, dtype)
        self.trace.instructions.append(inst)
        return inst

    def loop(self, kind: str, args: tuple[int, ...]) -> Iterator[int]:
        """Iterate like `range(*args)` while recording the loop nest for every instruction inside."""
        try:
            steps = range(*(operator.index(a) for a in args))
        except TypeError:
            # like Python's range: a float trip count (n / 128) would silently drop a ragged tile
            raise KernelUsageError(f"loop bounds must be integers, got {args}") from None
        line = trace_line()
        parent = self.nest[-1][0] if self.nest else None
        loop = Loop(len(self.trace.loops), kind, len(steps), line, parent)
        self.trace.loops.append(loop)
        outer = self.nest
        try:
            for i in steps:
                self.nest = (*outer, (loop, i))
                yield i
        finally:
            self.nest = outer


class MemoryBudget:
    """The bytes a replay may hold in tensors at once: a trace declares its tensors, so a forged one could
    ask the trusted side for any amount of memory."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0

    def reserve(self, nbytes: int) -> None:
        if self.used + nbytes > self.limit:
            raise MemoryError(f"the trace's tensors need more than {self.limit / 2**20:.0f} MiB at once")
        self.used += nbytes

    def release(self, nbytes: int) -> None:
        self.used -= nbytes


class BufferPool:
    """Large arrays of the tensors a replay dropped, kept for the next tensor of the same size: the
    replays of a check's seeds declare the same tensors, and fresh memory costs page faults (on this
    project's virtual machines, over 3 s per GB the first time) where reused memory costs a fill. The
    arrays kept and those live never add up to more than the most the replays held live at once, so it
    raises no peak."""

    SMALLEST = 1 << 20  # smaller arrays come from the C heap, which reuses them anyway

    def __init__(self) -> None:
        self.free: dict[int, list[np.ndarray]] = {}  # bytes -> flat byte arrays of that size
        self.kept = 0
        self.ceiling = 0

    def take(self, dims: tuple[int, ...], dtype: np.dtype, live: int) -> np.ndarray | None:
        """A kept array of a new tensor's size, old contents and all, `live` bytes held with it; None (after
        making room for a fresh one) when none is kept."""
        self.ceiling = max(self.ceiling, live)
        nbytes = math.prod(dims) * dtype.itemsize
        arrays = self.free.get(nbytes) if nbytes >= self.SMALLEST else None
        if not arrays:
            self.make_room(live)
            return None
        data = arrays.pop().view(dtype).reshape(dims)
        if not arrays:
            del self.free[nbytes]
        self.kept -= nbytes
        return data

    def uninitialized(self, dims: tuple[int, ...], dtype: np.dtype, live: int) -> np.ndarray:
        """A new on-chip tensor's array, filled as fresh memory is (`_uninitialized`)."""
        data = self.take(dims, dtype, live)
        if data is None:
            return _uninitialized(dims, dtype)
        data.fill(_garbage(dtype))
        return data

    def make_room(self, live: int) -> None:
        """Let kept arrays go until they and the `live` bytes fit under the most ever held live."""
        while self.kept and self.kept + live > self.ceiling:
            nbytes, arrays = next(iter(self.free.items()))
            arrays.pop()
            self.kept -= nbytes
            if not arrays:
                del self.free[nbytes]

    def give(self, data: np.ndarray) -> None:
        """A dropped tensor's array, which nothing else views."""
        if data.nbytes >= self.SMALLEST and data.base is None and data.flags.c_contiguous:
            self.free.setdefault(data.nbytes, []).append(data.reshape(-1).view(np.uint8))
            self.kept += data.nbytes


class _Running(threading.local):
    """The simulations running on this thread, innermost last: the trusted side replays traces in the
    search's worker threads, each with its own simulation."""

    def __init__(self) -> None:
        self.stack: list[Simulation] = []


_running = _Running()


def running() -> Simulation | None:
    """The innermost simulation of this thread, None outside a kernel run."""
    stack = _running.stack
    return stack[-1] if stack else None


def current() -> Simulation:
    stack = _running.stack
    if not stack:
        raise KernelUsageError("NKI API called outside a kernel run (use nki.simulate_kernel or the "
                               "accelopt checker to run a kernel)")
    return stack[-1]


def push(sim: Simulation) -> None:
    _running.stack.append(sim)


def pop() -> None:
    _running.stack.pop()


class Storage:
    """One allocation. `data` is None in trace-only mode."""

    __slots__ = (
        "borrowed",
        "buffer",
        "consumed",
        "data",
        "dtype",
        "dtype_name",
        "from_the_end",
        "id",
        "initialized",
        "itemsize",
        "mm_open",
        "moved_to",
        "name",
        "partition_axis",
        "producer",
        "shape",
        "slots",
        "unfilled",
        "written",
    )

    def __init__(self, sim: Simulation, name: str, buffer: str, shape: tuple[int, ...], dtype: np.dtype,
                 partition_axis: int, data: np.ndarray | None, slots: Slots | None = None):
        self.id = sim.new_id()
        self.name = name or f"t{self.id}"
        self.buffer = buffer
        self.shape = shape
        self.dtype = dtype
        self.dtype_name, self.itemsize = dtypes.facts_of(dtype)
        self.from_the_end = sim.api == "modern"  # NkiTensor.__getitem__ takes negative slice bounds
        self.partition_axis = partition_axis
        self.data = data
        self.producer: Instruction | None = None
        self.consumed = False
        # PSUM regions with an open matmul accumulation group (new API, accumulate=None)
        self.mm_open: list[tuple[tuple[int, int], ...]] | None = None
        self.written: np.ndarray | None = None  # elements a masked producer wrote (None: all of them)
        # `dst[...] = t` made t's producer write dst: t's values now live there, and so do its reads
        self.moved_to: Tile | None = None
        self.slots = slots  # direct allocation: the physical tile of each logical block
        # an instruction's fresh result whose array is not filled yet: most results are written whole by the
        # instruction that creates them, so the fill that makes never-written memory visible is made only
        # when something else comes first (`fill_unwritten`)
        self.unfilled = False
        # an input's array is the caller's, read-only, until something writes the tensor (`own`): a replay reads
        # its inputs where they are instead of copying gigabytes the kernel only loads from
        self.borrowed = False
        # PSUM in numeric mode: which elements hold a written value. A matmul accumulating onto
        # never-written PSUM starts its accumulation group there (its first write overwrites).
        self.initialized = np.zeros(shape, dtype=bool) if buffer == PSUM and data is not None else None
        per_partition = 0
        if buffer != HBM:
            free = math.prod(shape[partition_axis + 1:])
            blocks = slots.count if slots is not None else math.prod(shape[:partition_axis])
            per_partition = free * blocks * self.itemsize
        line = trace_line()
        if slots is None:
            info = TensorInfo(self.id, self.name, buffer, shape, self.dtype_name,
                              partition_axis if buffer != HBM else -1, per_partition, line, sim.nest)
        else:  # the trace sees the tensor as allocated: one block dimension of physical tiles
            tile = shape[partition_axis:]
            info = TensorInfo(self.id, self.name, buffer, slots.physical_shape(tile), self.dtype_name,
                              1 if slots.block_ndim else 0, per_partition, line, sim.nest,
                              placement=tuple(slots.locations))
        sim.trace.tensors[self.id] = info
        if sim.registry is not None:
            sim.registry[self.id] = self

    def own(self) -> None:
        """Copy a borrowed input's array before anything writes it or views it as another tensor (the caller's
        arrays stay as they were)."""
        if self.borrowed:
            self.borrowed = False
            self.data = np.array(self.data, copy=True)

    def fill_unwritten(self) -> None:
        """Fill an unfilled result's array as fresh memory is (`_uninitialized`): something reads it, writes
        part of it, or views it before its instruction wrote it whole."""
        if self.unfilled:
            self.unfilled = False
            self.data.fill(_garbage(self.dtype))  # type: ignore[union-attr]


# the newer API's tensor views by access pattern (NKI 2.27 and later), not simulated
_ACCESS_PATTERN_VIEWS = frozenset({"strides"})


class Tile(TensorViews):
    """A tensor or a region of one, as kernel code sees it."""

    __slots__ = ("_inplace", "storage", "sub")

    def __init__(self, storage: Storage, sub: Subscript):
        self.storage = storage
        self.sub = sub
        self._inplace = False

    def __getattr__(self, name: str) -> Any:
        if name in _ACCESS_PATTERN_VIEWS:
            raise UnsupportedApiError(f"tensor.{name}(...): the newer NKI's access-pattern views are not simulated; "
                                      "index the tensor with slices or nl.arange instead")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- what kernels read off a tensor ------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.sub.shape

    @property
    def dtype(self) -> np.dtype:
        return self.storage.dtype

    @property
    def buffer(self) -> str:
        return self.storage.buffer

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def ndim(self) -> int:
        return len(self.sub.shape)

    @property
    def itemsize(self) -> int:
        return self.storage.itemsize

    def assert_shape(self, shape: Any) -> Tile:
        """The tile itself when it has `shape` (legacy nki.tensor), else a usage error."""
        if tuple(int(n) for n in shape) != self.shape:
            raise KernelUsageError(f"{self.name} has shape {self.shape}, not {tuple(shape)}")
        return self

    def astype(self, dtype: Any) -> Tile:
        """A copy of the tile in `dtype` (legacy nki.tensor): a copy on the Vector engine, or a DMA for HBM."""
        if self.buffer == HBM:
            return ops.dma_copy(self, dtype=dtype)
        return ops.tensor_copy(self, dtype=dtype)

    @property
    def size(self) -> int:
        return self.sub.count

    @property
    def is_whole(self) -> bool:
        return self.sub.shape == self.storage.shape and not self.sub.advanced and all(
            lo == 0 and hi == n for (lo, hi), n in zip(self.sub.region, self.storage.shape, strict=True))

    def __repr__(self) -> str:
        return f"Tile({self.storage.name}, {self.storage.buffer}, shape={self.shape}, {self.dtype.name})"

    def __len__(self) -> int:
        return self.sub.shape[0]

    def __iter__(self) -> Iterator[Any]:
        raise KernelUsageError("tiles cannot be iterated in Python; index them with nl.arange or slices")

    def __bool__(self) -> bool:
        if self.storage.buffer == HBM:
            return True  # an HBM tensor is a Python object at trace time: `x if bias else None` tests presence
        raise KernelUsageError("a tile has no truth value at trace time (data-dependent control flow "
                               "is not possible in NKI)")

    # --- indexing ----------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Tile:
        if isinstance(key, Mask):
            current().operand_masks = True
            return MaskedTile(self, key)
        storage = self.storage
        if (storage.buffer != HBM and self.ndim == 1 and isinstance(key, tuple) and len(key) == 2
                and _one_column(key[1])):
            key = key[0]  # a [P] on-chip tile is [P, 1] in memory: t[:, 0] and t[:, :1] are t[:]
        if self.sub is full_subscript(storage.shape):
            return Tile(storage, normalize(_one_partition(storage, key), storage.shape, storage.name,
                                           storage.from_the_end))
        return Tile(storage, compose(self.sub, key, storage.name, storage.shape, storage.from_the_end))

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, Mask):
            raise UnsupportedApiError("assigning to tile[...][mask] is not simulated; pass mask= to the instruction "
                                      "that computes the value")
        target = self[key]
        if isinstance(value, Tile) and value._inplace:
            value._inplace = False
            if value.storage is self.storage and value.sub.region == target.sub.region:
                return  # `t[i] += x` already wrote in place
        ops.assign(target, value)

    def reshape(self, *shape: Any, **named: Any) -> Tile:
        """HBM tensors can be viewed with another shape of the same size (no data moves); the shape comes
        as arguments, a tuple, or `shape=`."""
        if "shape" in named:
            shape = (named.pop("shape"),)
        if named or not shape:
            raise KernelUsageError(f"reshape takes a shape, got {shape} and {named}")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        new_shape = tuple(int(s) for s in shape)
        if math.prod(new_shape) != self.size:
            raise KernelUsageError(f"cannot reshape {self.storage.name} of shape {self.shape} to {new_shape}")
        if not self.is_whole:
            raise KernelUsageError("only a whole tensor can be reshaped")
        self.storage.fill_unwritten()
        self.storage.own()
        data = self.storage.data.reshape(new_shape) if self.storage.data is not None else None
        return self._alias("reshaped", new_shape, self.storage.dtype, 0, data)

    def _alias(self, suffix: str, shape: tuple[int, ...], dtype: np.dtype, partition_axis: int,
               data: np.ndarray | None) -> Tile:
        """A view of this whole tensor's memory as another tensor (no data moves), recorded as one."""
        sim = current()
        alias = Storage(sim, f"{self.storage.name}_{suffix}", self.storage.buffer, shape, dtype, partition_axis,
                        data)
        sim.trace.tensors[alias.id].alias_of = self.storage.id
        sim.declared(alias, "view", self.storage.id)
        return Tile(alias, full_subscript(shape))

    def ap(self, *pairs: Any, pattern: Any = None, offset: int | None = None, scalar_offset: Any = None,
           vector_offset: Any = None, indirect_dim: int = 0, dtype: Any = None) -> Tile:
        """Newer NKI's hardware access pattern: `pattern` lists [step, num] per dimension of the result
        (for SBUF and PSUM the first is the partitions), `offset` counts elements from the tensor's start
        (None: where this view starts). Also spelled `t.ap([[s, n], ...], offset)` and `t.ap([s, n], ...)`."""
        if pattern is None and pairs:
            if isinstance(pairs[0], (list, tuple)) and pairs[0] and isinstance(pairs[0][0], (list, tuple)):
                pattern, rest = pairs[0], pairs[1:]
                if rest and offset is None:
                    offset = rest[0]
            else:
                pattern = pairs
        if pattern is None:
            raise KernelUsageError("tensor.ap(...) needs a pattern: a list of [step, num] pairs")
        if scalar_offset is not None and vector_offset is not None:
            raise KernelUsageError("tensor.ap takes at most one of scalar_offset and vector_offset")
        if dtype is not None and dtypes.as_dtype(dtype) != self.storage.dtype:
            if not self.is_whole:
                raise UnsupportedApiError("tensor.ap reading part of a tensor as another dtype is not simulated")
            # steps and offset count elements of `dtype` (the whole tensor's bytes read as it)
            return self.view(dtype).ap(pattern=pattern, offset=offset)
        storage = self.storage
        if offset is None:
            lows = tuple(lo for lo, _ in self.sub.region)
            offset = int(np.ravel_multi_index(lows, storage.shape)) if self.size else 0
        runtime = scalar_offset if scalar_offset is not None else vector_offset
        if hasattr(runtime, "source_tile"):
            runtime = runtime.source_tile()  # an NkiScalar: the [1, 1] tile that holds it
        if runtime is not None and vector_offset is not None:
            pattern = [[0, pattern[0][1]], *pattern[1:]]  # the rows come from the vector, one per partition
        items = access_pattern(pattern, int(offset), storage.shape)
        if runtime is not None:
            items = _offset_at_run_time(items, runtime, int(indirect_dim), storage, vector=vector_offset is not None)
        return Tile(storage, normalize(items, storage.shape, storage.name))

    def expand_dims(self, axis: int) -> Tile:
        """The same tile with a dimension of 1 inserted at `axis` (`m.expand_dims(1)`: a [P] row statistic
        as the [P, 1] column an element-wise op broadcasts)."""
        shape = list(self.shape)
        position = axis if axis >= 0 else len(shape) + 1 + axis
        if not 0 <= position <= len(shape):
            raise KernelUsageError(f"expand_dims: axis {axis} is out of range for shape {self.shape}")
        return self.reshape((*shape[:position], 1, *shape[position:]))

    def view(self, dtype: Any) -> Tile:
        """The whole tensor's bytes read as `dtype` (no data moves); the last dimension scales with the
        element size, as NumPy's view does."""
        new = dtypes.as_dtype(dtype)
        if not self.is_whole:
            raise KernelUsageError("only a whole tensor can be viewed as another dtype")
        old = self.storage.dtype
        last = self.shape[-1] * old.itemsize
        if last % new.itemsize:
            raise KernelUsageError(f"cannot view {self.storage.name} of shape {self.shape} ({old.name}) as {new.name}")
        new_shape = (*self.shape[:-1], last // new.itemsize)
        self.storage.fill_unwritten()
        self.storage.own()
        data = self.storage.data.view(new) if self.storage.data is not None else None
        return self._alias(f"as_{new.name}", new_shape, new, self.storage.partition_axis, data)

    def broadcast_to(self, shape: Any) -> Tile:
        """`tile.broadcast_to(shape)`, as in the RMSNorm tutorial: the same as `nl.broadcast_to`, for
        tiles on chip (an HBM tensor is loaded first)."""
        if self.storage.buffer == HBM:
            raise KernelUsageError(f"broadcast_to needs a tile in SBUF or PSUM; {self.storage.name} is in HBM "
                                   "(nl.load it first)")
        return language.broadcast_to(self, shape)

    # --- data, for numeric mode --------------------------------------------------------------
    def read(self) -> np.ndarray:
        storage = self.storage
        if storage.unfilled:
            storage.fill_unwritten()
        data = storage.data
        assert data is not None
        view = self.sub.view(data)
        if view is not None:
            return view
        with self._gathering():
            return data[self.sub.numpy_key()]

    @contextmanager
    def _gathering(self) -> Iterator[None]:
        """A gather's temporaries held against the replay's memory budget while it runs: an index array
        per dimension (eight bytes an element), the masks a masked write builds and the elements copied."""
        sim = running()
        memory = sim.memory if sim is not None else None
        nbytes = self.sub.count * (8 * len(self.sub.items) + 2 + self.storage.dtype.itemsize)
        if memory is None:
            yield
            return
        memory.reserve(nbytes)
        try:
            yield
        finally:
            memory.release(nbytes)

    def write(self, values: np.ndarray | float, mask: np.ndarray | None = None) -> None:
        """Write `values` (where `mask`) into the elements of this tile, and into every block placed on the same
        physical tile (direct allocation, allocation.py): they are one memory. What a PSUM block has had written
        stays the block's own: whether a matmul starts an accumulation group is the compiler's decision, made on
        the logical blocks (allocation.py)."""
        self._write(values, mask)
        slots = self.storage.slots
        if slots is not None:
            for block, others in slots.sharing(self.sub.region):
                for other in others:
                    self.storage.data[other] = self.storage.data[block]

    def _write(self, values: np.ndarray | float, mask: np.ndarray | None = None) -> None:
        storage = self.storage
        if storage.borrowed:
            storage.own()
        data = storage.data
        assert data is not None
        values = np.asarray(values)
        if values.shape != self.shape and values.size == self.size:
            values = values.reshape(self.shape)
        if storage.unfilled:
            if mask is None and self.is_whole:
                storage.unfilled = False  # every element is written now
            else:
                storage.fill_unwritten()
        view = self.sub.view(data)
        if view is None:
            with self._gathering():
                self._scatter(data, values, mask)
            return
        # each element once: a mask selects where to write
        written = None if self.storage.initialized is None else self.sub.view(self.storage.initialized)
        if mask is None:
            view[...] = values
            if written is not None:
                written[...] = True
            return
        where = np.broadcast_to(mask, self.shape)
        np.copyto(view, np.broadcast_to(values, self.shape), casting="unsafe", where=where)
        if written is not None:
            written |= where

    def _scatter(self, data: np.ndarray, values: np.ndarray, mask: np.ndarray | None) -> None:
        """Write through the gather's indices (a subscript that is no strided view of the tensor)."""
        key = self.sub.numpy_key()
        if self.sub.overhang is not None or (mask is not None and self.sub.advanced):
            # write only the masked-in elements (all inside the tensor): gathered indices may repeat,
            # and a masked-off repeat must not write the old value back over an active one
            keep = np.ones(self.shape, dtype=bool) if mask is None else np.broadcast_to(mask, self.shape)
            if self.sub.overhang is not None:
                keep = keep & self.sub.in_bounds()
            index = tuple(np.broadcast_to(k, self.shape)[keep] for k in key)
            data[index] = np.broadcast_to(values, self.shape)[keep].astype(data.dtype, copy=False)
            if self.storage.initialized is not None:
                self.storage.initialized[index] = True
            return
        if mask is not None:
            values = np.where(np.broadcast_to(mask, self.shape), values, data[key])
        data[key] = values.astype(data.dtype, copy=False)
        if self.storage.initialized is not None:
            self.storage.initialized[key] |= True if mask is None else np.broadcast_to(mask, self.shape)

    def read_accumulator(self) -> np.ndarray:
        """PSUM values a matmul accumulates onto: 0 where nothing was written yet, as the matmul that
        finds no accumulation under way starts a new group there (docs/fact-sheet.md A.3). Read-only: where
        every element was written, the tile's own float32 values, not a copy (a kernel's accumulation loop
        reads its PSUM tile once per matmul)."""
        values = self.read().astype(np.float32, copy=False)
        initialized = self.storage.initialized
        if initialized is None:
            return values
        written = self.sub.view(initialized)
        if written is not None:
            return values if written.all() else np.where(written, values, 0.0)
        with self._gathering():
            return np.where(initialized[self.sub.numpy_key()], values, 0.0)

    def adopt(self, values: np.ndarray) -> None:
        """Write an instruction's freshly computed array (which nothing else holds) into its fresh result: where
        that result is unfilled and taken whole, unmasked, the array becomes the tensor's own (no copy of it);
        else it is written as `write` does."""
        storage = self.storage
        if (storage.unfilled and values.dtype == storage.dtype and values.shape == storage.shape
                and values.flags.c_contiguous and values.flags.writeable and self.is_whole):
            storage.unfilled = False
            storage.data = values
            if storage.initialized is not None:
                storage.initialized[...] = True
        else:
            self.write(values)

    def borrow(self, values: np.ndarray) -> None:
        """A DMA's fresh result holding a borrowed input's elements (`Storage.borrowed`): where it is unfilled and
        taken whole, it reads them where they are (a view: the caller's arrays never change during a replay)
        until something writes it; else they are written as `write` does."""
        storage = self.storage
        if storage.unfilled and values.dtype == storage.dtype and values.shape == storage.shape and self.is_whole:
            view = values.view()
            view.flags.writeable = False
            storage.unfilled = False
            storage.data = view
            storage.borrowed = True
        else:
            self.write(values)

    def accumulate(self, values: np.ndarray, mask: np.ndarray | None = None) -> None:
        """PSUM accumulation: this tile's accumulator (`read_accumulator`) plus `values`, written back (where `mask`:
        a masked matmul adds only what it computed). Where the tile is a float32 view written whole (a matmul
        loop's PSUM tile after its first step) the float32 sum is made in place, with the rounding the written-back
        sum has; else through `write`."""
        storage = self.storage
        if (mask is None and storage.dtype_name == "float32" and values.dtype == np.float32 and storage.slots is None
                and not storage.unfilled and storage.data is not None):
            view = self.sub.view(storage.data)
            initialized = storage.initialized
            if view is not None and (initialized is None or self.sub.view(initialized).all()):
                np.add(view, values, out=view)
                return
        self.write(self.read_accumulator() + values, mask)

    def access(self, nbytes: int | None = None) -> Access:
        storage = self.storage
        sub = self.sub
        size = storage.itemsize
        if storage.moved_to is not None:  # its producer wrote the destination: read it there, after that
            dst = storage.moved_to
            return dst.access((sub.count if nbytes is None else nbytes // size) * dst.storage.itemsize)
        moved = sub.count * size if nbytes is None else nbytes
        if storage.buffer == HBM:
            run = min(sub.contiguous_elements(storage.shape) * size, moved)
        else:
            run = moved // max(1, sub.shape[0] if sub.shape else 1)
        region = sub.region if storage.slots is None else storage.slots.region(sub.region)
        elements, gathered = sub.elements(storage.shape)
        return Access(storage.id, storage.buffer, storage.dtype_name, sub.shape, region, moved, run, elements, gathered)

    # --- arithmetic sugar: tiles combine like the nl functions they stand for ------------------
    def _binary(self, other: Any, op: str, reverse: bool = False) -> Tile:
        return ops.binary(op, other, self) if reverse else ops.binary(op, self, other)

    def __add__(self, other: Any) -> Tile:
        return self._binary(other, "add")

    def __radd__(self, other: Any) -> Tile:
        return self._binary(other, "add", True)

    def __sub__(self, other: Any) -> Tile:
        return self._binary(other, "subtract")

    def __rsub__(self, other: Any) -> Tile:
        return self._binary(other, "subtract", True)

    def __mul__(self, other: Any) -> Tile:
        return self._binary(other, "multiply")

    def __rmul__(self, other: Any) -> Tile:
        return self._binary(other, "multiply", True)

    def __truediv__(self, other: Any) -> Tile:
        return self._binary(other, "divide")

    def __rtruediv__(self, other: Any) -> Tile:
        return self._binary(other, "divide", True)

    def __pow__(self, other: Any) -> Tile:
        return self._binary(other, "power")

    def __neg__(self) -> Tile:
        return ops.tensor_scalar(self, "multiply", -1.0)  # nl.negative: keeps the tile's dtype

    def __lt__(self, other: Any) -> Tile:
        return self._binary(other, "less")

    def __le__(self, other: Any) -> Tile:
        return self._binary(other, "less_equal")

    def __gt__(self, other: Any) -> Tile:
        return self._binary(other, "greater")

    def __ge__(self, other: Any) -> Tile:
        return self._binary(other, "greater_equal")

    def __and__(self, other: Any) -> Tile:
        return self._binary(other, "logical_and")

    def __or__(self, other: Any) -> Tile:
        return self._binary(other, "logical_or")

    def _inplace_op(self, other: Any, op: str) -> Tile:
        ops.accumulate(self, other, op)
        self._inplace = True
        return self

    def __iadd__(self, other: Any) -> Tile:
        return self._inplace_op(other, "add")

    def __isub__(self, other: Any) -> Tile:
        return self._inplace_op(other, "subtract")

    def __imul__(self, other: Any) -> Tile:
        return self._inplace_op(other, "multiply")

    def __itruediv__(self, other: Any) -> Tile:
        return self._inplace_op(other, "divide")


def _offset_at_run_time(items: tuple[Any, ...], source: Any, dim: int, storage: Storage, vector: bool
                        ) -> tuple[Any, ...]:
    """`.ap(scalar_offset=t / vector_offset=t, indirect_dim=d)`: dimension d of the base tensor starts where
    the pattern put it plus the index t holds at run time (one for the whole access, or one per
    partition of the access), read by the instruction that uses the view."""
    if not isinstance(source, Tile) or source.buffer != SBUF:
        raise UnsupportedApiError("tensor.ap with a runtime offset held in a register (VirtualRegister) is not "
                                  "simulated; only an SBUF tile of indices")
    if not 0 <= dim < len(storage.shape) or (vector and dim != 0):
        raise KernelUsageError(f"tensor.ap: indirect_dim {dim} is not a dimension of {storage.name} "
                               f"{storage.shape}" + (" (vector_offset takes indirect_dim 0)" if vector else ""))
    static = items[dim]
    grid = items[0].shape
    if vector and (source.ndim != 2 or len(grid) != 2 or source.shape[0] != grid[0]):
        raise KernelUsageError(f"tensor.ap: a vector_offset holds one index per partition of the access, shape "
                               f"[{grid[0]}, 1]; got {source.shape}")
    if not static.affine or static.terms or (not vector and source.size != 1):
        raise UnsupportedApiError("tensor.ap with a runtime offset is simulated for a scalar_offset on a "
                                  "dimension the pattern does not walk, and a vector_offset on a 2-D pattern")
    start = static.offset
    dynamic = DynamicIndex(source, storage.shape[dim] - start, 1, start)
    return (*items[:dim], dynamic, *items[dim + 1:])


def _one_column(index: Any) -> bool:
    """Whether `index` picks the one column of a [P, 1] layout (0, -1, :1, 0:1, :)."""
    if isinstance(index, slice):
        return len(range(*index.indices(1))) == 1
    return isinstance(index, (int, np.integer)) and int(index) in (0, -1)


def _one_partition(storage: Storage, key: Any) -> Any:
    """`sb[0, :]` of an on-chip tensor is one partition's free elements: the partition axis stays, of
    size 1 ([1, T], not T partitions), so rules and costs see the one lane the data occupies."""
    axis = storage.partition_axis
    if (storage.buffer == HBM or not isinstance(key, tuple) or len(key) <= axis + 1
            or not isinstance(key[axis], (int, np.integer))  # first: a compiler-style key has an nl.arange there
            or not all(isinstance(k, (int, np.integer, slice)) for k in key)
            or not any(isinstance(k, slice) for k in key[axis + 1:])):
        return key
    index = int(key[axis])
    return (*key[:axis], slice(index, index + 1 if index != -1 else None), *key[axis + 1:])


class MaskedTile(Tile):
    """`tile[...][mask]`: an operand read under a predicate, the same as passing `mask=` to the
    instruction that reads it (ops.instruction folds it into that argument)."""

    __slots__ = ("access_mask",)

    def __init__(self, tile: Tile, mask: Mask):
        super().__init__(tile.storage, tile.sub)
        self.access_mask = mask


def overlaps(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    """Do two half-open bounding boxes share an element?"""
    return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b, strict=True))


def close_accumulation(storage: Storage, region: tuple[tuple[int, int], ...]) -> None:
    """Something other than a matmul touched `region`: matmul groups overlapping it are finished."""
    if storage.mm_open:
        storage.mm_open = [r for r in storage.mm_open if not overlaps(r, region)] or None


def _garbage(dtype: np.dtype) -> float:
    """New on-chip memory holds garbage on hardware; NaN (floats) or 4 (ints) makes misuse visible."""
    return np.nan if dtypes.is_float(dtype) else 4


def _uninitialized(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.full(shape, _garbage(dtype), dtype=dtype)


def _fresh_array(sim: Simulation, dims: tuple[int, ...], dtype: np.dtype, filled: bool) -> np.ndarray:
    """A new tensor's array: from the replay's pool where it keeps one, filled as fresh memory is unless not
    `filled` (its contents then are whatever the memory held)."""
    recycled, memory = sim.recycled, sim.memory
    if recycled is not None and memory is not None:
        if filled:
            return recycled.uninitialized(dims, dtype, memory.used)
        data = recycled.take(dims, dtype, memory.used)
        if data is not None:
            return data
    return _uninitialized(dims, dtype) if filled else np.empty(dims, dtype=dtype)


def allocate(shape: Any, dtype: Any, buffer: Buffer | str | None, name: str = "") -> Tile:
    """Allocate a tensor, checking the partition and capacity rules the compiler enforces."""
    sim = current()
    kind = buffer.kind if isinstance(buffer, (Buffer, Placement)) else (buffer or SBUF)
    if kind not in (HBM, SBUF, PSUM):
        raise KernelUsageError(f"unknown buffer {buffer!r}")
    if isinstance(shape, (int, np.integer, ParDim)):
        shape = (shape,)
    partition_axis = 0
    dims = tuple(shape)
    if not all(type(s) is int for s in dims):
        partition_axis = next((i for i, s in enumerate(dims) if isinstance(s, ParDim)), 0)
        dims = tuple(int(s) for s in dims)
    if partition_axis and sim.api == "modern":
        raise KernelUsageError(f"shape {dims} puts nl.par_dim at position {partition_axis}: the nki package (NKI 0.2 "
                               "and later) has no block dimensions, the partition dimension comes first; keep the "
                               "blocks in a Python list of tiles (the 'Removing block dimensions' migration guide)")
    dtype = dtypes.as_dtype(dtype)
    shared = isinstance(buffer, Buffer) and buffer.name == "shared_hbm"
    if shared:
        index = sim.shared_cursor
        sim.shared_cursor += 1
        if index < len(sim.shared):
            storage = sim.shared[index]
            if storage.shape == dims and storage.dtype == dtype:
                return Tile(storage, full_subscript(dims))
    placement = buffer if isinstance(buffer, Placement) and not sim.force_auto_alloc else None
    tile = declare(kind, dims, partition_axis, dtype, name, placement)
    if shared:
        sim.shared.append(tile.storage)
    return tile


def declare(kind: str, dims: tuple[int, ...], partition_axis: int, dtype: np.dtype, name: str = "",
            placement: Placement | None = None, result: bool = False) -> Tile:
    """A new tensor of `kind`, its blocks where `placement` puts them (None: the compiler allocates),
    after the rules the compiler checks. What `allocate` creates, and what a replay rebuilds. An
    instruction's fresh `result` is left unfilled until something needs it filled (`Storage.unfilled`)."""
    sim = current()
    slots = None
    if placement is not None:
        _check_dims(dims, name)
        slots = sim.placed(placement, dims, partition_axis, dtype)
        # the capacity rules apply to what is allocated: one block per physical tile
        _check_on_chip(sim.limits, kind, slots.physical_shape(dims[partition_axis:]), 1 if slots.block_ndim else 0,
                       dtype, name)
    elif (kind, dims, partition_axis, dtype) not in sim.fitting:
        _check_dims(dims, name)
        if kind != HBM:
            _check_on_chip(sim.limits, kind, dims, partition_axis, dtype, name)
        sim.fitting.add((kind, dims, partition_axis, dtype))
    data = None
    by_block = False
    if sim.numeric:
        # a large block tensor of a replay is mapped once created, and each block filled when first touched
        by_block = sim.blocks is not None and sim.blocks.takes(sim.ids_used + 1, dims, partition_axis, dtype, kind)
        if sim.memory is not None:
            sim.memory.reserve(math.prod(dims) * dtype.itemsize)
        if not by_block:
            data = _fresh_array(sim, dims, dtype, filled=not result or placement is not None)
    storage = Storage(sim, name, kind, dims, dtype, partition_axis, data, slots)
    storage.unfilled = data is not None and result and placement is None
    if by_block:
        sim.blocks.adopt(storage, _garbage(dtype))  # type: ignore[union-attr]
    if sim.tape is not None:
        sim.declared(storage, "tensor")
    return Tile(storage, full_subscript(dims))


def _check_dims(dims: tuple[int, ...], name: str) -> None:
    if dims and min(dims) <= 0:
        raise KernelUsageError(f"tensor {name or ''} has an empty or negative dimension: {dims}")


def host_fill(tile: Tile, values: Any) -> None:
    """Write host data into a whole HBM tensor without an instruction (`nl.full` in HBM, constants): one
    value for every element, or an array of the tensor's shape."""
    storage = tile.storage
    if storage.buffer != HBM or not tile.is_whole:
        raise KernelUsageError(f"host data fills a whole HBM tensor; {storage.name} is {storage.buffer.upper()}")
    if isinstance(values, np.ndarray) and values.shape != storage.shape:
        raise KernelUsageError(f"host data of shape {values.shape} for {storage.name} of shape {storage.shape}")
    sim = current()
    storage.own()
    if storage.data is not None:
        storage.data[...] = values
    sim.trace.host_written.add(storage.id)
    sim.declared(storage, "fill", values)


def _label(kind: str, name: str, dims: tuple[int, ...]) -> str:
    return f"{kind.upper()} tensor {name + ' ' if name else ''}of shape {dims}"


def _check_on_chip(limits: Limits, kind: str, dims: tuple[int, ...], partition_axis: int,
                   dtype: np.dtype, name: str) -> None:
    """The rules the compiler checks on one tile. Block dimensions (in front of the partition
    dimension) are logical: the compiler allocates block by block, and the performance model
    prices what does not fit as spill, so their product is not a capacity error."""
    partitions = dims[partition_axis] if dims else 1
    if partitions > limits.pmax:
        raise HardwareRuleError(f"{_label(kind, name, dims)}: size of partition dimension {partitions} exceeds the "
                                f"architecture limit of {limits.pmax}")
    itemsize = dtypes.facts_of(dtype)[1]
    tile_bytes = math.prod(dims[partition_axis + 1:]) * itemsize
    if kind == SBUF and tile_bytes > limits.sbuf_partition_bytes:
        raise HardwareRuleError(f"{_label(kind, name, dims)}: one tile needs {tile_bytes} bytes per "
                                f"partition, more than the {limits.sbuf_partition_bytes} bytes of an SBUF partition on "
                                f"{limits.name}")
    if kind == PSUM and tile_bytes > limits.psum_bank_bytes:
        raise HardwareRuleError(f"{_label(kind, name, dims)}: a PSUM tile needs {tile_bytes} bytes per "
                                f"partition; a PSUM bank holds {limits.psum_bank_bytes} (512 float32)")


# the instructions and nl functions that tile sugar (t += x, t * 2, t[i] = x, t.broadcast_to(shape)) stands for;
# ops and language build on this module, so they are bound once it is defined (an import inside each method
# would cost half a microsecond per call)
from . import language, ops  # noqa: E402
