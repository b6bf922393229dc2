"""Worker processes: one per slot, each evaluating one job at a time through the sandbox.

Trusted work (loading a reference, computing its outputs, comparing) runs in the worker, never in
the HTTP process, so a reference that hangs or crashes costs a worker, not the service. On a
Trainium host slot i owns NeuronCore i: `NEURON_RT_VISIBLE_CORES=i` in the worker and in every
sandboxed child it starts. A worker that dies is replaced; the slot reports it so the job manager
can retry the job once.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..profiling.confine import signal_name
from .evaluate import Evaluator, Outcome
from .spec import EvaluatorConfig, JobSpec

log = logging.getLogger("accelopt.service")

# command-line markers of the sandboxed children a killed worker may leave behind
_CHILD_MODULES = ("accelopt_core.profiling.sandbox", "accelopt_core.profiling.neuron")
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process adopt orphaned descendants (Linux), so the sandboxed child of a worker that
    was killed comes back to us to be stopped instead of running on unsupervised."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(keep: set[int]) -> int:
    """Stop adopted sandbox children and collect adopted zombies; `keep` are our live workers."""
    me, stopped = os.getpid(), 0
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) in keep:
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            state, ppid = fields[0], int(fields[1])
            if ppid != me:
                continue
            if state != "Z":
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    cmdline = handle.read().decode("utf-8", "replace")
                if not any(marker in cmdline for marker in _CHILD_MODULES):
                    continue
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)  # sandbox children lead their own session
                stopped += 1
            os.waitpid(pid, 0)
        except (OSError, ValueError, IndexError, ChildProcessError):
            continue
    return stopped


def _worker_main(conn: multiprocessing.connection.Connection, slot: int, config: EvaluatorConfig,
                 visible_cores: str | None) -> None:
    """Body of a worker process: evaluate jobs from `conn` one at a time, cancel on request, and
    stop (killing any sandboxed child) when the service goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the service, which stops us
    if visible_cores is not None:
        os.environ["NEURON_RT_VISIBLE_CORES"] = visible_cores
    from ..blas import single_threaded_blas

    single_threaded_blas()
    evaluator = Evaluator(config, visible_cores)
    inbox: queue.Queue[tuple[int, JobSpec]] = queue.Queue()
    state: dict[str, Any] = {"id": None, "cancel": None}
    lock = threading.Lock()

    def cancel_current() -> None:
        with lock:
            if state["cancel"] is not None:
                state["cancel"].set()

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                cancel_current()  # the service is gone: stop the sandboxed child, then ourselves
                time.sleep(0.5)
                evaluator.close()
                os._exit(0)
            if message[0] == "run":
                inbox.put((message[1], message[2]))
            elif message[0] == "cancel":
                with lock:
                    if state["id"] == message[1] and state["cancel"] is not None:
                        state["cancel"].set()

    threading.Thread(target=read, name="accelopt-worker-reader", daemon=True).start()
    while True:
        job_id, spec = inbox.get()
        cancel = threading.Event()
        with lock:
            state["id"], state["cancel"] = job_id, cancel
        outcome = evaluator.run(spec, cancel)
        with lock:
            state["id"], state["cancel"] = None, None
        try:
            conn.send(("outcome", job_id, outcome))
        except (OSError, ValueError):
            evaluator.close()
            os._exit(0)


@dataclass
class _Worker:
    process: Any
    conn: multiprocessing.connection.Connection
    started: float
    restarts: int = 0


class ProcessRunner:
    """N worker processes (spawned, so no state leaks from the service) and the protocol to use them."""

    kind = "processes"

    def __init__(self, slots: int, config: EvaluatorConfig, job_timeout: float | None = None,
                 cancel_grace: float = 10.0):
        if slots < 1:
            raise ValueError("a service needs at least one worker")
        self.slots = slots
        self.config = config
        # the sandbox bounds the kernel; this bounds the rest (reference, comparison) of a stuck worker
        self.job_timeout = job_timeout if job_timeout is not None else config.limits.longest_evaluation()
        self.cancel_grace = cancel_grace
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker | None] = [None] * slots
        self._busy: list[bool] = [False] * slots
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _visible_cores(self, slot: int) -> str | None:
        return str(slot) if self.config.backend == "neuron" else None

    def _spawn(self, slot: int, restarts: int = 0) -> _Worker:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_worker_main, name=f"accelopt-worker-{slot}",
                                        args=(child, slot, self.config, self._visible_cores(slot)), daemon=True)
        process.start()
        child.close()
        worker = _Worker(process, parent, time.time(), restarts)
        with self._lock:
            self._workers[slot] = worker
        log.info("worker %d started (pid %d)", slot, process.pid)
        return worker

    def start(self) -> None:
        for slot in range(self.slots):
            self._spawn(slot)

    def stop(self) -> None:
        for worker in self._workers:
            if worker is not None:
                with contextlib.suppress(OSError):
                    worker.conn.close()
        deadline = time.monotonic() + 2.0
        for worker in self._workers:
            if worker is not None:
                worker.process.join(max(0.0, deadline - time.monotonic()))
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join(1.0)

    def _live_pids(self) -> set[int]:
        with self._lock:
            return {w.process.pid for w in self._workers if w is not None and w.process.pid}

    def _replace(self, slot: int, reason: str) -> None:
        old = self._workers[slot]
        if old is not None:
            if old.process.is_alive():
                old.process.kill()
            old.process.join(5.0)
            with contextlib.suppress(OSError):
                old.conn.close()
        stopped = reap_orphans(self._live_pids() - ({old.process.pid} if old else set()))
        log.warning("worker %d replaced: %s%s", slot, reason,
                    f" (stopped {stopped} orphaned sandbox process(es))" if stopped else "")
        self._spawn(slot, (old.restarts + 1) if old else 0)

    @staticmethod
    def _death_reason(worker: _Worker) -> str:
        worker.process.join(1.0)
        code = worker.process.exitcode
        if code is not None and code < 0:
            return f"the worker process (pid {worker.process.pid}) was killed by signal {signal_name(-code)}"
        return f"the worker process (pid {worker.process.pid}) exited with status {code}"

    def run(self, slot: int, spec: JobSpec, cancel: threading.Event) -> Outcome:
        """Evaluate `spec` on worker `slot`; a dead worker is replaced and reported as "died"."""
        worker = self._workers[slot]
        if worker is None or not worker.process.is_alive():
            self._replace(slot, "found dead before a job")
            worker = self._workers[slot]
        assert worker is not None
        job_id = next(self._ids)
        self._busy[slot] = True
        try:
            try:
                worker.conn.send(("run", job_id, spec))
            except (OSError, ValueError):
                reason = self._death_reason(worker)
                self._replace(slot, reason)
                return Outcome("died", message=reason)
            deadline = time.monotonic() + self.job_timeout
            cancel_deadline: float | None = None
            while True:
                ready = multiprocessing.connection.wait([worker.conn, worker.process.sentinel], timeout=0.2)
                if worker.conn in ready:
                    try:
                        message = worker.conn.recv()
                    except (EOFError, OSError):
                        reason = self._death_reason(worker)
                        self._replace(slot, reason)
                        return Outcome("died", message=reason)
                    if message[0] == "outcome" and message[1] == job_id:
                        return message[2]
                    continue
                if worker.process.sentinel in ready:
                    reason = self._death_reason(worker)
                    self._replace(slot, reason)
                    return Outcome("died", message=reason)
                now = time.monotonic()
                if cancel.is_set() and cancel_deadline is None:
                    with contextlib.suppress(OSError, ValueError):
                        worker.conn.send(("cancel", job_id))
                    cancel_deadline = now + self.cancel_grace
                if cancel_deadline is not None and now > cancel_deadline:
                    self._replace(slot, "it did not stop a cancelled job in time")
                    return Outcome("cancelled", message="evaluation cancelled")
                if now > deadline:
                    self._replace(slot, f"no answer within {self.job_timeout:g} s")
                    return Outcome("timeout",
                                   message=f"the worker did not finish the job within {self.job_timeout:g} s")
        finally:
            self._busy[slot] = False

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            workers = list(self._workers)
        return [{"slot": slot, "pid": w.process.pid if w else None, "alive": bool(w and w.process.is_alive()),
                 "busy": self._busy[slot], "restarts": w.restarts if w else 0,
                 "neuron_core": self._visible_cores(slot)} for slot, w in enumerate(workers)]
