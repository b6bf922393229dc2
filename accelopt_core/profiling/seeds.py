"""A large check's seeds, checked side by side in worker processes of the trusted side.

A check at full size replays the kernel's tape numerically once per seed, each replay tens of seconds of
single-threaded Python and NumPy, and the reference's outputs on each seed's inputs beside it. One
process does one at a time (the GIL); so where the inputs are large, a check starts one worker process
per core (as many as memory allows), and each worker checks whole seeds: it draws the seed's inputs from
the reference, replays the tape numerically on them, computes the reference's outputs and compares.
Meanwhile the profiler replays the tape trace-only for timing; that replay says when each block of a
large block tensor is live, which the workers wait for before their first replay (nki/blocks.py).

The workers are trusted code run with the same Python (`python -m accelopt_core.profiling.seed_worker`): they
replay the tape with this simulator, as the profiler would in its own process, and run the user's own
reference. The kernel's code never runs in them. They talk to the profiler over their standard input and
output, in pickles: the job and the tape first, then one seed at a time until told to stop.

A worker that ends a check in order waits for the next one (IDLE_SECONDS at most): its memory is warm. On
virtual machines that hand freed memory back to their host, a fresh process's first seed pays seconds per
gigabyte in page faults (gqa_full: its first seed 35 s of replay and 29 s of reference, the next ones 21 s
and 4 s), and a search checks one kernel after another.
"""

from __future__ import annotations

import atexit
import gc
import json
import math
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..blas import single_threaded_blas
from ..nki import NkiError, TensorSpec
from ..nki.blocks import BlockLiveness
from ..nki.replay import ReplayLimitError, ReplayLimits, replay
from ..nki.tape import TapeError, TapeReader
from ..nki.tensor import BufferPool
from ..nki.trace import collector_paused
from ..tasks import TaskError
from ..tasks.check import compare
from .sandbox import CANCELLED
from .verdict import shape_drift

LARGE_INPUTS = 32 << 20  # bytes of a check's inputs from which its seeds are worth processes of their own
WORKER_BYTES_PER_INPUT_BYTE = 8  # a worker holds the inputs, the replay's copies, its tensors, the reference's
STOP = None
# A worker's C heap keeps what it frees, for its next seed: fresh memory costs page faults, seconds per
# gigabyte on virtual machines that hand freed memory back to their host (gqa_full's check 199 -> 163 s)
RETAIN = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776"
IDLE_SECONDS = 120.0  # a worker left waiting this long for another check ends, giving its memory back


@dataclass(frozen=True)
class SeedJob:
    """What every worker of one check needs: the task, how to replay, and the shapes its tape was recorded at."""

    task: Any  # a TaskRef (picklable; loaded in the worker)
    specs: tuple[TensorSpec, ...]
    rtol: float
    hardware: str
    kernel_file: str
    memory_bytes: int


@dataclass
class SeedVerdict:
    """One seed's check, or why it could not be made. `kind`: "checked", "kernel" (the kernel's own error
    at `line`), "tape" (the trace does not replay), "limit" (the replay ran out of the trusted side's
    `resource`, "seconds" or "memory"), "drift" (the reference's shapes changed) or "reference" (the
    reference failed)."""

    index: int
    kind: str
    rel_l2_error: float = 0.0
    max_abs_error: float = 0.0
    problem: str | None = None
    line: int | None = None
    seconds: float = 0.0
    resource: str | None = None


def worker_count(specs: Sequence[TensorSpec], seeds: int) -> int:
    """How many workers a check at these input shapes gets: none (checked in the profiler's own process)
    for small inputs or one seed, else one per core, as many as the available memory holds."""
    inputs = sum(math.prod(s.shape) * s.dtype.itemsize for s in specs)
    if inputs < LARGE_INPUTS or seeds < 2:
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    # an idle worker's memory is counted as taken, but it is the memory that worker will check with
    fitting = _available_memory() // (WORKER_BYTES_PER_INPUT_BYTE * inputs + (1 << 30)) + len(_idle)
    count = min(cores, seeds, fitting)
    return count if count >= 2 else 0


def _available_memory() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class SeedWorkers:
    """The workers of one check. Made, it hands each the job, the tape and a first seed (they parse and draw
    while the profiler replays for timing), `begin` gives them the blocks' liveness, `verdicts` waits for
    every seed's (a failed seed stops new ones being handed out), `close` keeps those told to stop for the
    next check and ends the others whatever their state."""

    def __init__(self, count: int, job: SeedJob, tape: dict[str, Any], seeds: Sequence[int], seconds: float):
        self.seeds = list(seeds)
        self.seconds_left = seconds
        self._next = 0
        self._lock = threading.Lock()
        self._failed = False
        self.verdicts_by_index: dict[int, SeedVerdict] = {}
        self.died: str | None = None
        self._stopped: set[int] = set()  # the workers told to stop after a seed's verdict: ready for another check
        text = json.dumps(tape, separators=(",", ":")).encode("utf-8")
        self.processes = [_take_worker() for _ in range(count)]
        for process in self.processes:
            _send(process, job)
            _send(process, text)
            _send(process, self._assignment())

    def _assignment(self) -> tuple[int, int, float] | None:
        with self._lock:
            if self._failed or self._next >= len(self.seeds):
                return STOP
            index = self._next
            self._next += 1
            return index, self.seeds[index], max(0.0, self.seconds_left)

    def begin(self, liveness: BlockLiveness | None) -> None:
        for process in self.processes:
            _send(process, liveness)

    def verdicts(self, cancel: threading.Event | None) -> list[SeedVerdict]:
        """The verdicts in seed order: every seed's, or, once one fails, those of the seeds already handed out
        (the profiler reports the first failure in seed order); `died` says why any are missing."""
        threads = [threading.Thread(target=self._serve, args=(p,), daemon=True) for p in self.processes]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
                if cancel is not None and cancel.is_set() and self.died != CANCELLED:
                    with self._lock:
                        self.died, self._failed = CANCELLED, True
                    self.close()
        return [self.verdicts_by_index[i] for i in sorted(self.verdicts_by_index)]

    def _serve(self, process: subprocess.Popen[bytes]) -> None:
        try:
            while True:
                verdict = pickle.load(process.stdout)  # type: ignore[arg-type]
                with self._lock:
                    self.verdicts_by_index[verdict.index] = verdict
                    self.seconds_left -= verdict.seconds
                    if verdict.kind != "checked" or verdict.problem:
                        self._failed = True
                assignment = self._assignment()
                _send(process, assignment)
                if assignment is STOP:
                    with self._lock:
                        self._stopped.add(process.pid)
                    break
        except Exception:  # whatever ended the conversation (the worker died, or answered nonsense)
            try:
                status: int | None = process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                status = None
            with self._lock:
                self._failed = True
                if self.died is None:
                    self.died = f"a check worker ended unexpectedly (exit status {status})"

    def close(self) -> None:
        for process in self.processes:
            if process.pid in self._stopped and self.died is None and process.poll() is None:
                _keep_worker(process)
            else:
                _end(process)


_idle: list[tuple[subprocess.Popen[bytes], threading.Timer]] = []  # workers waiting for a check, newest last
_idle_lock = threading.Lock()


def _take_worker() -> subprocess.Popen[bytes]:
    """A worker waiting for a check (the one that waited least), else a new one."""
    while True:
        with _idle_lock:
            if not _idle:
                break
            process, timer = _idle.pop()
        timer.cancel()
        if process.poll() is None:
            return process
        _end(process)
    return _start_worker()


def _keep_worker(process: subprocess.Popen[bytes]) -> None:
    """Keep a worker that ended its check in order for the next one, for IDLE_SECONDS."""
    timer = threading.Timer(IDLE_SECONDS, _retire, args=(process,))
    timer.daemon = True
    with _idle_lock:
        _idle.append((process, timer))
    timer.start()


def _retire(process: subprocess.Popen[bytes]) -> None:
    with _idle_lock:
        kept = [entry for entry in _idle if entry[0] is process]
        for entry in kept:
            _idle.remove(entry)
    if kept:
        _end(process)


def end_idle_workers() -> None:
    """End every worker waiting for a check (at exit, and where a caller wants the memory back now)."""
    with _idle_lock:
        idle = list(_idle)
        _idle.clear()
    for process, timer in idle:
        timer.cancel()
        _end(process)


atexit.register(end_idle_workers)


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


def _start_worker() -> subprocess.Popen[bytes]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    env["GLIBC_TUNABLES"] = ":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), RETAIN]))
    return subprocess.Popen([sys.executable, "-m", "accelopt_core.profiling.seed_worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)


def _send(process: subprocess.Popen[bytes], message: Any) -> None:
    try:
        pickle.dump(message, process.stdin, protocol=pickle.HIGHEST_PROTOCOL)  # type: ignore[arg-type]
        process.stdin.flush()  # type: ignore[union-attr]
    except (BrokenPipeError, OSError):
        pass  # the worker has ended: its reader says so


# --- the worker's side ----------------------------------------------------------------------------


def _check_seed(index: int, seconds: float, job: SeedJob, reader: Any, pool: Any, liveness: BlockLiveness | None,
                case: Any) -> SeedVerdict:
    """Replay the tape on one seed's inputs and compare with the reference's outputs on them."""
    inputs = case.inputs
    drift = shape_drift("this seed", inputs, job.specs)
    if drift:
        return SeedVerdict(index, "drift", problem=drift)
    started = time.monotonic()
    try:
        # the reference runs after the replay: the replay may read the inputs where they are (no copy)
        replayed = replay(reader, inputs, job.hardware, numeric=True, kernel_file=job.kernel_file,
                          limits=ReplayLimits(job.memory_bytes, seconds), recycled=pool, liveness=liveness,
                          borrow_inputs=True)
    except NkiError as exc:
        return SeedVerdict(index, "kernel", problem=str(exc), line=exc.line, seconds=time.monotonic() - started)
    except TapeError as exc:
        return SeedVerdict(index, "tape", problem=str(exc), seconds=time.monotonic() - started)
    except ReplayLimitError as exc:
        return SeedVerdict(index, "limit", problem=str(exc), seconds=time.monotonic() - started, resource=exc.resource)
    spent = time.monotonic() - started
    outputs = [o for o in replayed.outputs if o is not None]
    del replayed
    rel, abs_err, problem = compare(case.convert(outputs), case.reference(), job.rtol)
    return SeedVerdict(index, "checked", float(rel), float(abs_err), problem, seconds=spent)


def main() -> None:
    """Check one job after another until the profiler closes the pipe (or ends the worker)."""
    single_threaded_blas()
    inbox, outbox = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # what the reference prints must not garble the answers
    while True:
        try:
            job: SeedJob = pickle.load(inbox)
        except EOFError:
            return
        _check_job(job, inbox, outbox)
        # what the check built while the collector was paused went to the oldest generation, which is
        # rarely collected: its reference cycles would keep each check's arrays, gigabytes per check
        gc.collect()


def _check_job(job: SeedJob, inbox: Any, outbox: Any) -> None:
    """One check's seeds, as the profiler hands them out, until it says stop."""
    with collector_paused():
        reader = TapeReader(json.loads(pickle.load(inbox)))
        reader.subscripts = {}  # decoded once for all the seeds this worker checks
        task = job.task.load()
        pool = BufferPool()
        assignment = pickle.load(inbox)
        early = _draw(task, assignment)  # while the profiler replays for timing
        liveness = pickle.load(inbox)
        while assignment is not STOP:
            index, seed, seconds = assignment
            try:
                case = early if early is not None else task.make_case(seed)
                verdict = _check_seed(index, seconds, job, reader, pool, liveness, case)
            except Exception as exc:  # drawing the inputs or running the reference: the user's code
                said = str(exc) if isinstance(exc, TaskError) else f"{type(exc).__name__}: {exc}"  # file:line
                verdict = SeedVerdict(index, "reference", problem=said)
            early = case = None
            pickle.dump(verdict, outbox, protocol=pickle.HIGHEST_PROTOCOL)
            outbox.flush()
            assignment = pickle.load(inbox)


def _draw(task: Any, assignment: tuple[int, int, float] | None) -> Any:
    """The assigned seed's case, drawn ahead; None when there is none or drawing fails (the check draws
    again, and reports what failed)."""
    if assignment is STOP:
        return None
    try:
        return task.make_case(assignment[1])
    except Exception:
        return None

