"""Physical floors: the least time any NeuronCore of a generation needs for the work a kernel executed.

The performance model decides what the compiler removes (a repeated load, a redundant transpose), how
transfers overlap and how fast each engine goes; a mistake there, or a kernel written to exploit one, can
price a kernel below what the hardware can possibly do. The floors are computed from the trace alone (what
the replay executed), never from the model's decisions, at the profile's peak rates:

- HBM: the distinct bytes the DMAs read and wrote (each element once, however often it was loaded, through
  whatever view), at the peak HBM bandwidth (reads and writes share it);
- Tensor engine: the matmul flops (transposes excluded: a repeated one may be removed) at the PE array's
  peak for their dtype, 2 x rows x cols per cycle scaled by the dtype's cycle factor;
- Vector, Scalar, GpSimd: the elements of their arithmetic instructions (copies and transposes excluded,
  for the same reason) over all lanes at the fastest per-lane rate the profile allows that dtype; an
  instruction the compiler places on Vector or Scalar (its `engines` choices) counts on neither alone, but
  in "vector+scalar": half the two engines' busy time together, each such instruction on the faster.

No schedule beats the largest of them, so a latency below it is a model bug, which `estimate` reports.
Elements addressed by indices read at run time are left out: the floor stays a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelopt_core.hardware import HardwareProfile
from accelopt_core.nki.dtypes import DTYPE_SIZES
from accelopt_core.nki.instructions import DECLARED
from accelopt_core.nki.trace import Access, Engine, Instruction, Op, TensorInfo, Trace

_COPIES = frozenset(op for op, declared in DECLARED.items() if declared.moves)  # movement the compiler may drop
_CHOSEN_AMONG = (Engine.VECTOR, Engine.SCALAR)  # the engines an instruction left to the compiler may run on


@dataclass(slots=True)
class PhysicalFloor:
    """The executed work's least time per resource (seconds) and the distinct HBM bytes behind the HBM one."""

    hbm_read_bytes: int
    hbm_write_bytes: int
    times: dict[str, float] = field(default_factory=dict)  # "hbm", "tensor", "vector", "scalar", "gpsimd"

    @property
    def time(self) -> float:
        """The floor itself: every resource must do its share, so the slowest one's."""
        return max(self.times.values(), default=0.0)

    @property
    def bound(self) -> str:
        """The resource that sets the floor ("none" for a kernel that does nothing)."""
        return max(self.times, key=lambda name: self.times[name]) if self.time > 0 else "none"


def physical_floor(trace: Trace, hardware: HardwareProfile) -> PhysicalFloor:
    """The floors of everything `trace` executed on `hardware` (module docstring)."""
    read, written = distinct_hbm_bytes(trace)
    times = {"hbm": (read + written) / hardware.peak.hbm_bandwidth, "tensor": 0.0}
    times.update(dict.fromkeys((Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), 0.0))
    tensor = hardware.tensor
    per_cycle = 2.0 * tensor.array_rows * tensor.array_cols * tensor.clock_hz
    shared = 0.0  # busy time of the engines the compiler chooses between, at the fastest of them
    for inst in trace.instructions:
        if inst.engine == Engine.TENSOR:
            if inst.op == Op.NC_MATMUL:
                times["tensor"] += inst.flops * tensor.factor(inst.dtype) / per_cycle
        elif inst.engine in times and inst.op not in _COPIES:
            choices = inst.attrs.get("engines") if inst.attrs else None
            if choices:
                shared += min(_engine_floor(inst, hardware, engine) for engine in choices)
            else:
                time = _engine_floor(inst, hardware, inst.engine)
                times[inst.engine] += time
                if inst.engine in _CHOSEN_AMONG:
                    shared += time
    # what the compiler may place on Vector or Scalar keeps the two busy for at least half their joint time
    times["vector+scalar"] = shared / len(_CHOSEN_AMONG)
    return PhysicalFloor(read, written, times)


def _engine_floor(inst: Instruction, hardware: HardwareProfile, engine: str) -> float:
    """Seconds one Vector/Scalar/GpSimd instruction needs at least on `engine`: its elements over all lanes at
    the fastest rate the engine has for the narrowest data it touches, performance modes included."""
    spec = hardware.compute_engine(engine)
    narrowest = min((DTYPE_SIZES.get(a.dtype, 4) for a in (*inst.reads, *inst.writes)),
                    default=DTYPE_SIZES.get(inst.dtype, 4))
    rate = spec.rate(min(narrowest, DTYPE_SIZES.get(inst.dtype, 4)))
    speedup = max(1.0, spec.perf_mode_copy_speedup, spec.perf_mode_other_speedup)
    per_second = spec.lanes * rate * speedup * spec.clock_hz
    return inst.partitions * inst.free_elements / per_second


def distinct_hbm_bytes(trace: Trace) -> tuple[int, int]:
    """Bytes of HBM the executed DMAs read and wrote, each byte once per side: every access becomes the byte
    intervals it touches in its allocation, through whichever view (reshape, dtype view) it names it, and
    each side's intervals are merged into a union (exact, and small where a kernel sweeps a big tensor)."""
    tensors = trace.tensors
    unions: dict[tuple[int, int], ByteUnion] = {}  # (side, HBM allocation) -> the bytes touched so far
    seen: set[tuple[int, int, tuple[tuple[int, int], ...], Any]] = set()  # a tile loaded again marks nothing new
    for inst in trace.instructions:
        for side, accesses in enumerate((inst.reads, inst.writes)):
            for acc in accesses:
                if acc.buffer != "hbm" or acc.tensor not in tensors:
                    continue
                if acc.gathered is None:
                    key = (side, acc.tensor, acc.region, acc.elements)
                    if key in seen:
                        continue
                    seen.add(key)
                root = _memory(tensors, acc.tensor)
                info = tensors[acc.tensor]
                if info.nbytes != tensors[root].nbytes:
                    continue  # a view that does not cover its allocation byte for byte: not placed (a lower bound)
                runs = _byte_runs(info, acc)
                if runs is not None:
                    unions.setdefault((side, root), ByteUnion()).add(*runs)
    totals = [0, 0]
    for (side, _), union in unions.items():
        totals[side] += union.size()
    return totals[0], totals[1]


class ByteUnion:
    """A union of half-open byte intervals: intervals are collected and merged (sorted, overlaps joined) once
    enough are pending, so memory follows the merged union rather than every access."""

    MERGE_AT = 1 << 20  # pending intervals that trigger a merge

    def __init__(self) -> None:
        self.starts: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []
        self.pending = 0

    def add(self, starts: np.ndarray, length: int) -> None:
        """Add the intervals [start, start + length) for every start."""
        self.starts.append(starts)
        self.ends.append(starts + length)
        self.pending += starts.size
        if self.pending >= self.MERGE_AT:
            self._merge()

    def _merge(self) -> None:
        starts, ends = np.concatenate(self.starts), np.concatenate(self.ends)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        reach = np.maximum.accumulate(ends)
        opens = np.ones(starts.size, dtype=bool)
        opens[1:] = starts[1:] > reach[:-1]  # an interval opens a new piece unless an earlier one reaches it
        first = np.flatnonzero(opens)
        last = np.append(first[1:] - 1, starts.size - 1)
        self.starts, self.ends = [starts[first]], [reach[last]]
        self.pending = first.size

    def size(self) -> int:
        """Bytes in the union."""
        if not self.starts:
            return 0
        self._merge()
        return int((self.ends[0] - self.starts[0]).sum())


def _memory(tensors: dict[int, TensorInfo], tensor: int) -> int:
    """The allocation a view's memory belongs to."""
    info = tensors[tensor]
    while info.alias_of >= 0 and info.alias_of in tensors:
        tensor = info.alias_of
        info = tensors[tensor]
    return tensor


def _byte_runs(info: TensorInfo, acc: Access) -> tuple[np.ndarray, int] | None:
    """The bytes `acc`, an access to view `info`, touches in the view's allocation: the starts of equal runs
    and their length; None for indices read at run time (left out: the floor stays a lower bound)."""
    item = DTYPE_SIZES.get(info.dtype, 4)
    kind = acc.elements
    if acc.gathered is not None:
        return np.asarray(acc.gathered, dtype=np.int64).ravel() * item, item
    if kind is None:
        index: tuple[Any, ...] = tuple((lo, hi, 1) for lo, hi in acc.region)
    elif kind[0] == "box":
        index = kind[1:]
    elif kind[0] == "run time":
        return None
    else:
        index = kind
    starts, length = box_runs(info.shape, index)
    return starts * item, length * item


def box_runs(shape: tuple[int, ...], index: tuple[Any, ...]) -> tuple[np.ndarray, int]:
    """The contiguous runs a box selects in a C-ordered array of `shape`: their flat starts and common length
    (in elements). Each index is a number or a (start, stop, step) slice; dimensions past the index are whole.
    The innermost dimensions a run covers completely join into one run, so a box of whole rows is one run."""
    dims: list[tuple[int, int, int]] = []  # (first, count, step) per dimension
    for axis, size in enumerate(shape):
        k = index[axis] if axis < len(index) else (0, size, 1)
        if isinstance(k, (int, np.integer)):
            dims.append((int(k), 1, 1))
        else:
            first, stop, step = slice(*k).indices(size)
            dims.append((first, len(range(first, stop, step)), step))
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    if any(count == 0 for _, count, _ in dims):
        return np.zeros(0, dtype=np.int64), 0
    length, axis = 1, len(shape) - 1
    while axis >= 0 and length == strides[axis] and (dims[axis][2] == 1 or dims[axis][1] == 1):
        length *= dims[axis][1]
        axis -= 1
    starts = np.zeros(1, dtype=np.int64)
    for a in range(axis + 1):
        first, count, step = dims[a]
        starts = (starts[:, None] + (first + step * np.arange(count, dtype=np.int64)) * strides[a]).ravel()
    return starts + sum(dims[a][0] * strides[a] for a in range(axis + 1, len(shape))), length
