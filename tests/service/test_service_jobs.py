"""The job manager's rules, with a scripted runner instead of real workers: sharing, cancelling, retrying."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from accelopt_core.service.evaluate import Outcome
from accelopt_core.service.jobs import JobFinishedError, JobManager, QueueFullError
from accelopt_core.service.spec import JobSpec


class ScriptedRunner:
    """Each run waits for `release`, then returns the next scripted outcome (or a result)."""

    kind = "scripted"

    def __init__(self, slots: int = 1, outcomes: list[Outcome] | None = None):
        self.slots = slots
        self.outcomes = list(outcomes or [])
        self.release = threading.Event()
        self.runs: list[JobSpec] = []
        self.cancelled: list[bool] = []

    def start(self) -> None:
        return None

    def stop(self) -> None:
        self.release.set()

    def run(self, slot: int, spec: JobSpec, cancel: threading.Event) -> Outcome:
        self.runs.append(spec)
        while not self.release.wait(0.01):
            if cancel.is_set():
                self.cancelled.append(True)
                return Outcome("cancelled", message="evaluation cancelled")
        if self.outcomes:
            return self.outcomes.pop(0)
        return Outcome("result", result={"kernel": spec.kernel_label, "error": None, "error_line": None})

    def describe(self) -> list[dict[str, Any]]:
        return []


def spec(n: int = 0, **changes: Any) -> JobSpec:
    return JobSpec(kernel=f"def kernel(x):\n    return x  # {n}\n", task="silu", **changes)


def wait_status(manager: JobManager, job_id: str, status: str, timeout: float = 5.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = manager.get(job_id)
        if state and state["status"] == status:
            return state
        time.sleep(0.01)
    raise AssertionError(f"{job_id} never became {status}: {manager.get(job_id)}")


@pytest.fixture
def runner() -> ScriptedRunner:
    return ScriptedRunner()


@pytest.fixture
def manager(runner: ScriptedRunner) -> Any:
    jobs = JobManager(runner, "simulator", queue_limit=2)
    jobs.start()
    yield jobs
    jobs.stop()


def test_sharing_cancelling_one_keeps_the_evaluation_for_the_other(manager: JobManager,
                                                                   runner: ScriptedRunner) -> None:
    first, second = manager.submit(spec(1)), manager.submit(spec(1))
    wait_status(manager, first.id, "running")
    assert manager.cancel(first.id)["status"] == "cancelled"
    runner.release.set()
    assert wait_status(manager, second.id, "done")["result"]["kernel"] == "candidate.py"
    assert len(runner.runs) == 1 and not runner.cancelled
    assert manager.get(first.id)["status"] == "cancelled"
    with pytest.raises(JobFinishedError):
        manager.cancel(second.id)


def test_cancelling_every_sharer_stops_the_evaluation(manager: JobManager, runner: ScriptedRunner) -> None:
    jobs = [manager.submit(spec(2)) for _ in range(2)]
    wait_status(manager, jobs[0].id, "running")
    for job in jobs:
        manager.cancel(job.id)
    deadline = time.monotonic() + 5
    while not runner.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.cancelled == [True]


def test_queue_limit_counts_distinct_evaluations(manager: JobManager, runner: ScriptedRunner) -> None:
    running = manager.submit(spec(3))
    wait_status(manager, running.id, "running")
    manager.submit(spec(4))
    manager.submit(spec(5))
    manager.submit(spec(4))  # shares a queued evaluation: no new work
    with pytest.raises(QueueFullError) as refused:
        manager.submit(spec(6))
    assert refused.value.retry_after >= 1 and manager.stats()["rejected"] == 1
    runner.release.set()


def test_uncacheable_jobs_with_explicit_seeds_never_share(manager: JobManager, runner: ScriptedRunner) -> None:
    runner.release.set()
    first = manager.submit(spec(7, seeds=(1, 2)))
    second = manager.submit(spec(7, seeds=(1, 2)))
    wait_status(manager, first.id, "done")
    wait_status(manager, second.id, "done")
    assert len(runner.runs) == 2 and manager.get(second.id)["cached"] is False


def test_a_death_is_retried_once_then_fails() -> None:
    died = Outcome("died", message="the worker process (pid 1) was killed by signal SIGKILL")
    runner = ScriptedRunner(outcomes=[died, died, died])
    runner.release.set()
    manager = JobManager(runner, "simulator")
    manager.start()
    try:
        state = wait_status(manager, manager.submit(spec(8)).id, "failed")
        assert state["attempts"] == 2 and "died 2 time(s); giving up" in state["error"] and "SIGKILL" in state["error"]
        runner.outcomes = [died]
        state = wait_status(manager, manager.submit(spec(9)).id, "done")
        assert state["attempts"] == 2 and manager.stats()["retries"] == 2
    finally:
        manager.stop()


def test_errors_are_failures_and_not_cached() -> None:
    runner = ScriptedRunner(outcomes=[Outcome("error", message="task: unknown task 'x'")])
    runner.release.set()
    manager = JobManager(runner, "simulator")
    manager.start()
    try:
        assert wait_status(manager, manager.submit(spec(10)).id, "failed")["error"] == "task: unknown task 'x'"
        assert wait_status(manager, manager.submit(spec(10)).id, "done")["cached"] is False
        assert manager.submit(spec(10)).status == "done"  # now from the cache
    finally:
        manager.stop()


def test_a_kernel_unchecked_for_our_limits_is_done_with_its_timing_and_not_cached() -> None:
    """The service's own limit is no verdict on the kernel: the job is done, its result says unchecked, and
    the next job on the same kernel checks it again (it may have the time then)."""
    unchecked = {"kernel": "k.py", "error": None, "error_line": None, "correct": None, "latency_ms": 1.5,
                 "unchecked": "the check needs more than 300 s here", "unchecked_limit": "seconds"}
    runner = ScriptedRunner(outcomes=[Outcome("result", result=unchecked)])
    runner.release.set()
    manager = JobManager(runner, "simulator")
    manager.start()
    try:
        state = wait_status(manager, manager.submit(spec(11)).id, "done")
        assert state["result"]["unchecked"] == "the check needs more than 300 s here"
        assert state["result"]["latency_ms"] == 1.5 and state["error"] is None
        assert wait_status(manager, manager.submit(spec(11)).id, "done")["cached"] is False
        assert len(runner.runs) == 2
    finally:
        manager.stop()
