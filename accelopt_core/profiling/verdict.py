"""The trusted side's own evidence about a kernel: its recorded traces replayed here, numerically on
the trusted side's inputs for the check and trace-only for timing, the replay's instruction list
priced by the performance model, and the guards' facts counted on that list.

The kernel's process only recorded its traces (measure.py). Which runs it recorded is decided here
(`plan_runs`): one per distinct set of input shapes of the check (the seeds of a check share their
shapes, so one trace serves them all: its replay on each seed's inputs is the check), and one for the
timed shapes unless the check already ran at them. When the check runs at the timed size, the trace
timed is the first check's replay, or, where the check holds large block tensors block by block, the
trace-only replay of the same tape that said when each block is live (the instructions every numeric
replay of it records again): the run that is timed is a run that is checked.

Data-dependent behaviour needs no trust either: indirect DMA records the index tile as an operand,
so the replay reads the indices the replayed tile holds on the trusted side's inputs; loops are
unrolled into the trace by the kernel's Python code, and their bounds are Python values, so they
cannot depend on data the kernel never saw (dynamic_range's bounds are integers too).
"""

from __future__ import annotations

import ctypes
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..hardware import load_hardware
from ..nki import RunResult, TensorSpec, Trace
from ..nki.blocks import BlockLiveness
from ..nki.replay import ReplayLimitError, ReplayLimits, declares_block_tensors, replay
from ..nki.runner import Launch, storage_root
from ..nki.tape import TapeError, TapeReader
from ..nki.tensor import BufferPool
from ..perfmodel import estimate
from ..tasks import Case
from .handback import ParseBudget, TapeFollower
from .measure import Run

T = TypeVar("T")


@dataclass(frozen=True)
class RunPlan:
    """The runs a kernel is recorded at, the run of each check case, and the run that is timed."""

    runs: tuple[Run, ...]
    case_runs: tuple[int, ...]
    timing_run: int


def plan_runs(case_specs: Sequence[Sequence[TensorSpec]], check_launch: Launch, timing_specs: Sequence[TensorSpec],
              timing_launch: Launch) -> RunPlan:
    """One run per distinct (shapes, launch) among the check cases and the timing (TensorSpec keeps the
    values of 0-d inputs, so cases whose scalars differ get runs of their own)."""
    runs: list[Run] = []

    def run_of(run: Run) -> int:
        if run not in runs:
            runs.append(run)
        return runs.index(run)

    case_runs = tuple(run_of(Run(tuple(specs), check_launch)) for specs in case_specs)
    timing_run = run_of(Run(tuple(timing_specs), timing_launch))
    return RunPlan(tuple(runs), case_runs, timing_run)


class ShapeDriftError(Exception):
    """A reference drew inputs of other shapes for one seed than for another of the same size."""


def shape_drift(which: str, inputs: Sequence[np.ndarray], planned: Sequence[TensorSpec]) -> str | None:
    """Why a case's inputs are not those its run was recorded at (the reference's doing), or None."""
    drawn = [TensorSpec.of(a) for a in inputs]
    if drawn == list(planned):
        return None
    return (f"the reference's inputs for {which} are {_shapes(drawn)}, not the {_shapes(planned)} it gave for the "
            "timed size; a check needs one set of input shapes per size")


def _shapes(specs: Iterable[TensorSpec]) -> str:
    return ", ".join(f"{s.dtype}{list(s.shape)}" for s in specs)


class Replays:
    """Replays of a kernel's recorded traces, within one budget of time and memory for all of them. Only
    the replays spend the time budget: the trusted side's own work between them (the reference's outputs
    at full size, the comparison) does not, so a large kernel is not failed for the reference's cost."""

    def __init__(self, tapes: Sequence[dict[str, Any]], plan: RunPlan, hardware: str, kernel_file: str,
                 seconds: float, memory_bytes: int, timed: RunResult | None = None):
        if len(tapes) != len(plan.runs):
            raise TapeError(f"{len(tapes)} traces for {len(plan.runs)} runs")
        self.readers = [TapeReader(tape) for tape in tapes]
        # a run checked numerically whose tape declares large block tensors is first replayed trace-only, to
        # learn when each block is live: its numeric replays then hold those block by block (nki/blocks.py)
        self.by_block = {run for run in set(plan.case_runs) if declares_block_tensors(self.readers[run])}
        self.liveness: dict[int, BlockLiveness | None] = {}
        for run, reader in enumerate(self.readers):
            replays = (plan.case_runs.count(run) + (run == plan.timing_run and run not in plan.case_runs)
                       + (run in self.by_block))
            if replays > 1:
                reader.subscripts = {}  # its replays decode each tile reference once
        self.recycled: BufferPool | None = BufferPool()  # the tensors' arrays, from one case's replay to the next
        self.plan = plan
        self.hardware = hardware
        self.kernel_file = kernel_file
        self.seconds_left = seconds
        self.memory_bytes = memory_bytes
        self._timed = timed  # the timed run's trace-only replay, when it was made while the child recorded

    def _replay(self, run: int, inputs: Sequence[Any], numeric: bool) -> RunResult:
        if numeric and run in self.by_block and run not in self.liveness:
            learned = (self._timed if run == self.plan.timing_run and self._timed is not None
                       else self._replay(run, self.plan.runs[run].specs, numeric=False))
            self.liveness_of(run, learned)
            if run == self.plan.timing_run and self._timed is None:
                self._timed = learned  # the trace every numeric replay of this tape records again
        started = time.monotonic()
        try:
            return replay(self.readers[run], inputs, self.hardware, numeric=numeric, kernel_file=self.kernel_file,
                          limits=ReplayLimits(self.memory_bytes, max(0.0, self.seconds_left)), recycled=self.recycled,
                          liveness=self.liveness.get(run) if numeric else None)
        finally:
            self.seconds_left -= time.monotonic() - started

    def outputs(self, cases: Sequence[Future[Case]]) -> Iterator[list[np.ndarray]]:
        """Each case's outputs as the replay of its run's trace on the case's inputs computes them, one
        case at a time (the replay of the timed run is kept as the timing). A case whose inputs are not
        those its run was recorded at is the reference's fault, not the trace's: `ShapeDriftError`."""
        for index, future in enumerate(cases):
            run = self.plan.case_runs[index]
            inputs = future.result().inputs
            planned = self.plan.runs[run].specs
            drift = shape_drift(f"check case {index + 1}", inputs, planned)
            if drift:
                raise ShapeDriftError(drift)
            replayed = self._replay(run, inputs, numeric=True)
            outputs = [o for o in replayed.outputs if o is not None]
            replayed.outputs = []  # outputs of large tasks are gigabytes: keep at most one case in memory
            if self._timed is None and run == self.plan.timing_run:
                self._timed = replayed
            yield outputs

    def liveness_of(self, run: int, traced: RunResult) -> BlockLiveness | None:
        """The liveness of a run's large block tensors, from a trace-only replay of it (None: it has none)."""
        if run in self.by_block and run not in self.liveness:
            self.liveness[run] = BlockLiveness.of(traced.trace)
        return self.liveness.get(run)

    def timed(self, renewed: float | None = None) -> RunResult:
        """The run that is timed: a checked replay at the timed size, else a trace-only replay of it, with
        `renewed` seconds of its own when given (a check that ran out of the budget leaves it none)."""
        self.recycled = None  # the checks are over: their arrays go
        if self._timed is None:
            if renewed is not None:
                self.seconds_left = renewed
            specs = self.plan.runs[self.plan.timing_run].specs
            self._timed = self._replay(self.plan.timing_run, specs, numeric=False)
        return self._timed


class UnfinishedTapeError(TapeError):
    """The child ended before the tape being followed was whole (its own result says why, if it knows)."""


def replay_while_recorded(folder: str, run: int, specs: Sequence[TensorSpec], recorded: Future[Any], hardware: str,
                          kernel_file: str, seconds: float, budget: ParseBudget | None = None
                          ) -> tuple[RunResult, list[Any]]:
    """The trace-only replay of run `run`'s tape, made while the child records it (each chunk as it is
    written: the replay ends about when the recording does, instead of starting then), and the tape's
    chunks. `recorded` is the child's run (done once it exited); the chunks' parsed size is charged to
    `budget`."""
    follower = TapeFollower(folder, f"tape-{run}.stream", budget, time.monotonic() + seconds)
    last = False

    def next_chunks() -> list[Any]:
        nonlocal last
        while True:
            ended = recorded.done()  # read before polling: whatever an ended child wrote, the poll sees
            chunks = follower.poll()
            if chunks:
                last = any(isinstance(chunk, dict) and "drops" in chunk for chunk in chunks)
                return chunks
            if ended:
                raise UnfinishedTapeError("ends before its last chunk")
            time.sleep(0.005)

    def more() -> bool:
        if last:
            return False
        for chunk in next_chunks():
            reader.extend(chunk)
        return True

    first, *rest = next_chunks()
    reader = TapeReader(first)
    for chunk in rest:
        reader.extend(chunk)
    reader.more = more
    replayed = replay(reader, specs, hardware, numeric=False, kernel_file=kernel_file,
                      limits=ReplayLimits(seconds=seconds))
    return replayed, follower.chunks


def timing_report(run: RunResult, hardware: str, seconds: float = math.inf) -> dict[str, Any]:
    """The performance model's report on a replayed trace, with what it says about SPMD launches, within
    what is left of the kernel's time limit (`within_seconds`)."""

    def model() -> dict[str, Any]:
        report = estimate(run.trace, load_hardware(hardware)).to_dict()
        if run.trace.launches:
            report["spmd"] = spmd_summary(run.trace)
        return report

    return within_seconds(seconds, "the performance model", model)


class _OutOfTimeError(BaseException):
    """Raised inside a stage's thread once it has run past its time (see `within_seconds`); a
    BaseException, so that no `except Exception` in the stage's code swallows it and runs on."""


def within_seconds(seconds: float, what: str, work: Callable[[], T]) -> T:
    """`work()`, run on a thread of its own that is stopped once `seconds` have passed: then a
    ReplayLimitError at once (the trusted side's own stage ran over the kernel's time limit: our limit, not
    the kernel's fault). The thread stops at its next Python instruction, by an exception raised in it
    (PyThreadState_SetAsyncExc): the trusted side's own code is bounded without a clock check in every
    loop of it."""
    if math.isinf(seconds):
        return work()
    lock = threading.Lock()
    outcome: list[tuple[bool, Any]] = []  # (finished, its value) or (False, what it raised)

    def run() -> None:
        try:
            try:
                ended: tuple[bool, Any] = (True, work())
            except Exception as exc:  # handed to the waiting thread, which raises it
                ended = (False, exc)
            with lock:
                if not outcome:
                    outcome.append(ended)
        except _OutOfTimeError:  # given up on: its outcome no longer matters
            return

    thread = threading.Thread(target=run, name="accelopt-stage", daemon=True)
    thread.start()
    thread.join(max(0.0, seconds))
    with lock:
        if not outcome:
            stop = ctypes.py_object(_OutOfTimeError)
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident or 0), stop)
            raise ReplayLimitError(f"{what} did not finish within the kernel's time limit "
                                   f"({max(0.0, seconds):.3g} s were left of it)")
        finished, value = outcome[0]
    if not finished:
        raise value
    return value


def trace_facts(run: RunResult) -> dict[str, Any]:
    """Counts the guards compare with a task's analytic minimum, and misuse the trace reveals."""
    summary = run.trace.summary()
    return {
        "instruction_count": summary["instruction_count"],
        "hardware_flops": summary["hardware_flops"],
        "transpose_flops": summary["transpose_flops"],
        "hbm_read_bytes": summary["hbm_read_bytes"],
        "hbm_write_bytes": summary["hbm_write_bytes"],
        "returned_input": run.returned_input,
        "uninitialized_read": first_uninitialized_read(run.trace, run.input_ids),
    }


def first_uninitialized_read(trace: Trace, input_ids: set[int]) -> int | None:
    """Line of the first read of a kernel-allocated HBM tensor (e.g. its own output) before any write;
    host data (constants, nl.full in HBM) is a write. Reshaped views count as the tensor they view."""
    written = {storage_root(trace, tensor) for tensor in trace.host_written}
    for inst in trace.instructions:
        for access in inst.reads:
            root = storage_root(trace, access.tensor)
            if (access.buffer == "hbm" and root not in input_ids and root not in written
                    and root in trace.tensors):
                return inst.line
        for access in inst.writes:
            written.add(storage_root(trace, access.tensor))
    return None


def spmd_summary(trace: Trace) -> dict[str, Any]:
    """What the profile says about SPMD launches: their grids and how the programs were scheduled."""
    programs = len(trace.program_starts)
    return {"grids": [list(grid) for grid in trace.launches], "programs": programs,
            "schedule": f"{programs} SPMD programs run one after another on one NeuronCore"}
