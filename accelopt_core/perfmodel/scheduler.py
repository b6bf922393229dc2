"""List scheduling of an instruction trace onto the NeuronCore engines and DMA queues.

Instructions are placed in program order. Each compute engine runs its own instructions in that
order; an instruction starts once its engine is free and the data it needs is there:

* RAW: after every earlier write that overlaps a region it reads has produced its result;
* WAR / WAW: before overwriting a region, after the earlier readers and writers of it are done
  (this is how buffer reuse limits overlap);
* PSUM banks: a new accumulation group in a bank waits until the group before it in that bank has
  been read out, since a bank holds one group at a time.

Loop kinds add no ordering of their own: `affine_range`, `sequential_range` and `static_range`
iterations are all ordered by the data dependencies above plus each engine's program order. An
earlier version made every instruction of a `sequential_range` iteration wait for the whole
previous iteration to finish, reading "iterations may not overlap" literally. The measurements say
otherwise: the matmul tutorial's fully blocked kernel (fact sheet D.2, 6.97 ms, 85% HFU on trn1)
runs its K-block loop as `sequential_range`, and with that barrier its DMA, Tensor and Vector work
(each several ms: about 6.8, 6.0 and 2.3 ms in this model) would add up to well over 10 ms; the
measured time is close to the Tensor engine's share alone, so the hardware overlapped the next K
block's loads and the previous block's read-out with the current block's matmuls. What
`sequential_range` really promises is that a loop-carried dependency is honoured, and the trace
already records every such dependency (the SBUF accumulator read and rewritten each iteration, a
scan carry, a reused buffer): the RAW/WAR/WAW rules enforce exactly those and nothing more. The
engines run their own instruction streams in order, so nothing overtakes on one engine either.

What the compiler changes before anything runs comes from `allocator.plan_allocation`: repeated data
movement it does once (those instructions cost nothing and their results are the earlier ones'), loads
it issues again at their uses, and spills. Their transfers are booked on the DMA queues around the
instructions that need them.

Dependencies are found per tensor: for each one the model keeps the writes and reads that may
still constrain someone, in program order with a running maximum of their times, so a query walks
back only over entries that finish later than what the instruction already waits for. A write that
covers the whole tensor replaces everything before it.
"""

from __future__ import annotations

from typing import Any

from accelopt_core.hardware import HardwareProfile
from accelopt_core.nki.trace import DTYPE_SIZES, Engine, Instruction, Loop, Trace
from accelopt_core.perfmodel.allocator import AllocationPlan, plan_allocation
from accelopt_core.perfmodel.costs import CostModel, DmaCost
from accelopt_core.perfmodel.dma import DmaTimeline

ENGINES: tuple[str, ...] = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.DMA)
_CODE = {name: code for code, name in enumerate(ENGINES)}
_DMA_CODE = _CODE[Engine.DMA]
_GPSIMD_CODE = _CODE[Engine.GPSIMD]
_BANK_BOX = ((0, 1),)  # every PSUM access covers its whole bank pseudo-tensor


def _overlaps(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    if a == b:
        return True
    # an explicit loop: this is the hottest function of the model and all() over a generator is slower
    for (alo, ahi), (blo, bhi) in zip(a, b, strict=False):  # noqa: SIM110
        if alo >= bhi or blo >= ahi:
            return False
    return True


class _TensorDeps:
    """Earlier writes and reads of one tensor that may still delay a later access."""

    __slots__ = ("rbox", "rfinish", "ridx", "rmax", "wbox", "wfinish", "widx", "wmax", "wready", "wtensor")

    def __init__(self) -> None:
        self.wbox: list[tuple[tuple[int, int], ...]] = []
        self.wready: list[float] = []
        self.wfinish: list[float] = []
        self.wtensor: list[bool] = []  # written by the Tensor engine (PSUM accumulation)
        self.widx: list[int] = []
        self.wmax: list[float] = []  # running max of wready: lets a query stop early
        self.rbox: list[tuple[tuple[int, int], ...]] = []
        self.rfinish: list[float] = []
        self.ridx: list[int] = []
        self.rmax: list[float] = []

    def after_writes(self, box: tuple[tuple[int, int], ...], bound: float, pred: int,
                     tensor_reader: bool) -> tuple[float, int]:
        """Raise `bound` to when every overlapping earlier write's result is usable."""
        wmax = self.wmax
        wready = self.wready
        i = len(wmax) - 1
        while i >= 0 and wmax[i] > bound:
            if wready[i] > bound and _overlaps(self.wbox[i], box):
                # back-to-back matmuls into one PSUM region accumulate near memory: no init gap
                t = self.wfinish[i] if tensor_reader and self.wtensor[i] else wready[i]
                if t > bound:
                    bound = t
                    pred = self.widx[i]
            i -= 1
        return bound, pred

    def after_reads(self, box: tuple[tuple[int, int], ...], bound: float,
                    pred: int) -> tuple[float, int]:
        """Raise `bound` to when every overlapping earlier read has finished."""
        rmax = self.rmax
        rfinish = self.rfinish
        i = len(rmax) - 1
        while i >= 0 and rmax[i] > bound:
            if rfinish[i] > bound and _overlaps(self.rbox[i], box):
                bound = rfinish[i]
                pred = self.ridx[i]
            i -= 1
        return bound, pred

    def add_write(self, box: tuple[tuple[int, int], ...], ready: float, finish: float,
                  tensor: bool, index: int, covers_all: bool) -> None:
        if covers_all:
            # This write waited for every earlier access, so none of them can matter any more.
            self.wbox = [box]
            self.wready = [ready]
            self.wfinish = [finish]
            self.wtensor = [tensor]
            self.widx = [index]
            self.wmax = [ready]
            if self.rbox:
                self.rbox = []
                self.rfinish = []
                self.ridx = []
                self.rmax = []
            return
        self.wbox.append(box)
        self.wready.append(ready)
        self.wfinish.append(finish)
        self.wtensor.append(tensor)
        self.widx.append(index)
        wmax = self.wmax
        wmax.append(ready if not wmax or ready > wmax[-1] else wmax[-1])

    def add_read(self, box: tuple[tuple[int, int], ...], finish: float, index: int) -> None:
        self.rbox.append(box)
        self.rfinish.append(finish)
        self.ridx.append(index)
        rmax = self.rmax
        rmax.append(finish if not rmax or finish > rmax[-1] else rmax[-1])


class _NestInfo:
    """What the report needs from one loop nest, computed once per distinct nest tuple."""

    __slots__ = ("index", "loops")

    def __init__(self, index: int, loops: tuple[Loop, ...]) -> None:
        self.index = index
        self.loops = loops


class Schedule:
    """Times of every instruction after list scheduling, plus what the report needs."""

    def __init__(self, n: int, plan: AllocationPlan) -> None:
        self.plan = plan
        self.start = [0.0] * n  # engine or queue start
        self.end = [0.0] * n  # engine busy until (DMA: transfer complete)
        self.ready = [0.0] * n  # result usable by dependants
        self.pred = [-1] * n  # the instruction that fixed this one's start (critical path)
        # Busy time charged to the instruction: engine occupancy, or for DMA its share of the shared
        # pipe (bytes over the aggregate rate, plus the setup spread over the queues it overlaps on).
        self.busy = [0.0] * n
        self.engine = [0] * n
        self.nest = [0] * n
        self.nests: list[_NestInfo] = []
        self.dma_data: list[tuple[float, float]] = []
        self.dma_transfers = 0
        self.dma_bytes = 0
        self.spill_save = 0
        self.spill_reload = 0
        self.refetch = 0  # bytes of loads re-issued at their uses
        self.latency = 0.0

    def add_transfer(self, cost: DmaCost, data_start: float, end: float) -> None:
        """Account one booked DMA transfer (a trace instruction or a spill)."""
        self.dma_data.append((data_start, end))
        self.dma_transfers += cost.engines
        self.dma_bytes += cost.payload


def schedule(trace: Trace, hardware: HardwareProfile, costs: CostModel) -> Schedule:
    """Place every instruction of `trace` in time; see the module docstring for the rules."""
    instructions = trace.instructions
    n = len(instructions)
    last: dict[int, int] = {}
    last_write: dict[int, int] = {}
    for i, inst in enumerate(instructions):
        for acc in inst.reads:
            last[acc.tensor] = i
        for acc in inst.writes:
            last[acc.tensor] = i
            last_write[acc.tensor] = i
    memory = hardware.memory
    plan = plan_allocation(trace, memory.sbuf_usable_bytes_per_partition, memory.psum_bytes_per_partition,
                           memory.rotating_buffers)
    dropped, same_as, refetch, refetch_line = plan.dropped, plan.same_as, plan.refetch, plan.refetch_line
    reload_bytes, save_bytes, rotation = plan.reload, plan.save, plan.reuses_buffer_of
    depth = memory.stream_buffers
    streams: dict[int, list[int]] = {}  # streamed load statement (-1: spill) -> the instructions its loads fed
    saved_at: dict[int, float] = {}  # instruction -> when the spill saves after it are done

    sched = Schedule(n, plan)
    start, end, ready, pred, busy = sched.start, sched.end, sched.ready, sched.pred, sched.busy
    queues = hardware.dma.queues_per_engine
    aggregate = costs.aggregate_dma_rate
    engine_codes, nest_of = sched.engine, sched.nest
    timeline = DmaTimeline(queues, aggregate)
    lanes = [_Lane() for _ in ENGINES]
    port_shared = False  # GpSimd has used the SBUF port Vector shares with it
    tails = [costs.tail(name) for name in ENGINES]
    deps: dict[int, _TensorDeps] = {}
    full_region: dict[int, tuple[tuple[int, int], ...] | None] = {}
    tensors = trace.tensors
    nest_cache: dict[int, _NestInfo] = {}
    psum = _PsumBanks(tensors, hardware.memory)
    last_dma = -1
    latency = 0.0
    # NC-v2: Vector and GpSimd share the SBUF port, so their SBUF-touching instructions take turns;
    # without this, moving work to GpSimd would look like free parallelism on trn1.
    shared_port = {_CODE[Engine.VECTOR], _CODE[Engine.GPSIMD]} if hardware.memory.vector_gpsimd_share_sbuf else set()
    port_free, port_last = 0.0, -1
    # SPMD: one NeuronCore runs the programs of a launch one after another: nothing of a program
    # starts before everything of the programs before it has finished
    program_starts = set(trace.program_starts) - {0}
    program_floor, floor_pred = 0.0, -1

    for i, inst in enumerate(instructions):
        code = _CODE.get(inst.engine)
        if code is None:
            raise ValueError(f"instruction {i} runs on unknown engine {inst.engine!r}")
        choices = tuple(_CODE[name] for name in inst.attrs["engines"]) if inst.attrs and "engines" in inst.attrs else ()
        if choices:
            code = min(choices, key=lambda c: lanes[c].floor())  # the dependency queries start from the sooner
        engine_codes[i] = code
        nest_key = id(inst.loops)
        info = nest_cache.get(nest_key)
        if info is None:
            info = _NestInfo(len(sched.nests), tuple(loop for loop, _ in inst.loops))
            nest_cache[nest_key] = info
            sched.nests.append(info)
        nest_of[i] = info.index
        if dropped[i]:
            _skip(i, inst, sched, same_as[i], program_floor, deps, last)
            continue

        # Start from when the engine (or the soonest DMA queue) is free: the start cannot be earlier,
        # and it lets dependency queries skip every entry that finished before that.
        # `nl.zeros(..., buffer=nl.psum)` before a `+=` matmul chain is the legacy accumulation idiom:
        # the compiler folds the zeroing into the first matmul's start-of-group flag (a matmul may
        # not accumulate onto PSUM another engine initialised, fact sheet A.3), so a zero memset
        # into PSUM costs no engine time and orders only by data.
        folded = (inst.op == "memset" and code != 0 and inst.writes
                  and inst.writes[0].buffer == "psum" and (inst.attrs or {}).get("value") == 0)
        if folded:
            bound, p = 0.0, -1
        elif code == _DMA_CODE:
            bound, p = timeline.earliest()
        else:
            bound = lanes[code].floor()
            p = -1
        if i in program_starts:
            program_floor, floor_pred = latency, i - 1
        if program_floor > bound:
            bound, p = program_floor, floor_pred

        tensor_engine = code == 0
        psum_write_banks: list[int] = []
        for acc in inst.reads:
            d = deps.get(acc.tensor)
            if d is not None and d.wmax:
                bound, p = d.after_writes(acc.region, bound, p, tensor_engine)
        for acc in inst.writes:
            t = acc.tensor
            d = deps.get(t)
            if d is not None:
                if d.wmax:
                    bound, p = d.after_writes(acc.region, bound, p, tensor_engine)
                if d.rmax:
                    bound, p = d.after_reads(acc.region, bound, p)
            if acc.buffer == "psum":
                for key in psum.keys(acc):
                    psum_write_banks.append(key)
                    d = deps.get(key)
                    if d is not None:
                        if d.wmax:
                            bound, p = d.after_writes(_BANK_BOX, bound, p, tensor_engine)
                        if d.rmax:
                            bound, p = d.after_reads(_BANK_BOX, bound, p)

        if rotation[i] >= 0 and end[rotation[i]] > bound:
            bound, p = end[rotation[i]], rotation[i]  # its physical buffer frees when the tile before is dead
        if refetch[i]:
            # a load issued again at its use is a load into rotating buffers: it may start once the use
            # `stream_buffers` loads earlier has finished with its buffer
            fed = streams.setdefault(refetch_line[i], [])
            free_at = end[fed[-depth]] if len(fed) >= depth else 0.0
            fed.append(i)
            cost = costs.spill_dma(refetch[i], inst.partitions, _item_size(inst.reads))
            _, data_start, done = timeline.issue(free_at, cost, -1)
            sched.add_transfer(cost, data_start, done)
            sched.refetch += refetch[i]
            if done > bound:
                bound, p = done, last_dma
        if reload_bytes[i]:
            # The 2025 compiler issues its spill reloads ahead, into rotating buffers like any load
            # (calibration set: bmm_softmax and gqa_full reload 0.76 / 1.13 GB and still run at the
            # pace of their engines), but not before the data is saved.
            fed = streams.setdefault(-1, [])
            free_at = end[fed[-depth]] if len(fed) >= depth else 0.0
            saved = saved_at.get(plan.reload_after[i], 0.0)
            free_at = saved if saved > free_at else free_at
            fed.append(i)
            cost = costs.spill_dma(reload_bytes[i], inst.partitions, _item_size(inst.reads))
            _, data_start, done = timeline.issue(free_at, cost, -1)
            sched.add_transfer(cost, data_start, done)
            sched.spill_reload += reload_bytes[i]
            if done > bound:
                bound, p = done, last_dma

        if folded:
            s = e = r = bound
            busy[i] = 0.0
        elif code == _DMA_CODE:
            cost = costs.dma(inst)
            s, data_start, e = timeline.issue(bound, cost, i)
            if e > s + cost.standalone * (1.0 + 1e-9) + 1e-15 and last_dma >= 0:
                p = last_dma  # stretched by other transfers sharing the bandwidth
            sched.add_transfer(cost, data_start, e)
            last_dma = i
            r = e
            busy[i] = cost.work_bytes / aggregate + cost.fixed / queues
        else:
            if choices:
                code = _placed(inst, choices, bound, lanes, costs)
                engine_codes[i] = code
            lane = lanes[code]
            on_port = code in shared_port and _touches_sbuf(inst)
            if code == _GPSIMD_CODE and on_port:
                port_shared = True
            occupancy = costs.occupancy(inst, ENGINES[code])
            if on_port and port_shared:
                # Vector and GpSimd both on the SBUF port: each in its program order, taking turns
                if lane.free > bound:
                    bound, p = lane.free, lane.last
                if port_free > bound:
                    bound, p = port_free, port_last
                s = lane.append(bound, occupancy, i)
                port_free, port_last = s + occupancy, i
            else:
                s, waited = lane.place(bound, occupancy, i)
                if waited >= 0:
                    p = waited
                if on_port and s + occupancy > port_free:
                    port_free, port_last = s + occupancy, i
            busy[i] = occupancy
            e = s + occupancy
            r = e + tails[code]
        start[i] = s
        end[i] = e

        if save_bytes[i]:
            # what gave way to this instruction's blocks is saved while it runs
            cost = costs.spill_dma(save_bytes[i], inst.partitions, _item_size(inst.writes))
            _, data_start, done = timeline.issue(s, cost, -1)
            sched.add_transfer(cost, data_start, done)
            sched.spill_save += save_bytes[i]
            saved_at[i] = done
            if done > latency:
                latency = done
        ready[i] = r
        pred[i] = p
        if r > latency:
            latency = r

        for acc in inst.reads:
            t = acc.tensor
            if last_write.get(t, -1) > i:
                d = deps.get(t)
                if d is None:
                    d = deps[t] = _TensorDeps()
                d.add_read(acc.region, e, i)
            if acc.buffer == "psum":
                for key in psum.keys(acc):
                    d = deps.get(key)
                    if d is None:
                        d = deps[key] = _TensorDeps()
                    d.add_read(_BANK_BOX, e, i)
        for acc in inst.writes:
            t = acc.tensor
            if last[t] > i:
                d = deps.get(t)
                if d is None:
                    d = deps[t] = _TensorDeps()
                full = full_region.get(t, 0)
                if full == 0:
                    full = _full_region(t, tensors)
                    full_region[t] = full
                d.add_write(acc.region, r, e, tensor_engine, i, acc.region == full)
        for key in psum_write_banks:
            d = deps.get(key)
            if d is None:
                d = deps[key] = _TensorDeps()
            d.add_write(_BANK_BOX, r, e, tensor_engine, i, True)

    sched.latency = latency
    return sched


def _skip(i: int, inst: Instruction, sched: Schedule, same_as: int, floor: float, deps: dict[int, _TensorDeps],
          last: dict[int, int]) -> None:
    """An instruction the compiler does not execute: no time of its own; a repeated move's result is
    the earlier one's, so what reads it waits for that."""
    at = sched.ready[same_as] if same_as >= 0 else floor
    sched.start[i] = sched.end[i] = sched.ready[i] = at
    sched.pred[i] = same_as
    for acc in inst.writes:
        t = acc.tensor
        if last[t] > i:
            d = deps.get(t)
            if d is None:
                d = deps[t] = _TensorDeps()
            d.add_write(acc.region, at, at, False, i, False)


class _Lane:
    """One compute engine's timeline: busy until `free`, with the idle gaps it left behind.

    The compiler schedules each engine's instruction stream itself (by readiness, within the freedom
    its dependencies leave), not in the kernel's program order: an instruction whose inputs are ready
    runs in an earlier idle gap of its engine if it fits there. Calibration set (2025 compiler,
    cases.json): adamw's Vector and Scalar chains interleave across iterations (2.00 ms, Vector 90 %
    active), add_rmsnorm_matmul's Tensor engine transposes the next tile while the copy of the last
    one drains (1.22 ms against 0.98 ms of Tensor work). Only the latest gaps are kept (a finite window).
    """

    __slots__ = ("free", "gaps", "last")
    WINDOW = 8  # gaps kept: the compiler reorders within a window, not the whole kernel
    SHORTEST = 1e-7  # shorter idle stretches hold no instruction (MIN_II plus overhead is ~0.15 us)

    def __init__(self) -> None:
        self.free = 0.0
        self.last = -1
        self.gaps: list[list[float]] = []  # [start, end] of idle stretches before `free`

    def floor(self) -> float:
        """The earliest time an instruction could start here."""
        return self.gaps[0][0] if self.gaps else self.free

    def finish(self, ready: float, occupancy: float) -> float:
        for gap in self.gaps:
            start = gap[0] if gap[0] > ready else ready
            if start + occupancy <= gap[1]:
                return start + occupancy
        return (self.free if self.free > ready else ready) + occupancy

    def place(self, ready: float, occupancy: float, index: int) -> tuple[float, int]:
        """Start time of an instruction ready at `ready`, and the instruction it waited for (-1: none)."""
        gaps = self.gaps
        for k, gap in enumerate(gaps):
            start = gap[0] if gap[0] > ready else ready
            end = start + occupancy
            if end <= gap[1]:
                before, after = start - gap[0] > self.SHORTEST, gap[1] - end > self.SHORTEST
                if before and after:
                    gaps.insert(k + 1, [end, gap[1]])
                    gap[1] = start
                    if len(gaps) > self.WINDOW:
                        del gaps[0]
                elif before:
                    gap[1] = start
                elif after:
                    gap[0] = end
                else:
                    del gaps[k]
                return start, -1
        waited = self.last if self.free > ready else -1
        return self.append(ready, occupancy, index), waited

    def append(self, ready: float, occupancy: float, index: int) -> float:
        """Run after everything placed so far (program order)."""
        start = self.free if self.free > ready else ready
        if start > self.free + self.SHORTEST:
            self.gaps.append([self.free, start])
            if len(self.gaps) > self.WINDOW:
                del self.gaps[0]
        self.free = start + occupancy
        self.last = index
        return start


def _placed(inst: Instruction, choices: tuple[int, ...], ready: float, lanes: list[_Lane],
            costs: CostModel) -> int:
    """The engine the compiler gives an instruction it may place on several: the one on which it would
    finish first, its inputs being ready at `ready` (list scheduling's earliest finish time; over a
    long program it balances the engines' loads). Calibration set: silu and adamw's engine active
    times on trn1 (cases.json)."""
    return min(choices, key=lambda code: lanes[code].finish(ready, costs.occupancy(inst, ENGINES[code])))


def _item_size(accesses: tuple[Any, ...]) -> int:
    """Element width of the SBUF data an instruction spills or reloads."""
    for acc in accesses:
        if acc.buffer == "sbuf":
            return DTYPE_SIZES.get(acc.dtype, 4)
    return 4


def _full_region(tensor: int, tensors: dict[int, Any]) -> tuple[tuple[int, int], ...] | None:
    info = tensors.get(tensor)
    if info is None:
        return None
    return tuple((0, size) for size in info.shape)


class _PsumBanks:
    """PSUM bank pseudo-tensors: round-robin allocation at first touch, and the banks an access covers.

    The trace has no PSUM addresses, so each PSUM tensor gets as many consecutive banks as its
    footprint needs, in first-touch order, the way a rotating allocator would hand them out.
    """

    def __init__(self, tensors: dict[int, Any], memory: Any) -> None:
        self._tensors = tensors
        self._banks = memory.psum_banks
        self._bank_bytes = memory.psum_bank_bytes
        self._cursor = 0
        # tensor -> (bank keys, byte stride of each dim within a partition row, partition axis)
        self._layout: dict[int, tuple[tuple[int, ...], tuple[int, ...] | None, int]] = {}

    def keys(self, acc: Any) -> tuple[int, ...]:
        """Dependency keys (negative ints) of the banks holding the bytes `acc` touches."""
        layout = self._layout.get(acc.tensor)
        if layout is None:
            layout = self._allocate(acc)
        keys, strides, partition_axis = layout
        if len(keys) == 1 or strides is None:
            return keys
        lo = hi = 0
        for dim, (start, stop) in enumerate(acc.region):
            if dim != partition_axis:
                lo += start * strides[dim]
                hi += (stop - 1) * strides[dim]
        last = len(keys) - 1
        return keys[min(lo // self._bank_bytes, last):min(hi // self._bank_bytes, last) + 1]

    def _allocate(self, acc: Any) -> tuple[tuple[int, ...], tuple[int, ...] | None, int]:
        info = self._tensors.get(acc.tensor)
        strides: tuple[int, ...] | None = None
        partition_axis = 0
        size = 0
        if info is not None and info.bytes_per_partition > 0:
            size = info.bytes_per_partition
            partition_axis = max(0, info.partition_axis)
            item = DTYPE_SIZES.get(info.dtype, 4)
            stride = item
            reverse: list[int] = []
            for dim in range(len(info.shape) - 1, -1, -1):
                reverse.append(0 if dim == partition_axis else stride)
                if dim != partition_axis:
                    stride *= info.shape[dim]
            strides = tuple(reversed(reverse))
        if size <= 0:
            size = acc.nbytes // max(1, acc.partitions)
        count = max(1, min(self._banks, -(-size // self._bank_bytes)))
        keys = tuple(-1 - (self._cursor + j) % self._banks for j in range(count))
        self._cursor = (self._cursor + count) % self._banks
        layout = (keys, strides, partition_axis)
        self._layout[acc.tensor] = layout
        return layout


def _touches_sbuf(inst: Instruction) -> bool:
    return any(a.buffer == "sbuf" for a in inst.reads) or any(a.buffer == "sbuf" for a in inst.writes)
