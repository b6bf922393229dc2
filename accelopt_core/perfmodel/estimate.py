"""`estimate`: schedule a trace and summarise it the way neuron-profile does."""

from __future__ import annotations

from typing import Any

import numpy as np

from accelopt_core.hardware import HardwareProfile
from accelopt_core.nki.trace import Access, Engine, Trace, collector_paused
from accelopt_core.perfmodel.assumptions import plan_assumptions
from accelopt_core.perfmodel.costs import CostModel
from accelopt_core.perfmodel.floor import PhysicalFloor, physical_floor
from accelopt_core.perfmodel.report import PerfReport
from accelopt_core.perfmodel.scheduler import ENGINES, Schedule, schedule


def estimate(trace: Trace, hardware: HardwareProfile) -> PerfReport:
    """Estimated latency, engine activity, traffic, bottleneck and per-line time of a trace."""
    costs = CostModel(hardware)
    with collector_paused():  # the scheduler allocates many small, acyclic records
        sched = schedule(trace, hardware, costs)
        return _report(trace, hardware, costs, sched)


def _report(trace: Trace, hardware: HardwareProfile, costs: CostModel, sched: Schedule) -> PerfReport:
    n = len(trace.instructions)
    plan = sched.plan
    floor = physical_floor(trace, hardware)
    latency = max(sched.latency, floor.time)
    traffic = _Traffic(trace, plan.dropped, hardware.tensor.fp32_counted_flops_factor)
    codes = np.asarray(sched.engine, dtype=np.int64)
    start = np.asarray(sched.start, dtype=np.float64)
    end = np.asarray(sched.end, dtype=np.float64)
    busy_time = np.asarray(sched.busy, dtype=np.float64)
    counts = np.bincount(codes, minlength=len(ENGINES)) if n else np.zeros(len(ENGINES), int)
    busy_by_code = (np.bincount(codes, weights=busy_time, minlength=len(ENGINES))
                    if n else np.zeros(len(ENGINES)))
    busy = {name: float(busy_by_code[c] + sched.compiler_busy[c]) for c, name in enumerate(ENGINES)}
    busy["dma"] = _union_length(sched.dma_data)

    def fraction(value: float) -> float:
        """A time as a share of the latency: the `*_percent` fields are fractions, as neuron-profile writes them."""
        return value / latency if latency > 0 else 0.0

    hbm_read = traffic.read["hbm"] + sched.spill_reload + sched.refetch
    hbm_write = traffic.write["hbm"] + sched.spill_save
    spill_save = sched.spill_save + traffic.scratch_write
    spill_reload = sched.spill_reload + traffic.scratch_read
    hw_flops, tr_flops = traffic.hardware_flops, traffic.transpose_flops
    peak = hardware.peak
    critical = _critical_path(sched)
    bottleneck = max(critical, key=lambda name: critical[name]) if latency > 0 else "none"
    if bottleneck != "none" and critical[bottleneck] <= 0:
        bottleneck = "none"
    idle = {name: max(0.0, 1.0 - fraction(busy[name])) for name in ENGINES}

    bugs = _floor_notes(sched.latency, floor, hbm_read, hbm_write)
    notes = list(bugs)
    for (engine, op), count in sorted(costs.unknown_ops.items()):
        notes.append(f"{count} '{op}' instruction(s) on {engine} have no documented cost;"
                     " priced as max(MIN_II, N)")
    if plan.peak_bytes_per_partition > plan.capacity_bytes_per_partition:
        notes.append(
            f"live SBUF peaks at {plan.peak_bytes_per_partition} B/partition, above the usable"
            f" {plan.capacity_bytes_per_partition} B: loaded blocks that do not fit are loaded again at each"
            " use, computed ones are spilled")
    if plan.psum_peak_bytes_per_partition > hardware.memory.psum_bytes_per_partition:
        notes.append(
            f"live PSUM peaks at {plan.psum_peak_bytes_per_partition} B/partition, above its"
            f" {hardware.memory.psum_bytes_per_partition} B: the results that do not fit are spilled to HBM and"
            " reloaded before they are read")

    return PerfReport(
        hardware=hardware.name,
        latency=latency,
        latency_ms=latency * 1e3,
        total_time=latency,
        neuroncore_cycle_count=round(latency * hardware.base_clock_hz),
        instruction_count=n,
        tensor_engine_active_time=busy["tensor"],
        vector_engine_active_time=busy["vector"],
        scalar_engine_active_time=busy["scalar"],
        gpsimd_engine_active_time=busy["gpsimd"],
        dma_active_time=busy["dma"],
        tensor_engine_active_time_percent=fraction(busy["tensor"]),
        vector_engine_active_time_percent=fraction(busy["vector"]),
        scalar_engine_active_time_percent=fraction(busy["scalar"]),
        gpsimd_engine_active_time_percent=fraction(busy["gpsimd"]),
        dma_active_time_percent=fraction(busy["dma"]),
        tensor_engine_instruction_count=int(counts[0]),
        vector_engine_instruction_count=int(counts[1]),
        scalar_engine_instruction_count=int(counts[2]),
        gpsimd_engine_instruction_count=int(counts[3]),
        dma_instruction_count=int(counts[4]),
        matmul_instruction_count=int(counts[0]),
        hbm_read_bytes=int(hbm_read),
        hbm_write_bytes=int(hbm_write),
        sbuf_read_bytes=int(traffic.read["sbuf"] + sched.spill_save),
        sbuf_write_bytes=int(traffic.write["sbuf"] + sched.spill_reload + sched.refetch),
        psum_read_bytes=int(traffic.read["psum"]),
        psum_write_bytes=int(traffic.write["psum"]),
        spill_save_bytes=spill_save,
        spill_reload_bytes=spill_reload,
        sbuf_peak_live_bytes_per_partition=plan.peak_bytes_per_partition,
        sbuf_usable_bytes_per_partition=plan.capacity_bytes_per_partition,
        hardware_flops=int(hw_flops),
        transpose_flops=int(tr_flops),
        hfu_estimated_percent=fraction(hw_flops / peak.tensor_flops),
        mfu_inst_estimated_percent=fraction((hw_flops - tr_flops) / peak.tensor_flops),
        mm_arithmetic_intensity=((hw_flops - tr_flops) / (hbm_read + hbm_write)
                                 if hbm_read + hbm_write else 0.0),
        mbu_estimated_percent=fraction((hbm_read + hbm_write) / peak.hbm_bandwidth),
        dma_transfer_count=sched.dma_transfers,
        dma_transfer_total_bytes=sched.dma_bytes,
        dma_transfer_average_bytes=(sched.dma_bytes / sched.dma_transfers
                                    if sched.dma_transfers else 0.0),
        bottleneck=bottleneck,
        bottleneck_summary=_bottleneck_summary(bottleneck, critical, idle),
        physical_floor_time=floor.time,
        physical_floor_bound=floor.bound,
        physical_floor_times=floor.times,
        hbm_distinct_read_bytes=floor.hbm_read_bytes,
        hbm_distinct_write_bytes=floor.hbm_write_bytes,
        model_below_floor=bool(bugs),
        critical_path_time=critical,
        engine_busy_time=busy,
        idle_percent=idle,
        lines=_lines(trace, codes, busy_time, traffic.by_line),
        loops=_loops(sched, start, end, busy_time),
        notes=notes,
        assumptions=[a.to_dict() for a in plan_assumptions(trace, plan)],
    )


def _floor_notes(modelled: float, floor: PhysicalFloor, hbm_read: float, hbm_write: float) -> list[str]:
    """What of the model's result falls below the executed work's physical floor: each one a model bug."""
    notes = []
    if modelled < floor.time * (1 - 1e-9):
        notes.append(f"model bug: the schedule takes {modelled * 1e3:.4g} ms, below the physical floor of the executed"
                     f" work ({floor.time * 1e3:.4g} ms, {floor.bound}); the latency is the floor")
    sides = (("read", hbm_read, floor.hbm_read_bytes), ("write", hbm_write, floor.hbm_write_bytes))
    for side, priced, distinct in sides:
        if priced < distinct:
            notes.append(f"model bug: {int(priced)} HBM bytes priced to {side}, fewer than the {distinct} distinct"
                         f" bytes the executed DMAs {side}")
    return notes


class _Traffic:
    """Bytes and flops counted in one pass over the trace: per memory level over the instructions the
    hardware executes (`Trace.summary`'s split: HBM, SBUF, the rest PSUM), the matmul flops as
    neuron-profile counts them, per source line the bytes as written (every instruction), and the traffic
    of the kernel's own scratch HBM: a tensor it writes before it first reads it, then reads back (a
    compiler-style kernel's `_spill` buffer in `nl.hbm`), which neuron-profile counts as spill."""

    def __init__(self, trace: Trace, dropped: list[bool], fp32_factor: float) -> None:
        self.read = {"hbm": 0, "sbuf": 0, "psum": 0}
        self.write = {"hbm": 0, "sbuf": 0, "psum": 0}
        self.hardware_flops = 0.0
        self.transpose_flops = 0.0
        self.by_line: dict[int, dict[str, int]] = {}
        written_first: dict[int, bool] = {}  # HBM tensor -> whether the kernel wrote it before reading it
        hbm_bytes: dict[int, list[int]] = {}  # HBM tensor -> [bytes read, bytes written], executed
        for inst, gone in zip(trace.instructions, dropped, strict=True):
            levels = self.by_line.get(inst.line)
            if levels is None:
                levels = self.by_line[inst.line] = {}
            self._count(inst.reads, levels, None if gone else self.read)
            self._count(inst.writes, levels, None if gone else self.write)
            if not gone:
                for side, accesses in enumerate((inst.reads, inst.writes)):
                    for acc in accesses:
                        if acc.buffer == "hbm":
                            written_first.setdefault(acc.tensor, side == 1 and acc.tensor not in trace.host_written)
                            hbm_bytes.setdefault(acc.tensor, [0, 0])[side] += acc.nbytes
            if not gone and inst.engine == Engine.TENSOR:
                flops = inst.flops * (fp32_factor if inst.dtype == "float32" else 1.0)
                self.hardware_flops += flops
                if inst.attrs and inst.attrs.get("is_transpose"):
                    self.transpose_flops += flops
        scratch = [hbm_bytes[t] for t, first in written_first.items() if first and hbm_bytes[t][0]]
        self.scratch_read = sum(read for read, _ in scratch)
        self.scratch_write = sum(written for _, written in scratch)

    @staticmethod
    def _count(accesses: tuple[Access, ...], levels: dict[str, int], executed: dict[str, int] | None) -> None:
        for acc in accesses:
            buffer = acc.buffer
            levels[buffer] = levels.get(buffer, 0) + acc.nbytes
            if executed is not None:
                executed[buffer if buffer == "hbm" or buffer == "sbuf" else "psum"] += acc.nbytes


def _union_length(intervals: list[tuple[float, float]]) -> float:
    """Total time covered by at least one interval."""
    if not intervals:
        return 0.0
    data = np.asarray(intervals, dtype=np.float64)
    data = data[np.argsort(data[:, 0], kind="stable")]
    starts, ends = data[:, 0], data[:, 1]
    reach = np.maximum.accumulate(ends)
    # a new covered block begins where an interval starts after everything before it ended
    new_block = np.empty(len(starts), dtype=bool)
    new_block[0] = True
    new_block[1:] = starts[1:] > reach[:-1]
    block_id = np.cumsum(new_block) - 1
    block_start = starts[new_block]
    block_end = np.zeros(len(block_start))
    np.maximum.at(block_end, block_id, ends)
    return float(np.sum(block_end - block_start))


def _critical_path(sched: Schedule) -> dict[str, float]:
    """Time per engine along the chain of instructions that fixed the final time.

    Walking back from the last result, each instruction is credited with the part of its
    start-to-end interval before the time its successor on the chain started, so overlapping
    transfers are never counted twice and the total never exceeds the latency.
    """
    critical = dict.fromkeys(ENGINES, 0.0)
    if not sched.ready:
        return critical
    i = int(np.argmax(np.asarray(sched.ready)))
    cursor = sched.ready[i]
    while i >= 0:
        s = sched.start[i]
        covered = min(cursor, sched.end[i]) - s
        if covered > 0:
            critical[ENGINES[sched.engine[i]]] += covered
        if s < cursor:
            cursor = s
        i = sched.pred[i]
    return critical


def _bottleneck_summary(bottleneck: str, critical: dict[str, float],
                        idle: dict[str, float]) -> str:
    if bottleneck == "none":
        return "empty trace"
    total = sum(critical.values()) or 1.0
    share = 100.0 * critical[bottleneck] / total
    others = ", ".join(f"{name} {100 * idle[name]:.0f}%" for name in ENGINES if name != bottleneck)
    return (f"{bottleneck}-bound: {share:.0f}% of the critical path's busy time is on {bottleneck};"
            f" idle: {others}")


def _lines(trace: Trace, codes: np.ndarray, duration: np.ndarray,
           traffic: dict[int, dict[str, int]]) -> list[dict[str, Any]]:
    """Busy time per kernel source line, the engine that dominates it, sorted by time."""
    if not len(codes):
        return []
    lines = np.fromiter((inst.line for inst in trace.instructions), dtype=np.int64,
                        count=len(codes))
    keys = lines * len(ENGINES) + codes
    unique, inverse = np.unique(keys, return_inverse=True)
    time = np.bincount(inverse, weights=duration)
    count = np.bincount(inverse)
    per_line: dict[int, dict[str, Any]] = {}
    for key, t, c in zip(unique.tolist(), time.tolist(), count.tolist(), strict=True):
        line, code = divmod(key, len(ENGINES))
        entry = per_line.setdefault(line, {"line": line, "time_ms": 0.0, "engine": "",
                                           "instructions": 0, "engines": {}})
        entry["engines"][ENGINES[code]] = t * 1e3
        entry["time_ms"] += t * 1e3
        entry["instructions"] += c
    for entry in per_line.values():
        engines = entry["engines"]
        entry["engine"] = max(engines, key=lambda name: engines[name])
        entry["bytes"] = traffic.get(entry["line"], {})  # bytes read and written per memory level
    return sorted(per_line.values(), key=lambda e: (-e["time_ms"], e["line"]))


def _loops(sched: Schedule, start: np.ndarray, end: np.ndarray,
           duration: np.ndarray) -> list[dict[str, Any]]:
    """Busy time and wall span per source loop, all executions of that loop together."""
    if not sched.nests:
        return []
    nest = np.asarray(sched.nest, dtype=np.int64)
    count = len(sched.nests)
    busy = np.bincount(nest, weights=duration, minlength=count)
    number = np.bincount(nest, minlength=count)
    first = np.full(count, np.inf)
    last = np.zeros(count)
    np.minimum.at(first, nest, start)
    np.maximum.at(last, nest, end)
    # every (nest, loop) pair, nests in order and each nest's loops outermost first: the order in
    # which a loop's time is summed
    pair_loop = [loop for nest_loops in sched.nests for loop, _ in nest_loops]
    if not pair_loop:
        return []
    pair_nest = np.repeat(np.arange(count), [len(nest_loops) for nest_loops in sched.nests])
    _, first_pair, pair_distinct = np.unique(np.fromiter(map(id, pair_loop), dtype=np.int64, count=len(pair_loop)),
                                             return_index=True, return_inverse=True)
    distinct = [pair_loop[k] for k in first_pair.tolist()]  # each loop statement execution once
    lines, distinct_line = np.unique(np.asarray([loop.line for loop in distinct], dtype=np.int64), return_inverse=True)
    pair_line = distinct_line[pair_distinct]
    size = len(lines)
    time_ms = np.bincount(pair_line, weights=busy[pair_nest] * 1e3, minlength=size)
    instructions = np.bincount(pair_line, weights=number[pair_nest], minlength=size)
    executions = np.bincount(distinct_line, minlength=size)
    iterations = np.bincount(distinct_line, weights=[loop.trip_count for loop in distinct], minlength=size)
    line_first = np.full(size, np.inf)
    line_last = np.zeros(size)
    np.minimum.at(line_first, pair_line, first[pair_nest])
    np.maximum.at(line_last, pair_line, last[pair_nest])
    _, first_of_line = np.unique(pair_line, return_index=True)
    result = []
    for k, line in enumerate(lines.tolist()):
        span = float(line_last[k]) - float(line_first[k])
        result.append({"line": line, "kind": pair_loop[int(first_of_line[k])].kind, "executions": int(executions[k]),
                       "iterations": int(iterations[k]), "instructions": int(instructions[k]),
                       "time_ms": float(time_ms[k]), "span_ms": max(0.0, span) * 1e3 if instructions[k] else 0.0})
    return sorted(result, key=lambda e: (-e["time_ms"], e["line"]))
