"""The trn1 model on the public calibration set: seven NKIBench kernels as their authors published them,
run unmodified, against what neuron-profile measured on trn1 (docs/calibration.md, cases.json).

Every case must run without an internal error, and its latency and counters stay inside these bars,
so a regression shows: latency within 1.35x of the measurement (the set's median |error| at
most 15 % and Spearman at least 0.9), HBM bytes within 10 %, spill 0 where trn1 measured 0 and within
2x where not, engine active time within 15 points. Where the model is known to miss a mechanism the
case says which, with the tolerance it holds today. `python3 benchmarks/calibration.py` prints the table.
"""

from __future__ import annotations

import pytest
from measured_cases import ABSENT, cases, counter_pairs, latency_error, latency_summary, predicted

TASKS = [case["task"] for case in cases()]
pytestmark = pytest.mark.skipif(not TASKS, reason=ABSENT)

LATENCY_RATIO = 1.35
BYTES_TOLERANCE = 0.10
ACTIVE_POINTS = 0.15
# (task, counter) -> (tolerance, the mechanism the model does not have)
KNOWN_GAPS: dict[tuple[str, str], tuple[float, str]] = {
    ("gqa_full", "vector_active"): (
        0.18, "Vector plus Scalar work is ~1.1 ms above trn1's 13.4 ms (bmm_softmax, with the same reduces, "
              "matches): likely the overhead of its 17.6k 128-element PSUM copies, which the counters do not "
              "separate; and trn1 overlaps less (19.1 ms measured against 15.0 predicted), raising the share"),
}


def _within(task: str, counter: str, default: float) -> float:
    return KNOWN_GAPS.get((task, counter), (default, ""))[0]


@pytest.mark.parametrize("task", TASKS)
def test_runs_unmodified_without_internal_error(task: str) -> None:
    report = predicted(task)  # raises on any simulator or model exception
    assert report.latency > 0 and report.instruction_count > 0


@pytest.mark.parametrize("task", TASKS)
def test_latency(task: str) -> None:
    error = latency_error(task)
    assert 1 / LATENCY_RATIO <= 1 + error <= LATENCY_RATIO, f"{task}: latency off by {100 * error:+.1f}%"


def test_latency_summary_meets_the_bars() -> None:
    summary = latency_summary(TASKS)
    assert summary["median_abs_error"] <= 0.15, summary
    assert summary["worst_ratio"] <= 1.5, summary
    assert summary["spearman"] >= 0.9, summary


@pytest.mark.parametrize("task", TASKS)
def test_hbm_bytes(task: str) -> None:
    for counter, model, hardware in counter_pairs(task):
        if counter in ("hbm_read_bytes", "hbm_write_bytes"):
            tolerance = _within(task, counter, BYTES_TOLERANCE)
            assert abs(model - hardware) <= tolerance * hardware, f"{task} {counter}: {model:.4g} vs {hardware:.4g}"


@pytest.mark.parametrize("task", TASKS)
def test_spill_bytes(task: str) -> None:
    for counter, model, hardware in counter_pairs(task):
        if counter.startswith("spill_"):
            if hardware == 0:
                assert model == 0, f"{task} {counter}: {model:.4g} where trn1 spilled nothing"
            else:
                assert hardware / 2 <= model <= 2 * hardware, f"{task} {counter}: {model:.4g} vs {hardware:.4g}"


@pytest.mark.parametrize("task", TASKS)
def test_engine_active_time(task: str) -> None:
    for counter, model, hardware in counter_pairs(task):
        if counter.endswith("_active"):
            assert abs(model - hardware) <= _within(task, counter, ACTIVE_POINTS), (
                f"{task} {counter}: {model:.3f} vs {hardware:.3f} of the latency")


@pytest.mark.parametrize("task", TASKS)
def test_flops_as_the_profiler_counts_them(task: str) -> None:
    for counter, model, hardware in counter_pairs(task):
        if counter.endswith("_flops"):
            assert abs(model - hardware) <= BYTES_TOLERANCE * hardware, (
                f"{task} {counter}: {model:.4g} vs {hardware:.4g}")
