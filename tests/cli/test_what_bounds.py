"""What bounds a kernel, in words: said when a search finds nothing faster (issue: 'nothing found explains
itself'). Each line comes from the profile's own fields."""

from __future__ import annotations

from accelopt_core.profiling import ProfileResult
from accelopt_core.report import what_bounds


def result(bottleneck: str, peak: float, moved: int, needed: int) -> ProfileResult:
    r = ProfileResult("k.py", "silu", "trn1", "simulator", correct=True, latency_ms=1.0, peak_percent=peak,
                      bottleneck=bottleneck, bound="memory", peak_work={"hbm_bytes": needed})
    r.profile = {"hbm_read_bytes": moved // 2, "hbm_write_bytes": moved - moved // 2,
                 "bottleneck_summary": f"{bottleneck}-bound: 62% of the critical path's busy time is on "
                                       f"{bottleneck}; idle: tensor 100%"}
    return r


def test_a_kernel_moving_more_than_the_task_needs_is_told_to_move_fewer_bytes() -> None:
    lines = what_bounds(result("dma", 40.0, 3 << 20, 1 << 20))
    assert lines[0] == "bound by:  dma-bound: 62% of the critical path's busy time is on dma"
    assert lines[1] == "roofline:  40.0% of the task's peak (the task's best time is set by its memory work)"
    assert lines[2] == "HBM:       3.0 MiB moved, 3.00x the 1.0 MiB the task's inputs and outputs need"
    assert lines[3].startswith("could help: moving fewer bytes")


def test_a_kernel_at_the_minimum_traffic_is_told_what_its_engine_needs() -> None:
    lines = what_bounds(result("vector", 55.0, 1 << 20, 1 << 20))
    assert lines[2].endswith("(no traffic left to save)")
    assert lines[3].startswith("could help: fewer element-wise passes")


def test_a_kernel_near_its_peak_is_told_little_is_left() -> None:
    assert what_bounds(result("dma", 93.0, 1 << 20, 1 << 20))[-1].startswith("could help: little")


def test_a_failed_kernel_has_nothing_to_say() -> None:
    assert what_bounds(ProfileResult("k.py", None, "trn1", "simulator", error="boom")) == []
