"""One time limit for a kernel's every stage: the trusted side's own slow work (the model, the
replays) is stopped at the kernel's limit too, and reported as our limit (ReplayLimitError), not as the
kernel's failure."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from accelopt_core.nki.replay import ReplayLimitError
from accelopt_core.profiling import SandboxLimits, SimulatorProfiler, TaskRef, verdict
from accelopt_core.profiling.verdict import within_seconds
from accelopt_core.tasks.registry import task_files


def _forever() -> None:
    """A runaway stage of our own, that even swallows ordinary exceptions."""
    while True:
        try:
            sum(range(1000))
        except Exception:  # the point: a stop must not be swallowed
            continue


def _stage_threads() -> int:
    return sum(thread.name == "accelopt-stage" for thread in threading.enumerate())


def test_a_runaway_stage_is_stopped_at_its_time() -> None:
    before = _stage_threads()
    started = time.monotonic()
    with pytest.raises(ReplayLimitError, match="the model did not finish within the kernel's time limit"):
        within_seconds(0.3, "the model", _forever)
    assert time.monotonic() - started < 1.5
    deadline = time.monotonic() + 5
    while _stage_threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _stage_threads() == before  # the thread was stopped, not left running


def test_a_stage_in_time_gives_its_value_or_its_error() -> None:
    assert within_seconds(5.0, "the model", lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        within_seconds(5.0, "the model", lambda: 1 / 0)


def test_the_model_of_a_profile_is_stopped_at_the_kernel_s_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model taking 74 s held an evaluation with a 20 s limit for 257 s. Here the model of our
    own never ends; the evaluation answers by its limit, and the kernel is unchecked for our limit, not
    failed."""
    monkeypatch.setattr(verdict, "estimate", lambda trace, hardware: _forever())
    limit = 8.0
    profiler = SimulatorProfiler(seeds=1, check_variant="small", limits=SandboxLimits(seconds=limit, memory_mb=2048),
                                 cache={})
    started = time.monotonic()
    result = profiler.profile(Path(task_files("silu").kernel).read_text(), TaskRef("silu"), check=False)
    assert time.monotonic() - started < limit + 5
    assert result.error is None and result.latency_ms is None
    assert result.unchecked == "the timing needs more than 8 s here" and result.unchecked_limit == "seconds"
