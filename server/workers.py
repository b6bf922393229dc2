"""The server's side of its worker processes: a lane is one worker process running one job at a time
from a priority queue. Profiles and searches get separate lanes, so a long search never delays the
lens of a file just opened.

A job that is cancelled is told to stop (its sandboxed kernel dies within a quarter of a second); a
worker that does not answer is terminated, then killed, and a fresh one starts for the next job. A
worker whose memory grew past a limit is replaced between jobs, so the server's footprint stays flat.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accelopt_core.editor_api import Message, message_from_dict, worker_environment

from .worker import HEADER, encode_frame

log = logging.getLogger(__name__)

CANCEL_GRACE_S = 5.0  # after a cancel message, how long a worker may take to report
TERM_GRACE_S = 3.0  # after SIGTERM, before SIGKILL
_ids = itertools.count(1)


class WorkerCrashedError(Exception):
    """The worker process died (or was killed) while running the job."""


class JobTimeoutError(Exception):
    """The job ran past its time limit; its worker was replaced."""

    @classmethod
    def of(cls, job: WorkerJob) -> JobTimeoutError:
        return cls(f"{job.request.kind} took longer than {job.timeout:g} s; worker restarted")


@dataclass(eq=False)
class WorkerJob:
    """One request to a worker. Await `future` for its reply; cancelling the future cancels the job."""

    request: Message
    priority: int = 0
    timeout: float = 3600.0
    on_event: Callable[[Any], None] | None = None
    id: int = field(default_factory=lambda: next(_ids))
    state: str = "queued"  # queued, running, finished
    timed_out: bool = False
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    finished: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def _child_environment() -> dict[str, str]:
    """The worker must import this `server` package even when the editor started us from elsewhere."""
    env = worker_environment(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class Lane:
    """One worker process and its queue."""

    def __init__(self, name: str, max_rss_mb: float = 2048.0):
        self.name = name
        self.max_rss_mb = max_rss_mb
        self.process: asyncio.subprocess.Process | None = None
        self.current: WorkerJob | None = None
        self.stats = {"started": 0, "finished": 0, "cancelled": 0, "crashed": 0, "workers": 0}
        self.worker_rss_mb = 0.0
        self._queue: list[tuple[int, int, WorkerJob]] = []
        self._wake = asyncio.Event()
        self._closed = False
        self._stderr: deque[str] = deque(maxlen=30)
        self._runner: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None
        self._escalation: asyncio.Task[None] | None = None

    # --- public -----------------------------------------------------------------------------------
    def submit(self, request: Message, priority: int = 0, timeout: float = 3600.0,
               on_event: Callable[[Any], None] | None = None) -> WorkerJob:
        """Queue `request`; its job's future resolves to the worker's reply (a Message)."""
        job = WorkerJob(request, priority, timeout, on_event)
        job.future.add_done_callback(lambda fut: self.cancel(job) if fut.cancelled() else None)
        heapq.heappush(self._queue, (priority, job.id, job))
        self._ensure_runner()
        self._wake.set()
        return job

    def cancel(self, job: WorkerJob) -> None:
        """Drop a queued job; ask a running one to stop, escalating if the worker does not answer."""
        if job.state == "finished":
            return
        if not job.future.done():
            job.future.cancel()
        if job.state == "queued":
            job.state = "finished"
            self.stats["cancelled"] += 1
            if not job.finished.done():
                job.finished.set_result(None)
            return
        if job is self.current and self.process is not None and self._escalation is None:
            self.stats["cancelled"] += 1
            self._send({"op": "cancel", "id": job.id})
            self._escalation = asyncio.ensure_future(self._escalate(job, CANCEL_GRACE_S))

    def stop(self, job: WorkerJob, grace: float = CANCEL_GRACE_S) -> None:
        """Ask a running job to wrap up and still deliver its value (a search returns what it found)."""
        if job.state == "queued":
            self.cancel(job)
        elif job is self.current and self.process is not None and self._escalation is None:
            self._send({"op": "cancel", "id": job.id})
            self._escalation = asyncio.ensure_future(self._escalate(job, grace))

    @property
    def queued(self) -> int:
        return sum(1 for _, _, job in self._queue if job.state == "queued")

    @property
    def running(self) -> int:
        return 1 if self.current is not None else 0

    async def warm(self) -> None:
        """Start the worker ahead of the first job (imports take a few hundred milliseconds)."""
        with contextlib.suppress(Exception):
            await self._ensure_process()

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        for _, _, job in self._queue:
            self.cancel(job)
        if self.current is not None:
            self.cancel(self.current)
        await self._stop_process(graceful=True)
        if self._runner is not None:
            self._runner.cancel()

    # --- the runner -------------------------------------------------------------------------------
    def _ensure_runner(self) -> None:
        if self._runner is None or self._runner.done():
            self._runner = asyncio.ensure_future(self._run())

    async def _next(self) -> WorkerJob | None:
        while not self._closed:
            while self._queue:
                _, _, job = heapq.heappop(self._queue)
                if job.state == "queued":
                    return job
            self._wake.clear()
            await self._wake.wait()
        return None

    async def _run(self) -> None:
        while True:
            job = await self._next()
            if job is None:
                return
            try:
                await self._execute(job)
            except Exception as exc:  # never let one job stop the lane
                log.exception("lane %s: job %s failed", self.name, job.id)
                self._finish(job, error=exc)

    async def _execute(self, job: WorkerJob) -> None:
        try:
            await self._ensure_process()
        except Exception as exc:
            self._finish(job, error=WorkerCrashedError(f"cannot start a worker process: {exc}"))
            return
        if job.state != "queued":  # cancelled while the worker was starting
            return
        try:
            frame = encode_frame({"op": "run", "id": job.id, "request": job.request.to_dict()})
        except Exception as exc:  # a payload that cannot be sent must fail its job, never leave it waiting
            self._finish(job, error=exc)
            return
        job.state = "running"
        self.current = job
        self.stats["started"] += 1
        self._write(frame)
        try:
            await asyncio.wait_for(asyncio.shield(job.finished), timeout=job.timeout)
        except TimeoutError:
            job.timed_out = True
            await self._stop_process(graceful=False)
            self._finish(job, error=JobTimeoutError.of(job))
        finally:
            self.current = None
            if self._escalation is not None:
                self._escalation.cancel()
                self._escalation = None
        if self.worker_rss_mb > self.max_rss_mb:
            log.info("lane %s: worker uses %.0f MB, replacing it", self.name, self.worker_rss_mb)
            await self._stop_process(graceful=True)

    def _finish(self, job: WorkerJob, value: Any = None, error: BaseException | None = None) -> None:
        if job.state == "finished" and job.finished.done():
            return
        job.state = "finished"
        self.stats["finished"] += 1
        if not job.future.done():
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(value)
        if not job.finished.done():
            job.finished.set_result(None)

    async def _escalate(self, job: WorkerJob, grace: float) -> None:
        """A cancelled job whose worker does not report back in time: terminate, then kill."""
        await asyncio.sleep(grace)
        if job.finished.done():
            return
        log.warning("lane %s: job %s ignored its cancel; restarting the worker", self.name, job.id)
        await self._stop_process(graceful=False)

    # --- the process ------------------------------------------------------------------------------
    async def _ensure_process(self) -> asyncio.subprocess.Process:
        if self.process is not None and self.process.returncode is None:
            return self.process
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "server.worker", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=_child_environment())
        self.stats["workers"] += 1
        self.worker_rss_mb = 0.0
        self._reader = asyncio.ensure_future(self._read(self.process))
        self._drainer = asyncio.ensure_future(self._drain_stderr(self.process))
        return self.process

    def _send(self, message: dict[str, Any]) -> None:
        self._write(encode_frame(message))

    def _write(self, frame: bytes) -> None:
        process = self.process
        if process is None or process.stdin is None or process.returncode is not None:
            return
        try:
            process.stdin.write(frame)
        except (BrokenPipeError, ConnectionResetError):
            log.warning("lane %s: worker pipe closed", self.name)

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        from pickle import loads

        try:
            while True:
                header = await process.stdout.readexactly(HEADER)
                message = loads(await process.stdout.readexactly(int.from_bytes(header, "big")))
                self._dispatch(message)
        except (asyncio.IncompleteReadError, ConnectionResetError):
            pass
        except Exception:
            log.exception("lane %s: unreadable message from worker", self.name)
        code = await process.wait()
        if process is self.process:
            self.process = None
        job = self.current
        if job is not None and not job.finished.done():
            if job.timed_out:
                self._finish(job, error=JobTimeoutError.of(job))
                return
            self.stats["crashed"] += 1
            detail = " | ".join(list(self._stderr)[-3:])
            self._finish(job, error=WorkerCrashedError(f"the worker process exited with status {code}"
                                                  + (f": {detail}" if detail else "")))

    def _dispatch(self, message: dict[str, Any]) -> None:
        job = self.current
        if job is None or message.get("id") != job.id:
            return
        kind = message.get("type")
        if "rss_mb" in message:
            self.worker_rss_mb = float(message["rss_mb"] or 0.0)
        if kind == "event":
            if job.on_event is not None and not job.future.done():
                try:
                    job.on_event(message["value"])
                except Exception:
                    log.exception("lane %s: event handler failed", self.name)
        elif kind == "done":
            try:
                reply = message_from_dict(message["value"])
            except Exception as exc:  # a reply that does not fit its message: the job fails, the lane goes on
                self._finish(job, error=exc)
            else:
                self._finish(job, value=reply)
        elif kind == "failed":
            self._finish(job, error=RuntimeError(message.get("error", "worker job failed")))

    async def _drain_stderr(self, process: asyncio.subprocess.Process) -> None:
        """Keep the worker's stderr pipe from filling up; remember the tail for crash reports."""
        assert process.stderr is not None
        while True:
            line = await process.stderr.readline()
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            self._stderr.append(text)
            log.debug("worker %s: %s", self.name, text)

    async def _stop_process(self, graceful: bool) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            self.process = None
            return
        if graceful:
            self._send({"op": "shutdown"})
            with contextlib.suppress(Exception):
                if process.stdin is not None:
                    process.stdin.close()
        else:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        try:
            await asyncio.wait_for(process.wait(), timeout=TERM_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._reader), timeout=1.0)
        self.process = None
