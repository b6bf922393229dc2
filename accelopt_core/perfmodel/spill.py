"""SBUF pressure: how much of each instruction's on-chip traffic must go through HBM.

The simulator gives every SBUF tensor its footprint per partition (block tensors included whole),
but not an address, so the model cannot know which bytes the compiler would evict. It prices the
overflow proportionally instead: while the live footprint (each tensor live from its first to its
last access, in program order) exceeds the usable SBUF, that share of every SBUF read is reloaded
from HBM and that share of every SBUF write is saved there first. This keeps the cost smooth in
the amount of overflow and never depends on the schedule, so it is computed once up front.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accelopt_core.nki.trace import Trace


@dataclass(slots=True)
class SbufPressure:
    """Per-instruction spill share and the peak live footprint."""

    fractions: list[float] | None  # share of SBUF traffic spilled, per instruction; None if it all fits
    peak_bytes_per_partition: int
    capacity_bytes_per_partition: int


def sbuf_pressure(trace: Trace, first: dict[int, int], last: dict[int, int],
                  capacity: int) -> SbufPressure:
    """Live SBUF bytes per partition over program order and the spilled share where it overflows."""
    n = len(trace.instructions)
    ids: list[int] = []
    sizes: list[int] = []
    for tid, info in trace.tensors.items():
        if info.buffer == "sbuf" and info.bytes_per_partition > 0 and tid in first:
            ids.append(tid)
            sizes.append(info.bytes_per_partition)
    if not ids or n == 0:
        return SbufPressure(None, 0, capacity)
    bpp = np.asarray(sizes, dtype=np.float64)
    starts = np.fromiter((first[t] for t in ids), dtype=np.int64, count=len(ids))
    ends = np.fromiter((last[t] for t in ids), dtype=np.int64, count=len(ids))
    delta = np.zeros(n + 1, dtype=np.float64)
    np.add.at(delta, starts, bpp)
    np.add.at(delta, ends + 1, -bpp)
    live = np.cumsum(delta[:n])
    peak = round(float(live.max())) if n else 0
    if peak <= capacity:
        return SbufPressure(None, peak, capacity)
    excess = np.maximum(live - capacity, 0.0)
    fractions = np.divide(excess, live, out=np.zeros_like(live), where=live > 0)
    return SbufPressure(fractions.tolist(), peak, capacity)
