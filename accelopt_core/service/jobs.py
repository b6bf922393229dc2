"""Jobs, the bounded queue, the result cache and the slot threads that feed the runner.

A job is what a client submitted; an evaluation is the work behind it. Identical jobs (same content
hash) share one evaluation while it is queued or running and are answered from the cache after it,
so a search that proposes the same candidate twice pays once. Only evaluations occupy the queue;
when it is full a submission is refused with a hint of when to retry (back-pressure).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from .evaluate import Outcome
from .spec import JobSpec

log = logging.getLogger("accelopt.service")

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
TERMINAL = frozenset({DONE, FAILED, CANCELLED})


class Runner(Protocol):
    """Executes one evaluation on a slot: worker processes or Ray tasks."""

    kind: str
    slots: int

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def run(self, slot: int, spec: JobSpec, cancel: threading.Event) -> Outcome: ...

    def describe(self) -> list[dict[str, Any]]: ...


class QueueFullError(Exception):
    """The queue holds as many evaluations as allowed; retry after `retry_after` seconds."""

    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


class JobFinishedError(Exception):
    """A finished job cannot be cancelled."""


@dataclass(eq=False)
class Evaluation:
    key: str | None
    spec: JobSpec
    jobs: list[Job] = field(default_factory=list)
    state: str = QUEUED
    cancel: threading.Event = field(default_factory=threading.Event)
    slot: int | None = None


@dataclass(eq=False)
class Job:
    id: str
    created: float
    evaluation: Evaluation | None = None
    final: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    cached: bool = False
    attempts: int = 0
    slot: int | None = None
    started: float | None = None
    finished: float | None = None
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.final is not None:
            return self.final
        return self.evaluation.state if self.evaluation is not None else QUEUED

    def snapshot(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "result": self.result, "error": self.error,
                "cached": self.cached, "attempts": self.attempts, "slot": self.slot, "created_at": self.created,
                "started_at": self.started, "finished_at": self.finished}


class JobManager:
    """Thread-safe job store and scheduler. `start()` launches the runner and one thread per slot."""

    def __init__(self, runner: Runner, backend: str, queue_limit: int = 64, cache_size: int = 4096,
                 job_ttl: float = 3600.0, max_jobs: int = 20000, max_attempts: int = 2):
        self.runner = runner
        self.backend = backend
        self.queue_limit = queue_limit
        self.cache_size = cache_size
        self.job_ttl = job_ttl
        self.max_jobs = max_jobs
        self.max_attempts = max_attempts
        self._lock = threading.Condition()
        self._queue: collections.deque[Evaluation] = collections.deque()
        self._evaluations: dict[str, Evaluation] = {}
        self._jobs: dict[str, Job] = {}
        self._cache: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._running = 0
        self._seconds_per_evaluation = 1.0  # moving average, for Retry-After
        self._last_purge = time.monotonic()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self.counters = collections.Counter({name: 0 for name in (
            "submitted", "cache_hits", "coalesced", "evaluations", "retries", "done", "failed", "cancelled",
            "rejected")})

    # life cycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.runner.start()
        for slot in range(self.runner.slots):
            thread = threading.Thread(target=self._slot_loop, args=(slot,), name=f"accelopt-slot-{slot}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            for evaluation in list(self._queue) + list(self._evaluations.values()):
                evaluation.cancel.set()
            self._lock.notify_all()
        for thread in self._threads:
            thread.join(5.0)
        self.runner.stop()

    # client operations --------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> Job:
        """Register a job: answered from the cache, attached to an identical evaluation in flight,
        or queued. Raises QueueFullError when a new evaluation would not fit."""
        key = spec.cache_key(self.backend)
        now = time.time()
        job = Job(uuid.uuid4().hex, now)
        with self._lock:
            if self._stopping:
                raise QueueFullError(5)
            self._purge_locked()
            if key is not None and key in self._cache:
                self._cache.move_to_end(key)
                job.final, job.result, job.cached, job.finished = DONE, self._cache[key], True, now
                self.counters["cache_hits"] += 1
            elif key is not None and key in self._evaluations and not self._evaluations[key].cancel.is_set():
                evaluation = self._evaluations[key]
                job.evaluation, job.slot, job.started = evaluation, evaluation.slot, None
                evaluation.jobs.append(job)
                self.counters["coalesced"] += 1
            else:
                if len(self._queue) >= self.queue_limit:
                    self.counters["rejected"] += 1
                    raise QueueFullError(self._retry_after_locked())
                evaluation = Evaluation(key, spec, [job])
                job.evaluation = evaluation
                if key is not None:
                    self._evaluations[key] = evaluation
                self._queue.append(evaluation)
                self._lock.notify()
            self._jobs[job.id] = job
            self.counters["submitted"] += 1
            return job

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return job.snapshot() if job else None

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Cancel one job; its evaluation stops only when no other job still waits for it."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            if job.final == CANCELLED:
                return job.snapshot()
            if job.final is not None:
                raise JobFinishedError(f"job {job_id} already finished ({job.final})")
            evaluation = job.evaluation
            self._finish_job_locked(job, CANCELLED, None, "cancelled by the client")
            if evaluation is not None:
                evaluation.jobs.remove(job)
                if not evaluation.jobs:
                    if evaluation.state == QUEUED:
                        self._queue.remove(evaluation)
                        self._forget_locked(evaluation)
                    else:
                        evaluation.cancel.set()
            return job.snapshot()

    async def wait(self, job_id: str, timeout: float) -> None:
        """Return when the job is finished or after `timeout` seconds (long polling)."""
        if timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        entry = (loop, event)
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.final is not None:
                return
            job.waiters.append(entry)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                if entry in job.waiters:
                    job.waiters.remove(entry)

    def health(self) -> dict[str, Any]:
        with self._lock:
            return {"status": "stopping" if self._stopping else "ok", "backend": self.backend,
                    "executor": self.runner.kind, "workers": self.runner.slots, "queued": len(self._queue),
                    "running": self._running, "queue_limit": self.queue_limit,
                    "accepting": not self._stopping and len(self._queue) < self.queue_limit}

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self.counters, "jobs_kept": len(self._jobs), "cached_results": len(self._cache),
                    "seconds_per_evaluation": self._seconds_per_evaluation}

    # scheduling -----------------------------------------------------------------------------------

    def _retry_after_locked(self) -> int:
        waiting = len(self._queue) + self._running
        estimate = waiting / max(1, self.runner.slots) * self._seconds_per_evaluation
        return int(min(60, max(1, math.ceil(estimate))))

    def _forget_locked(self, evaluation: Evaluation) -> None:
        if evaluation.key is not None and self._evaluations.get(evaluation.key) is evaluation:
            del self._evaluations[evaluation.key]

    def _purge_locked(self) -> None:
        """Drop finished jobs past their time to live, and the oldest finished ones beyond max_jobs."""
        now = time.monotonic()
        if now - self._last_purge < 30 and len(self._jobs) < self.max_jobs:
            return
        self._last_purge = now
        cutoff = time.time() - self.job_ttl
        finished = [j for j in self._jobs.values() if j.final is not None]
        excess = len(self._jobs) - int(self.max_jobs * 0.9)
        for index, job in enumerate(finished):
            if index < excess or (job.finished or 0) < cutoff:
                del self._jobs[job.id]

    def _finish_job_locked(self, job: Job, status: str, result: dict[str, Any] | None, error: str | None) -> None:
        job.final, job.result, job.error, job.finished = status, result, error, time.time()
        self.counters[status] += 1
        for loop, event in job.waiters:
            with contextlib.suppress(RuntimeError):  # the waiting request's loop has closed
                loop.call_soon_threadsafe(event.set)
        job.waiters.clear()

    def _slot_loop(self, slot: int) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._lock.wait()
                if self._stopping:
                    return
                evaluation = self._queue.popleft()
                evaluation.state, evaluation.slot = RUNNING, slot
                self._running += 1
                started = time.time()
                for job in evaluation.jobs:
                    job.slot, job.started = slot, started
                self.counters["evaluations"] += 1
            try:
                outcome, attempts = self._execute(slot, evaluation)
            except Exception:
                log.error("slot %d failed:\n%s", slot, traceback.format_exc())
                outcome, attempts = Outcome("error", message="internal error in the service (see its log)"), 1
            self._complete(evaluation, outcome, attempts, time.time() - started)

    def _execute(self, slot: int, evaluation: Evaluation) -> tuple[Outcome, int]:
        """Run an evaluation, retrying once when the process running it died under it."""
        attempt = 0
        while True:
            attempt += 1
            with self._lock:
                for job in evaluation.jobs:
                    job.attempts = attempt
            outcome = self.runner.run(slot, evaluation.spec, evaluation.cancel)
            died = outcome.kind == "died" or outcome.child_killed
            if not died or attempt >= self.max_attempts or evaluation.cancel.is_set():
                return outcome, attempt
            with self._lock:
                self.counters["retries"] += 1
            log.warning("slot %d: retrying a job after its worker died: %s", slot,
                        outcome.message or (outcome.result or {}).get("error"))

    def _complete(self, evaluation: Evaluation, outcome: Outcome, attempts: int, seconds: float) -> None:
        with self._lock:
            self._running -= 1
            self._forget_locked(evaluation)
            self._seconds_per_evaluation = 0.8 * self._seconds_per_evaluation + 0.2 * seconds
            if outcome.kind == "result" and outcome.result is not None:
                result = outcome.result
                # a kernel's own error (it has a line) or a verdict is what any run gives; a limit of ours is not
                deterministic = ((result.get("error") is None and result.get("unchecked") is None)
                                 or result.get("error_line") is not None)
                if evaluation.key is not None and deterministic and not outcome.child_killed:
                    self._cache[evaluation.key] = result
                    while len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
                status, error = DONE, None
            elif outcome.kind == "died":
                status, result = FAILED, None
                error = (f"the worker process running this job died {attempts} time(s); giving up "
                         f"(last: {outcome.message})")
            elif outcome.kind == "cancelled":
                status, result, error = CANCELLED, None, outcome.message
            else:
                status, result, error = FAILED, None, outcome.message or "the evaluation failed"
            for job in list(evaluation.jobs):
                job.attempts = attempts
                self._finish_job_locked(job, status, result, error)
            evaluation.jobs.clear()
