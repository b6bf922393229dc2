"""SBUF pressure: how much of each instruction's on-chip traffic must go through HBM.

The compiler allocates a tensor declared with block dimensions in front of the partition dimension
(`nl.ndarray((32, 7, nl.par_dim(128), 1024), buffer=nl.sbuf)`) block by block: a block takes space
from its first access to its last, and is dead after that. So liveness is counted per block; a
tensor without block dimensions is one block. Blocks are live over program order, from their first
to their last access.

The simulator gives no addresses, so the model cannot know which bytes the compiler would evict. It
prices the overflow proportionally instead: while the live blocks exceed the usable SBUF, that share
of every SBUF read is reloaded from HBM and that share of every SBUF write is saved there first. This
keeps the cost smooth in the amount of overflow and never depends on the schedule, so it is computed
once up front.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from accelopt_core.nki.trace import TensorInfo, Trace

Span = list[int]  # [first, last] instruction index of a block's accesses


@dataclass(slots=True)
class SbufPressure:
    """Per-instruction spill share and the peak live footprint."""

    fractions: list[float] | None  # share of SBUF traffic spilled, per instruction; None if it all fits
    peak_bytes_per_partition: int
    capacity_bytes_per_partition: int


def sbuf_pressure(trace: Trace, first: dict[int, int], last: dict[int, int],
                  capacity: int) -> SbufPressure:
    """Live SBUF bytes per partition over program order and the spilled share where it overflows.
    `first` / `last`: each tensor's first and last accessing instruction."""
    n = len(trace.instructions)
    starts, ends, sizes = _live_intervals(trace, first, last)
    if not sizes or n == 0:
        return SbufPressure(None, 0, capacity)
    delta = np.zeros(n + 1, dtype=np.float64)
    np.add.at(delta, np.asarray(starts, dtype=np.int64), sizes)
    np.add.at(delta, np.asarray(ends, dtype=np.int64) + 1, -np.asarray(sizes, dtype=np.float64))
    live = np.cumsum(delta[:n])
    peak = round(float(live.max()))
    if peak <= capacity:
        return SbufPressure(None, peak, capacity)
    excess = np.maximum(live - capacity, 0.0)
    fractions = np.divide(excess, live, out=np.zeros_like(live), where=live > 0)
    return SbufPressure(fractions.tolist(), peak, capacity)


def _live_intervals(trace: Trace, first: dict[int, int], last: dict[int, int]
                    ) -> tuple[list[int], list[int], list[float]]:
    """(start, end, bytes per partition) of every live SBUF block."""
    starts: list[int] = []
    ends: list[int] = []
    sizes: list[float] = []
    blocked: dict[int, TensorInfo] = {}
    for tid, info in trace.tensors.items():
        if info.buffer != "sbuf" or info.bytes_per_partition <= 0 or tid not in first:
            continue
        if info.partition_axis > 0:
            blocked[tid] = info
            continue
        starts.append(first[tid])
        ends.append(last[tid])
        sizes.append(float(info.bytes_per_partition))
    for tid, spans in _block_spans(trace, blocked).items():
        info = blocked[tid]
        tile = info.bytes_per_partition / math.prod(info.shape[:info.partition_axis])
        for lo, hi in spans.values():
            starts.append(lo)
            ends.append(hi)
            sizes.append(tile)
    return starts, ends, sizes


def _block_spans(trace: Trace, blocked: dict[int, TensorInfo]) -> dict[int, dict[tuple[int, ...], Span]]:
    """First and last access of every block of the block tensors, in program order."""
    spans: dict[int, dict[tuple[int, ...], Span]] = {tid: {} for tid in blocked}
    if not blocked:
        return spans
    for i, inst in enumerate(trace.instructions):
        for accesses in (inst.reads, inst.writes):
            for acc in accesses:
                info = blocked.get(acc.tensor)
                if info is None:
                    continue
                own = spans[acc.tensor]
                for block in _blocks(acc.region[:info.partition_axis]):
                    span = own.get(block)
                    if span is None:
                        own[block] = [i, i]
                    else:
                        span[1] = i
    return spans


def _blocks(region: tuple[tuple[int, int], ...]) -> list[tuple[int, ...]]:
    """The block indices a region of the block dimensions covers."""
    if all(hi - lo == 1 for lo, hi in region):
        return [tuple(lo for lo, _ in region)]
    return list(itertools.product(*(range(lo, hi) for lo, hi in region)))
