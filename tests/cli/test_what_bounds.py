"""What bounds a kernel, in words: said when a search finds nothing faster (issue: 'nothing found explains
itself'). Each line comes from the profile's own fields."""

from __future__ import annotations

from accelopt_core.agents.base import Candidate
from accelopt_core.optimize import crash_lines, why_not_faster
from accelopt_core.profiling import ProfileResult
from accelopt_core.report import what_bounds
from accelopt_core.search import SearchResult
from accelopt_core.search.policy import CrashedRewrite


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


def search(before_ms: float, after_ms: float, crashed: tuple[CrashedRewrite, ...] = ()) -> SearchResult:
    """A search's result from a base kernel at `before_ms` to a rewrite at `after_ms` (the same kernel when equal)."""
    base_result, best_result = result("vector", 40.0, 1 << 20, 1 << 20), result("dma", 41.0, 3 << 20, 1 << 20)
    base_result.latency_ms, best_result.latency_ms = before_ms, after_ms
    base = Candidate("# base\n", "base", base_result)
    best = base if after_ms == before_ms else Candidate("# best\n", "best", best_result, "base", "p", "rule:r")
    return SearchResult(1, base, best, [best], crashed=list(crashed))


def test_a_win_under_one_percent_also_says_what_bounds_the_best_kernel() -> None:
    """The layernorm and mamba tutorials' searches ended at 1.00x with a kernel written (0.25 % and 0.46 %
    faster) and nothing said why there was no more: the best kernel's bound is said as when nothing is found."""
    assert why_not_faster(search(1.0, 0.995))[0].startswith("bound by:  dma-bound")  # the best kernel's
    assert why_not_faster(search(1.0, 1.0))[0].startswith("bound by:  vector-bound")  # nothing found: the base's
    assert why_not_faster(search(1.0, 0.9)) is None  # a visible win speaks for itself


def test_a_rewrite_that_crashed_inside_the_optimizer_is_named_as_our_error() -> None:
    crash = CrashedRewrite("rule:balance_engines", "move the copy", "ParserSyntaxError: expected NAME")
    assert crash_lines(search(1.0, 1.0, (crash,))) == [
        "optimizer error (please report): rule:balance_engines could not write its plan: "
        "ParserSyntaxError: expected NAME"]
    assert crash_lines(search(1.0, 1.0)) == []


def test_a_dma_bound_kernel_with_large_transfers_is_not_told_to_make_them_larger() -> None:
    """nki-library's cumsum moves exactly its 8 MiB in 64 KiB transfers: "fewer, larger transfers (2 KiB or
    more per partition)" was advice it already follows; small transfers still get it."""
    large = result("dma", 54.7, 8 << 20, 8 << 20)
    large.profile["dma_transfer_average_bytes"] = 65536.0
    assert what_bounds(large)[-1] == ("could help: more transfers in flight at once (loads and stores spread over "
                                      "more DMA queues, overlapped with compute); its transfers already average "
                                      "64.0 KiB, larger ones gain little")
    small = result("dma", 30.0, 8 << 20, 8 << 20)
    small.profile["dma_transfer_average_bytes"] = 1024.0
    assert what_bounds(small)[-1].startswith("could help: fewer, larger transfers")


def test_a_dma_bound_kernel_at_the_minimum_traffic_is_not_told_to_keep_data_on_chip() -> None:
    """The attention tutorial (v2) moves exactly the 256 KiB its task needs and was told "or data kept on chip
    instead of loaded again"; a kernel whose traffic is not known still hears it."""
    at_minimum = result("dma", 9.7, 256 << 10, 256 << 10)
    assert what_bounds(at_minimum)[-1] == ("could help: fewer, larger transfers (2 KiB or more per partition), loads "
                                           "spread over more queues")
    unknown = result("dma", 9.7, 256 << 10, 0)
    assert what_bounds(unknown)[-1].endswith("or data kept on chip instead of loaded again")
