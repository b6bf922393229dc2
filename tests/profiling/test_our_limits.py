"""A check that needs more than the trusted side's own limits leaves a kernel unchecked, never failed: no
error, no verdict, the limit that ran out named (to raise it), its timing still there where a trace-only
replay fits, and nothing cached (a higher limit may check it). A small kernel with a tiny check budget
stands in for a full-size kernel on a busy machine."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from accelopt_core.nki import TensorSpec
from accelopt_core.profiling import ProfileResult, SandboxLimits, SimulatorProfiler, TaskRef
from accelopt_core.profiling.profiler import CheckBudget

KERNEL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(nl.load(x[i * 128:(i + 1) * 128, :]), 2.0))
    return out
'''
REFERENCE = '''
import numpy as np

def get_inputs():
    return [np.random.normal(size=(2048, 256)).astype(np.float32)]  # 2 MiB

def forward(x):
    return x * 2.0
'''


@pytest.fixture
def task(tmp_path: Path) -> TaskRef:
    path = tmp_path / "ref.py"
    path.write_text(REFERENCE)
    return TaskRef(reference=str(path))


def profile(task: TaskRef, limits: SandboxLimits, cache: dict | None = None) -> ProfileResult:
    return SimulatorProfiler(seeds=2, limits=limits, cache=cache if cache is not None else {}).profile(KERNEL, task)


def test_a_check_out_of_our_memory_leaves_the_kernel_unchecked_and_timed(task: TaskRef) -> None:
    result = profile(task, SandboxLimits(check_memory_mb=1))
    assert result.error is None and result.correct is None
    assert result.unchecked == "the check needs more than 1 MB here"
    assert result.unchecked_limit == "memory"
    assert result.latency_ms is not None and result.lines  # the timing is still shown


def test_timing_out_of_our_time_is_unchecked_and_names_the_time_limit(task: TaskRef) -> None:
    result = profile(task, SandboxLimits(check_seconds=0.0))
    assert result.error is None and result.correct is None
    assert result.unchecked == "the timing needs more than 0 s here"
    assert result.unchecked_text("--seconds", "--memory-mb") == (
        "unchecked: the timing needs more than 0 s here (raise it with --seconds)")


def test_an_unchecked_kernel_is_not_cached_and_a_higher_limit_checks_it(task: TaskRef) -> None:
    cache: dict = {}
    assert profile(task, SandboxLimits(check_memory_mb=1), cache).unchecked
    assert not cache
    checked = profile(task, SandboxLimits(), cache)
    assert checked.correct is True and checked.unchecked is None


def test_unchecked_survives_the_result_dict(task: TaskRef) -> None:
    result = profile(task, SandboxLimits(check_memory_mb=1))
    again = ProfileResult.from_dict(result.to_dict())
    assert (again.unchecked, again.unchecked_limit) == (result.unchecked, "memory")
    assert again.to_dict() == result.to_dict()


def test_the_default_check_time_grows_with_the_inputs_up_to_a_ceiling() -> None:
    small = [TensorSpec((128, 128), np.dtype(np.float32))]
    large = [TensorSpec((8192, 8192), np.dtype(np.float32))]  # 256 MiB
    huge = [TensorSpec((32768, 32768), np.dtype(np.float32))]  # 4 GiB
    limits = SandboxLimits(seconds=300)
    assert CheckBudget.of(limits, small, 5).seconds == 300
    assert CheckBudget.of(limits, large, 5).seconds > CheckBudget.of(limits, large, 2).seconds > 300
    assert CheckBudget.of(limits, huge, 5).seconds == limits.longest_check() == 1200
    assert limits.longest_evaluation() >= limits.seconds + limits.longest_check()  # what watchdogs allow
    given = SandboxLimits(seconds=300, check_seconds=7)
    assert CheckBudget.of(given, huge, 5).seconds == given.longest_check() == 7
    assert CheckBudget.of(limits, None, 0).seconds == 300  # a timing alone: the kernel's limit, however large


def test_a_seed_worker_out_of_our_memory_leaves_the_kernel_unchecked_and_timed(
        task: TaskRef, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules["accelopt_core.profiling.profiler"], "worker_count", lambda specs, count: 2)
    result = profile(task, SandboxLimits(check_memory_mb=1))
    assert result.error is None and result.correct is None
    assert result.unchecked == "the check needs more than 1 MB here"
    assert result.latency_ms is not None
