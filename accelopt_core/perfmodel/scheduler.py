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

from bisect import bisect_right
from typing import Any

from accelopt_core.hardware import HardwareProfile
from accelopt_core.nki.dtypes import DTYPE_SIZES
from accelopt_core.nki.trace import Access, Engine, Instruction, LoopNest, Op, Trace, unknown_op
from accelopt_core.perfmodel.allocator import AllocationPlan, plan_allocation, zeroing_folded
from accelopt_core.perfmodel.costs import CostModel, DmaCost
from accelopt_core.perfmodel.dma import DmaTimeline

ENGINES: tuple[str, ...] = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.DMA)
_CODE = {name: code for code, name in enumerate(ENGINES)}
_DMA_CODE = _CODE[Engine.DMA]
_GPSIMD_CODE = _CODE[Engine.GPSIMD]
_PSUM_PORT_ENGINES = (_CODE[Engine.VECTOR], _CODE[Engine.SCALAR])  # NC-v2: they take turns on PSUM
_OPS = frozenset(Op)
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
    """Earlier writes and reads of one tensor that may still delay a later access.

    A write is (region, ready, finish, by the Tensor engine, index), a read (region, finish, index);
    beside each list runs the maximum of its times so far, which lets a query stop early."""

    __slots__ = ("reads", "rmax", "wmax", "writes")

    def __init__(self) -> None:
        self.writes: list[tuple[tuple[tuple[int, int], ...], float, float, bool, int]] = []
        self.wmax: list[float] = []  # running max of the writes' ready times
        self.reads: list[tuple[tuple[tuple[int, int], ...], float, int]] = []
        self.rmax: list[float] = []

    def after_writes(self, box: tuple[tuple[int, int], ...], bound: float, pred: int,
                     tensor_reader: bool) -> tuple[float, int]:
        """Raise `bound` to when every overlapping earlier write's result is usable."""
        wmax = self.wmax
        writes = self.writes
        i = len(wmax) - 1
        while i >= 0 and wmax[i] > bound:
            write = writes[i]
            ready = write[1]
            if ready > bound and _overlaps(write[0], box):
                # back-to-back matmuls into one PSUM region accumulate near memory: no init gap
                t = write[2] if tensor_reader and write[3] else ready
                if t > bound:
                    bound = t
                    pred = write[4]
            i -= 1
        return bound, pred

    def after_reads(self, box: tuple[tuple[int, int], ...], bound: float,
                    pred: int) -> tuple[float, int]:
        """Raise `bound` to when every overlapping earlier read has finished."""
        rmax = self.rmax
        reads = self.reads
        i = len(rmax) - 1
        while i >= 0 and rmax[i] > bound:
            read = reads[i]
            if read[1] > bound and _overlaps(read[0], box):
                bound = read[1]
                pred = read[2]
            i -= 1
        return bound, pred

    def add_write(self, box: tuple[tuple[int, int], ...], ready: float, finish: float,
                  tensor: bool, index: int, covers_all: bool) -> None:
        if covers_all:
            # This write waited for every earlier access, so none of them can matter any more.
            self.writes = [(box, ready, finish, tensor, index)]
            self.wmax = [ready]
            if self.reads:
                self.reads = []
                self.rmax = []
            return
        self.writes.append((box, ready, finish, tensor, index))
        wmax = self.wmax
        wmax.append(ready if not wmax or ready > wmax[-1] else wmax[-1])

    def add_read(self, box: tuple[tuple[int, int], ...], finish: float, index: int) -> None:
        self.reads.append((box, finish, index))
        rmax = self.rmax
        rmax.append(finish if not rmax or finish > rmax[-1] else rmax[-1])


class _DepsByTensor(dict[int, _TensorDeps]):
    """Each tensor's (or PSUM bank's) dependency records; `deps[t]` starts an empty one, `deps.get(t)` does not."""

    def __missing__(self, tensor: int) -> _TensorDeps:
        deps = self[tensor] = _TensorDeps()
        return deps


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
        self.nests: list[LoopNest] = []  # every distinct loop nest, in first-seen order
        self.dma_data: list[tuple[float, float]] = []
        self.dma_transfers = 0
        self.dma_bytes = 0
        self.spill_save = 0
        self.spill_reload = 0
        self.refetch = 0  # bytes of loads re-issued at their uses
        self.compiler_busy = [0.0] * len(ENGINES)  # engine time of instructions the compiler adds (PSUM spill copies)
        self.latency = 0.0

    def add_transfer(self, cost: DmaCost, data_start: float, end: float) -> None:
        """Account one booked DMA transfer (a trace instruction or a spill)."""
        self.dma_data.append((data_start, end))
        self.dma_transfers += cost.engines
        self.dma_bytes += cost.payload


def schedule(trace: Trace, hardware: HardwareProfile, costs: CostModel) -> Schedule:
    """Place every instruction of `trace` in time; see the module docstring for the rules."""
    memory = hardware.memory
    plan = plan_allocation(trace, memory.sbuf_usable_bytes_per_partition, memory.psum_bytes_per_partition,
                           memory.rotating_buffers)
    return _ListScheduler(trace, hardware, costs, plan).run()


def _last_accesses(instructions: list[Instruction]) -> tuple[dict[int, int], dict[int, int]]:
    """Per tensor, the last instruction that touches it and the last one that writes it: an access
    after which nothing touches the tensor again constrains nobody and is not recorded."""
    last: dict[int, int] = {}
    last_write: dict[int, int] = {}
    for i, inst in enumerate(instructions):
        for acc in inst.reads:
            last[acc.tensor] = i
        for acc in inst.writes:
            last[acc.tensor] = i
            last_write[acc.tensor] = i
    return last, last_write


def _folded_memset(inst: Instruction, code: int) -> bool:
    """Whether a memset costs nothing: the zeroing of the legacy accumulation idiom (allocator.zeroing_folded)
    folds into the first matmul's start-of-group flag (a matmul may not accumulate onto PSUM another engine
    initialised, fact sheet A.3), so it costs no engine time and orders only by data."""
    return code != 0 and zeroing_folded(inst)


class _ListScheduler:
    """One pass of list scheduling: the engines' lanes, the DMA queues, what each tensor's earlier
    accesses still constrain, and the compiler's extra transfers from the allocation plan."""

    def __init__(self, trace: Trace, hardware: HardwareProfile, costs: CostModel, plan: AllocationPlan) -> None:
        self.instructions = trace.instructions
        self.tensors = trace.tensors
        self.costs = costs
        self.plan = plan
        self.sched = Schedule(len(trace.instructions), plan)
        self.last, self.last_write = _last_accesses(trace.instructions)
        memory = hardware.memory
        self.depth = memory.stream_buffers
        self.streams: dict[int, list[int]] = {}  # streamed load statement (-1: spill) -> the instructions its loads fed
        self.saved_at: dict[int, float] = {}  # instruction -> when the spill saves after it are done
        self.queues = hardware.dma.queues_per_engine
        self.aggregate = costs.aggregate_dma_rate
        self.timeline = DmaTimeline(self.queues, self.aggregate)
        self.lanes = [_Lane() for _ in ENGINES]
        self.tails = [costs.tail(name) for name in ENGINES]
        self.deps = _DepsByTensor()
        self.full_region: dict[int, tuple[tuple[int, int], ...] | None] = {}
        self.nest_cache: dict[int, int] = {}  # id of a loop nest -> its index in Schedule.nests
        self.psum = _PsumBanks(trace.tensors, memory)
        self.last_dma = -1
        # NC-v2: Vector and GpSimd share the SBUF port, so their SBUF-touching instructions take turns;
        # without this, moving work to GpSimd would look like free parallelism on trn1.
        self.shared_port = {_CODE[Engine.VECTOR], _CODE[Engine.GPSIMD]} if memory.vector_gpsimd_share_sbuf else set()
        self.sbuf_port: _Port | None = None  # booked from the first GpSimd access on (Vector's before: its last)
        self.port_free, self.port_last, self.port_start = 0.0, -1, 0.0
        # NC-v2: Vector and Scalar cannot use PSUM at the same time, so their PSUM accesses never overlap
        self.psum_port = _Port() if memory.vector_scalar_share_psum else None
        # SPMD: one NeuronCore runs the programs of a launch one after another: nothing of a program
        # starts before everything of the programs before it has finished
        self.program_starts = set(trace.program_starts) - {0}

    def run(self) -> Schedule:
        """Place the instructions in program order."""
        sched, plan, lanes, timeline = self.sched, self.plan, self.lanes, self.timeline
        dropped, same_as, rotation = plan.dropped, plan.same_as, plan.reuses_buffer_of
        refetch, reload_bytes, save_bytes = plan.refetch, plan.reload, plan.save
        start, end, ready, pred, busy, engine_codes, nest_of = (
            sched.start, sched.end, sched.ready, sched.pred, sched.busy, sched.engine, sched.nest)
        nest_cache, program_starts = self.nest_cache, self.program_starts
        latency = 0.0
        program_floor, floor_pred = 0.0, -1
        for i, inst in enumerate(self.instructions):
            code = _CODE.get(inst.engine)
            if code is None:
                raise ValueError(f"instruction {i} runs on unknown engine {inst.engine!r}")
            if inst.op not in _OPS:
                raise ValueError(f"instruction {i}: {unknown_op(inst.op)}")
            attrs = inst.attrs
            choices = tuple(_CODE[name] for name in attrs["engines"]) if attrs and "engines" in attrs else ()
            if choices:
                code = min(choices, key=lambda c: lanes[c].floor())  # the dependency queries start from the sooner
            engine_codes[i] = code
            k = nest_cache.get(id(inst.loops))
            nest_of[i] = k if k is not None else self._new_nest(inst)
            if dropped[i]:
                self._skip(i, inst, same_as[i], program_floor)
                continue

            # Start from when the engine (or the soonest DMA queue) is free: the start cannot be earlier,
            # and it lets dependency queries skip every entry that finished before that.
            folded = inst.op == Op.MEMSET and _folded_memset(inst, code)
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
            bound, p, psum_write_banks = self._after_data(inst, bound, p, tensor_engine)
            if rotation[i] >= 0 and end[rotation[i]] > bound:
                bound, p = end[rotation[i]], rotation[i]  # its physical buffer frees when the tile before is dead
            copies = plan.psum_copies.get(i)
            if copies:  # the PSUM blocks giving way leave for SBUF before this instruction takes their room
                bound = self._copy_out_of_psum(i, copies, bound)
            if refetch[i]:
                bound, p = self._refetch(i, inst, bound, p)
            if reload_bytes[i]:
                bound, p = self._reload(i, inst, bound, p)

            if folded:
                s = e = r = bound
                busy[i] = 0.0
            elif code == _DMA_CODE:
                s, e, p = self._run_dma(i, inst, bound, p)
                r = e
            else:
                s, e, p = self._run_compute(i, inst, code, choices, bound, p)
                r = e + self.tails[engine_codes[i]]
            start[i] = s
            end[i] = e
            if save_bytes[i]:
                done = self._save(i, inst, s)
                if done > latency:
                    latency = done
            ready[i] = r
            pred[i] = p
            if r > latency:
                latency = r
            self._record(i, inst, e, r, tensor_engine, psum_write_banks)
        sched.latency = latency
        return sched

    def _new_nest(self, inst: Instruction) -> int:
        """Index of a loop nest met for the first time (the report sums time per nest)."""
        nests = self.sched.nests
        self.nest_cache[id(inst.loops)] = index = len(nests)
        nests.append(inst.loops)
        return index

    def _skip(self, i: int, inst: Instruction, same_as: int, floor: float) -> None:
        """An instruction the compiler does not execute: no time of its own; a repeated move's result is
        the earlier one's, so what reads it waits for that."""
        sched = self.sched
        at = sched.ready[same_as] if same_as >= 0 else floor
        sched.start[i] = sched.end[i] = sched.ready[i] = at
        sched.pred[i] = same_as
        deps, last = self.deps, self.last
        for acc in inst.writes:
            t = acc.tensor
            if last[t] > i:
                deps[t].add_write(acc.region, at, at, False, i, False)

    def _after_data(self, inst: Instruction, bound: float, p: int,
                    tensor_engine: bool) -> tuple[float, int, list[int]]:
        """Raise the start to when what the instruction reads is written (RAW) and what it writes is no
        longer read or written by earlier ones (WAR/WAW), its PSUM banks included; also the banks it writes."""
        deps = self.deps
        for acc in inst.reads:
            d = deps.get(acc.tensor)
            if d is not None and d.wmax:
                bound, p = d.after_writes(acc.region, bound, p, tensor_engine)
        psum_write_banks: list[int] = []
        for acc in inst.writes:
            d = deps.get(acc.tensor)
            if d is not None:
                if d.wmax:
                    bound, p = d.after_writes(acc.region, bound, p, tensor_engine)
                if d.rmax:
                    bound, p = d.after_reads(acc.region, bound, p)
            if acc.buffer == "psum":
                for key in self.psum.keys(acc):
                    psum_write_banks.append(key)
                    d = deps.get(key)
                    if d is not None:
                        if d.wmax:
                            bound, p = d.after_writes(_BANK_BOX, bound, p, tensor_engine)
                        if d.rmax:
                            bound, p = d.after_reads(_BANK_BOX, bound, p)
        return bound, p, psum_write_banks

    def _fed_buffer_free(self, stream: int, i: int) -> float:
        """When a rotating buffer of a compiler stream is free for instruction i's data: once the use
        `stream_buffers` loads earlier has finished with it."""
        fed = self.streams.setdefault(stream, [])
        depth = self.depth
        room = self.plan.room.get(i)
        payload = self.plan.refetch[i] + self.plan.reload[i]
        if room is not None and payload:  # each transfer ahead needs its own buffer in the SBUF left free
            depth = min(depth, 1 + room * max(1, self.instructions[i].partitions) // payload)
        free_at = self.sched.end[fed[-depth]] if len(fed) >= depth else 0.0
        fed.append(i)
        return free_at

    def _compiler_load(self, inst: Instruction, payload: int, free_at: float) -> float:
        """Book a transfer the compiler adds in front of an instruction; when its data is there."""
        cost = self.costs.spill_dma(payload, inst.partitions, _item_size(inst.reads))
        _, data_start, done = self.timeline.issue(free_at, cost, -1)
        self.sched.add_transfer(cost, data_start, done)
        return done

    def _refetch(self, i: int, inst: Instruction, bound: float, p: int) -> tuple[float, int]:
        """A load issued again at its use is a load into rotating buffers: it may start once the use
        `stream_buffers` loads earlier has finished with its buffer."""
        plan = self.plan
        done = self._compiler_load(inst, plan.refetch[i], self._fed_buffer_free(plan.refetch_line[i], i))
        self.sched.refetch += plan.refetch[i]
        return (done, self.last_dma) if done > bound else (bound, p)

    def _reload(self, i: int, inst: Instruction, bound: float, p: int) -> tuple[float, int]:
        """The 2025 compiler issues its spill reloads ahead, into rotating buffers like any load
        (calibration set: bmm_softmax and gqa_full reload 0.76 / 1.13 GB and still run at the pace of
        their engines), but not before the data is saved."""
        plan = self.plan
        free_at = self._fed_buffer_free(-1, i)
        saved = self.saved_at.get(plan.reload_after[i], 0.0)
        done = self._compiler_load(inst, plan.reload[i], saved if saved > free_at else free_at)
        self.sched.spill_reload += plan.reload[i]
        return (done, self.last_dma) if done > bound else (bound, p)

    def _save(self, i: int, inst: Instruction, started: float) -> float:
        """What gave way to this instruction's blocks is saved while it runs (PSUM blocks are in SBUF by
        then: `_copy_out_of_psum`); when that is done."""
        sched = self.sched
        payload = self.plan.save[i]
        cost = self.costs.spill_dma(payload, inst.partitions, _item_size(inst.writes))
        _, data_start, done = self.timeline.issue(started, cost, -1)
        sched.add_transfer(cost, data_start, done)
        sched.spill_save += payload
        self.saved_at[i] = done
        return done

    def _copy_out_of_psum(self, i: int, copies: list[tuple[int, int, str]], ready: float) -> float:
        """The compiler's copies of the PSUM blocks spilled at instruction i into SBUF (a DMA moves between HBM
        and SBUF only: docs/fact-sheet.md A.6), each the tensor_copy it is on Vector or Scalar (where it finishes
        first), taking turns on PSUM like any other, from `ready` on; when the last is done (the save to HBM and
        the instruction that takes their room follow)."""
        lanes, costs = self.lanes, self.costs
        done = ready
        for partitions, elements, dtype in copies:
            copy = _psum_copy(i, partitions, elements, dtype)
            code = _placed(copy, _PSUM_PORT_ENGINES, ready, lanes, costs)
            lane = lanes[code]
            occupancy, setup = costs.occupancy(copy, ENGINES[code]), costs.setup(copy, ENGINES[code])
            if self.psum_port is not None:
                start, _ = self.psum_port.place(lane, ready, occupancy, setup, i)
            else:
                start, _ = lane.place(ready, occupancy, i, setup)
            self.sched.compiler_busy[code] += occupancy - lane.overlap
            done = max(done, start + occupancy)
        return done

    def _run_dma(self, i: int, inst: Instruction, bound: float, p: int) -> tuple[float, float, int]:
        """Book a DMA instruction on the queues; (start, end, the instruction that fixed its time)."""
        cost = self.costs.dma(inst)
        s, data_start, e = self.timeline.issue(bound, cost, i)
        if e > s + cost.standalone * (1.0 + 1e-9) + 1e-15 and self.last_dma >= 0:
            p = self.last_dma  # stretched by other transfers sharing the bandwidth
        self.sched.add_transfer(cost, data_start, e)
        self.last_dma = i
        self.sched.busy[i] = cost.work_bytes / self.aggregate + cost.fixed / self.queues
        return s, e, p

    def _run_compute(self, i: int, inst: Instruction, code: int, choices: tuple[int, ...], bound: float,
                     p: int) -> tuple[float, float, int]:
        """Place a compute instruction on its engine (the compiler's choice where it may pick one);
        (start, end of its occupancy, the instruction that fixed its time)."""
        lanes, costs = self.lanes, self.costs
        if choices:
            code = _placed(inst, choices, bound, lanes, costs)
            self.sched.engine[i] = code
        lane = lanes[code]
        on_port = code in self.shared_port and _touches(inst, "sbuf")
        if code == _GPSIMD_CODE and on_port and self.sbuf_port is None:
            self.sbuf_port = _Port()
            if self.port_last >= 0:  # Vector's latest access, which GpSimd's first cannot overlap
                self.sbuf_port.book(self.port_start, self.port_free, self.port_last)
        occupancy = costs.occupancy(inst, ENGINES[code])
        setup = costs.setup(inst, ENGINES[code])
        if on_port and self.sbuf_port is not None:
            # Vector and GpSimd both on the SBUF port: their accesses never overlap, and one waiting
            # for its inputs does not hold up the other engine's independent work
            s, waited = self.sbuf_port.place(lane, bound, occupancy, setup, i)
            if waited >= 0:
                p = waited
        elif self.psum_port is not None and code in _PSUM_PORT_ENGINES and _touches(inst, "psum"):
            s, waited = self.psum_port.place(lane, bound, occupancy, setup, i)
            if waited >= 0:
                p = waited
        else:
            s, waited = lane.place(bound, occupancy, i, setup)
            if waited >= 0:
                p = waited
            if on_port and s + occupancy > self.port_free:
                self.port_start, self.port_free, self.port_last = s + setup, s + occupancy, i
        self.sched.busy[i] = occupancy - lane.overlap  # active time is a union: the hidden setup counts once
        return s, s + occupancy, p

    def _record(self, i: int, inst: Instruction, e: float, r: float, tensor_engine: bool,
                psum_write_banks: list[int]) -> None:
        """Remember the instruction's reads (finished at `e`) and writes (usable at `r`) for the later
        accesses they constrain."""
        deps = self.deps
        last_write = self.last_write
        for acc in inst.reads:
            t = acc.tensor
            if last_write.get(t, -1) > i:
                deps[t].add_read(acc.region, e, i)
            if acc.buffer == "psum":
                for key in self.psum.keys(acc):
                    deps[key].add_read(_BANK_BOX, e, i)
        last = self.last
        for acc in inst.writes:
            t = acc.tensor
            if last[t] > i:
                full = self.full_region.get(t, 0)
                if full == 0:
                    full = self.full_region[t] = _full_region(t, self.tensors)
                deps[t].add_write(acc.region, r, e, tensor_engine, i, acc.region == full)
        for key in psum_write_banks:
            deps[key].add_write(_BANK_BOX, r, e, tensor_engine, i, True)


class _Lane:
    """One compute engine's timeline: busy until `free`, with the idle gaps it left behind.

    The compiler schedules each engine's instruction stream itself (by readiness, within the freedom
    its dependencies leave), not in the kernel's program order: an instruction whose inputs are ready
    runs in an earlier idle gap of its engine if it fits there. Calibration set (2025 compiler,
    cases.json): adamw's Vector and Scalar chains interleave across iterations (2.00 ms, Vector 90 %
    active), add_rmsnorm_matmul's Tensor engine transposes the next tile while the copy of the last
    one drains (1.22 ms against 0.98 ms of Tensor work). Only the latest gaps are kept (a finite window).

    An instruction appended at the end whose data is ready spends its static overhead (`setup`, costs.py)
    while the instruction before still streams, up to that one's streaming time: the engine issues
    back-to-back ready work at the ISA table's initiation interval and pays the overhead in full only
    after it waited. Autocomp's attention chain (shared/calibration/autocomp, trn1): 10.py runs 2,048
    Vector instructions of 128 elements (a reduce and a PSUM copy per 128 x 128 block) in 0.293 ms, 143 ns
    each, where N + the 140-cycle overhead would take 239 ns each (0.49 ms). The same holds in an idle gap:
    an instruction placed at its start, ready by then, is queued behind the instruction that ends there
    (attention 08, trn1 0.411 ms: the next exponential runs on Scalar while the PSUM copy before it in program
    order still waits for its transpose; without the overlap it does not fit the gap and the kernel is
    predicted slower than 07, which trn1 ran in 0.58-0.68 ms).
    """

    __slots__ = ("free", "gaps", "last", "last_before", "overlap", "stream")
    WINDOW = 8  # gaps kept: the compiler reorders within a window, not the whole kernel
    SHORTEST = 1e-7  # shorter idle stretches hold no instruction (MIN_II plus overhead is ~0.15 us)

    def __init__(self) -> None:
        self.free = 0.0
        self.last = self.last_before = -1
        self.stream = 0.0  # how long the instruction ending at `free` streams after its setup
        self.overlap = 0.0  # how much of the latest placed instruction overlapped the one before
        # [start, end, streaming of the instruction ending at start] of idle stretches before `free`
        self.gaps: list[list[float]] = []

    def floor(self) -> float:
        """The earliest time an instruction could start here."""
        return self.gaps[0][0] - self.gaps[0][2] if self.gaps else self.free - self.stream

    def finish(self, ready: float, occupancy: float, setup: float = 0.0) -> float:
        return self.earliest(ready, occupancy, setup) + occupancy

    def _append_start(self, ready: float, setup: float) -> float:
        """Start of an instruction run after everything placed so far: its setup may overlap the streaming
        of the instruction before."""
        return _queued_start(self.free, self.stream, ready, setup)

    def earliest(self, ready: float, occupancy: float, setup: float = 0.0) -> float:
        """Where `place` would start an instruction ready at `ready`, without placing it."""
        for gap in self.gaps:
            start = _gap_start(gap, ready, setup)
            if start + occupancy <= gap[1]:
                return start
        return self._append_start(ready, setup)

    def place(self, ready: float, occupancy: float, index: int, setup: float = 0.0) -> tuple[float, int]:
        """Start time of an instruction ready at `ready`, and the instruction it waited for (-1: none)."""
        self.overlap = 0.0
        gaps = self.gaps
        for k, gap in enumerate(gaps):
            start = _gap_start(gap, ready, setup)
            end = start + occupancy
            if end <= gap[1]:
                self.overlap = gap[0] - start if gap[0] > start else 0.0
                before, after = start - gap[0] > self.SHORTEST, gap[1] - end > self.SHORTEST
                if before and after:
                    gaps.insert(k + 1, [end, gap[1], occupancy - setup])
                    gap[1] = start
                    if len(gaps) > self.WINDOW:
                        del gaps[0]
                elif before:
                    gap[1] = start
                elif after:
                    gap[0], gap[2] = end, occupancy - setup
                else:
                    del gaps[k]
                return start, -1
        start = self.append(ready, occupancy, index, setup)
        return start, (self.last_before if start > ready else -1)

    def append(self, ready: float, occupancy: float, index: int, setup: float = 0.0) -> float:
        """Run after everything placed so far (program order)."""
        start = self._append_start(ready, setup)
        free = self.free
        if start > free + self.SHORTEST:
            self.gaps.append([free, start, self.stream])
            if len(self.gaps) > self.WINDOW:
                del self.gaps[0]
        self.overlap = free - start if free > start else 0.0
        self.free = start + occupancy
        self.stream = occupancy - setup
        self.last_before, self.last = self.last, index
        return start


def _queued_start(after: float, stream: float, ready: float, setup: float) -> float:
    """Where an instruction ready at `ready` starts behind the instruction ending at `after`: its setup spent
    while that one still streams (for at most `stream`), or once ready."""
    early = after - (setup if setup < stream else stream)
    return early if early > ready else ready


def _gap_start(gap: list[float], ready: float, setup: float) -> float:
    """Where an instruction ready at `ready` starts in an idle stretch [start, end, stream]: queued behind the
    instruction ending at its start."""
    return _queued_start(gap[0], gap[2], ready, setup)


class _Port:
    """A memory port two engines take turns on: the latest intervals it was busy, in time order.

    An instruction on either engine that uses the port starts where its own engine has room and the
    port is free for its whole occupancy; the other engine's accesses are what can delay it.
    """

    __slots__ = ("ends", "starts", "users")
    WINDOW = 64  # intervals kept, like the lanes' finite reordering window

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.users: list[int] = []

    def place(self, lane: _Lane, ready: float, occupancy: float, setup: float, index: int) -> tuple[float, int]:
        """Book the instruction on `lane` and the port (its streaming after the setup, which touches no
        memory); its start and the instruction it waited for."""
        waited = -1
        start = lane.earliest(ready, occupancy, setup)
        while True:
            clear, blocker = self._clear_from(start + setup, occupancy - setup)
            if blocker < 0:
                break
            waited = blocker
            later = lane.earliest(clear - setup, occupancy, setup)
            if later <= start:  # `clear - setup + setup` rounded a hair below `clear`: the port is clear
                break
            start = later
        if waited < 0 and start > ready and start + occupancy > lane.free:
            waited = lane.last  # after its engine's work, as `_Lane.place` says
        placed, _ = lane.place(start, occupancy, index, setup)
        self.book(placed + setup, placed + occupancy, index)
        return placed, waited

    def book(self, start: float, end: float, index: int) -> None:
        """Mark the port busy from `start` to `end` for instruction `index`."""
        k = bisect_right(self.starts, start)
        self.starts.insert(k, start)
        self.ends.insert(k, end)
        self.users.insert(k, index)
        if len(self.starts) > self.WINDOW:
            del self.starts[0], self.ends[0], self.users[0]

    def _clear_from(self, start: float, occupancy: float) -> tuple[float, int]:
        """The earliest time from `start` the port is free for `occupancy`, and the last access that
        pushed it there (-1: free at `start`)."""
        starts, ends = self.starts, self.ends
        k = bisect_right(starts, start) - 1
        if k < 0 or ends[k] <= start:
            k += 1
        blocker = -1
        while k < len(starts) and starts[k] < start + occupancy:
            start, blocker = ends[k], self.users[k]
            k += 1
        return start, blocker


def _placed(inst: Instruction, choices: tuple[int, ...], ready: float, lanes: list[_Lane],
            costs: CostModel) -> int:
    """The engine the compiler gives an instruction it may place on several: the one on which it would
    finish first, its inputs being ready at `ready` (list scheduling's earliest finish time; over a
    long program it balances the engines' loads). Calibration set: silu and adamw's engine active
    times on trn1 (cases.json)."""
    return min(choices, key=lambda code: lanes[code].finish(ready, costs.occupancy(inst, ENGINES[code]),
                                                            costs.setup(inst, ENGINES[code])))


def _psum_copy(index: int, partitions: int, elements: int, dtype: str) -> Instruction:
    """The tensor_copy of one PSUM block (`elements` per partition) into SBUF that a PSUM spill adds."""
    shape = (partitions, elements)
    nbytes = partitions * elements * DTYPE_SIZES.get(dtype, 4)
    region = ((0, partitions), (0, elements))
    run = elements * DTYPE_SIZES.get(dtype, 4)
    source = Access(tensor=-1, buffer="psum", dtype=dtype, shape=shape, region=region, nbytes=nbytes,
                    contiguous_bytes=run)
    target = Access(tensor=-1, buffer="sbuf", dtype=dtype, shape=shape, region=region, nbytes=nbytes,
                    contiguous_bytes=run)
    return Instruction(index=index, engine=Engine.VECTOR, op=Op.TENSOR_COPY, reads=(source,), writes=(target,),
                       partitions=partitions, free_elements=elements, flops=0, line=0, loops=(), dtype=dtype)


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


def _touches(inst: Instruction, buffer: str) -> bool:
    return any(a.buffer == buffer for a in inst.reads) or any(a.buffer == buffer for a in inst.writes)
