"""One scale for every `*_percent` field: fractions, as neuron-profile's summary writes them, whichever backend
measured; percent only in text people read. Results stored before (format 1) are read in the new scale."""

from __future__ import annotations

import pytest

from accelopt_core.profiling import ProfileResult, SimulatorProfiler, TaskRef, as_percent
from accelopt_core.profiling.result import CANCELLED, RESULT_FORMAT
from accelopt_core.report import render
from accelopt_core.tasks.registry import task_files


@pytest.fixture(scope="module")
def silu() -> ProfileResult:
    with open(task_files("silu").kernel, encoding="utf-8") as handle:
        return SimulatorProfiler().profile(handle.read(), TaskRef(name="silu:small"), check=False)


def test_the_simulator_writes_fractions(silu: ProfileResult) -> None:
    p = silu.profile
    active = [p[f"{e}_engine_active_time_percent"] for e in ("tensor", "vector", "scalar", "gpsimd")]
    assert all(0 <= a <= 1 for a in [*active, p["dma_active_time_percent"], *p["idle_percent"].values()])
    assert max(active) > 0.05  # silu keeps an engine busy: a fraction, not a percent below 1
    assert p["vector_engine_active_time_percent"] == pytest.approx(p["vector_engine_active_time"] / p["latency"])
    assert silu.to_dict()["result_format"] == RESULT_FORMAT
    assert silu.peak_percent is not None and 1 < silu.peak_percent <= 100  # the NKIBench metric stays percent


def test_a_round_trip_keeps_the_values(silu: ProfileResult) -> None:
    assert ProfileResult.from_dict(silu.to_dict()).to_dict() == silu.to_dict()


def test_the_function_that_ran_round_trips_beside_the_summary() -> None:
    result = ProfileResult("versions.py", "silu", "trn1", "simulator", function="silu_v2")
    named = ProfileResult.from_dict(result.to_dict())
    assert named.function == "silu_v2" and "function" not in named.profile


def test_format_1_simulator_results_are_read_as_fractions() -> None:
    old = {"kernel": "k.py", "task": "silu", "hardware": "trn1", "backend": "simulator", "latency_ms": 1.3,
           "peak_percent": 40.0, "vector_engine_active_time_percent": 73.9, "idle_percent": {"vector": 26.1},
           "hbm_read_bytes": 4096, "lines": []}
    result = ProfileResult.from_dict(old)
    assert result.profile["vector_engine_active_time_percent"] == pytest.approx(0.739)
    assert result.profile["idle_percent"] == {"vector": pytest.approx(0.261)}
    assert result.profile["hbm_read_bytes"] == 4096 and result.peak_percent == 40.0


def test_format_1_neuron_results_kept_the_summary_fractions() -> None:
    old = {"kernel": "k.py", "task": "silu", "hardware": "trn1", "backend": "neuron", "latency_ms": 1.3,
           "vector_engine_active_time_percent": 0.739, "benchmark_spread_percent": 0.5}
    profile = ProfileResult.from_dict(old).profile
    assert profile["vector_engine_active_time_percent"] == 0.739  # passed through from neuron-profile
    assert profile["benchmark_spread_percent"] == pytest.approx(0.005)  # the backend's own, written in percent


def test_people_read_percent(silu: ProfileResult) -> None:
    vector = as_percent(silu.profile["vector_engine_active_time_percent"])
    assert vector is not None and f"{vector:5.1f}%" in render(silu)
    assert as_percent(None) is None


def test_percent_of_peak_never_exceeds_100_and_says_why_when_capped() -> None:
    """A latency below the task's best time at peak (a kernel doing less than its reference counts,
    or wrong numbers) shows 100 %, with a note naming both times, never more."""
    from accelopt_core.profiling.profiler import fill_peak
    from accelopt_core.tasks import PeakWork

    work = PeakWork(mm_flops=0, vec_flops=0, hbm_bytes=2 ** 30, counted=True)  # 1 GiB: milliseconds at peak
    fast = ProfileResult("k.py", "t", "trn1", "simulator", correct=True, latency_ms=0.01, profile={"notes": []})
    fill_peak(fast, work, "trn1")
    assert fast.peak_percent == 100.0 and fast.bound == "memory"
    assert fast.profile["notes"][-1].startswith("% of peak capped at 100: the 0.01 ms latency is below the ")
    assert "counted work" in fast.profile["notes"][-1]
    slow = ProfileResult("k.py", "t", "trn1", "simulator", correct=True, latency_ms=1000.0, profile={})
    fill_peak(slow, work, "trn1")
    assert 0 < slow.peak_percent < 100 and "notes" not in slow.profile


def test_a_run_stopped_on_request_says_nothing_about_the_kernel() -> None:
    assert ProfileResult("k.py", "silu", "trn1", "simulator", error=CANCELLED).cancelled
    assert not ProfileResult("k.py", "silu", "trn1", "simulator", error="the kernel fails").cancelled
