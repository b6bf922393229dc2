"""Every bundled NKIBench baseline passes the product's own check (sandboxed, five seeds, the small
variant) and comes back timed with a share of peak, so a search can always start from it."""

from __future__ import annotations

import pytest

from accelopt_core.nki.loader import read_source
from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.tasks.registry import all_task_files
from nkibench.bench import bench_task_names

SEEDS = [11, 22, 33, 44, 55]


@pytest.mark.parametrize("task", bench_task_names())
def test_small_baseline_is_correct_on_five_seeds(task: str) -> None:
    source = read_source(all_task_files()[task].kernel)
    result = SimulatorProfiler().profile(source, TaskRef(f"{task}:small"), seeds=SEEDS)
    assert result.error is None, result.error
    assert result.correct, result.check_message
    assert result.seeds == SEEDS
    assert result.latency_ms and result.latency_ms > 0
    assert result.peak_percent is not None and 0 < result.peak_percent <= 100
