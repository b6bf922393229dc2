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

import math
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
    """Bytes of HBM the executed DMAs read and wrote, each byte once per side: accesses are marked on one
    byte map per allocation, through whichever view (reshape, dtype view) they name it."""
    tensors = trace.tensors
    by_memory: dict[int, list[tuple[int, Access]]] = {}  # HBM allocation -> (side, access) of every view
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
                by_memory.setdefault(_memory(tensors, acc.tensor), []).append((side, acc))
    totals = [0, 0]
    for root, accesses in by_memory.items():
        unit = math.gcd(*(DTYPE_SIZES.get(tensors[acc.tensor].dtype, 4) for _, acc in accesses))
        size = tensors[root].nbytes // unit
        marks = [np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)]  # read, written; one mark per `unit` bytes
        for side, acc in accesses:
            _mark(marks[side], unit, tensors[acc.tensor], acc)
        totals[0] += unit * int(np.count_nonzero(marks[0]))
        totals[1] += unit * int(np.count_nonzero(marks[1]))
    return totals[0], totals[1]


def _memory(tensors: dict[int, TensorInfo], tensor: int) -> int:
    """The allocation a view's memory belongs to."""
    info = tensors[tensor]
    while info.alias_of >= 0 and info.alias_of in tensors:
        tensor = info.alias_of
        info = tensors[tensor]
    return tensor


def _mark(marks: np.ndarray, unit: int, info: TensorInfo, acc: Access) -> None:
    """Set the marks (one per `unit` bytes of the allocation) of what `acc`, an access to view `info`, touches."""
    item = DTYPE_SIZES.get(info.dtype, 4) // unit
    if info.nbytes != marks.size * unit:
        return  # a view that does not cover its allocation byte for byte: not placed (the floor stays a lower bound)
    grid = marks.reshape(*info.shape, item)
    kind = acc.elements
    if kind is None:
        grid[tuple(slice(lo, hi) for lo, hi in acc.region)] = True
    elif acc.gathered is not None:
        grid.reshape(-1, item)[acc.gathered] = True
    elif kind[0] == "box":
        grid[tuple(_index(k) for k in kind[1:])] = True
    elif kind[0] != "run time":
        grid[tuple(_index(k) for k in kind)] = True


def _index(item: int | tuple[int, int, int]) -> int | slice:
    return item if isinstance(item, int) else slice(*item)
