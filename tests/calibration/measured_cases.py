"""The public calibration set (seven NKIBench kernels as published, measured on trn1) against the model.

Shared by tests/calibration/test_measured_cases.py (each case inside a tolerance) and
benchmarks/calibration.py (the whole table and its summary). The kernels, references and counters are
data outside the project, found by tests/calibration_set.py; every prediction is a trace-only run of
the unmodified kernel at the reference's full size, estimated on trn1 and memoised per task.
"""

from __future__ import annotations

import functools
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration_set import ABSENT, calibration_cases

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
from accelopt_core.perfmodel import PerfReport, estimate
from accelopt_core.tasks.task import load_reference

# neuron-profile counters the model predicts, in the order the table prints them
BYTE_COUNTERS = ("hbm_read_bytes", "hbm_write_bytes", "spill_save_bytes", "spill_reload_bytes",
                 "sbuf_read_bytes", "sbuf_write_bytes", "psum_read_bytes", "psum_write_bytes")
FLOP_COUNTERS = ("hardware_flops", "transpose_flops")
ENGINES = ("scalar", "vector", "gpsimd")
__all__ = ["ABSENT", "active_fraction", "cases", "counter_pairs", "latency_error", "latency_summary", "measured",
           "predicted", "relative_error", "spearman"]


def cases() -> list[dict[str, Any]]:
    """Every calibration case (kernel, reference, measured counters); [] where the set is absent."""
    return calibration_cases()


@functools.cache
def _case(task: str) -> dict[str, Any]:
    return next(case for case in cases() if case["task"] == task)


@functools.cache
def predicted(task: str) -> PerfReport:
    """The model's report for the case's kernel, as `accelopt profile --no-check` times it."""
    case = _case(task)
    reference = load_reference(case["reference"])
    specs = [TensorSpec.of(a) for a in reference.make_case(0).inputs]
    run = run_kernel(load_kernel(case["kernel"]), specs, reference.launch.kernel_args, numeric=False)
    return estimate(run.trace, load_hardware("trn1"))


def measured(task: str) -> dict[str, Any]:
    return _case(task)["measured_trn1"]


def active_fraction(report: PerfReport, engine: str) -> float:
    """An engine's active time as a share of the latency (the hardware's unit for `*_percent`)."""
    return getattr(report, f"{engine}_engine_active_time") / report.latency if report.latency else 0.0


def relative_error(predicted_value: float, measured_value: float) -> float | None:
    """(predicted - measured) / measured; None where the hardware measured 0."""
    return (predicted_value - measured_value) / measured_value if measured_value else None


def latency_error(task: str) -> float:
    error = relative_error(predicted(task).latency_ms, measured(task)["latency"])
    assert error is not None
    return error


def counter_pairs(task: str) -> list[tuple[str, float, float]]:
    """(counter, predicted, measured) for every counter the hardware reported for this case."""
    report, counters = predicted(task), measured(task)
    pairs = [(name, float(getattr(report, name)), float(counters[name]))
             for name in (*BYTE_COUNTERS, *FLOP_COUNTERS) if name in counters]
    for engine in ENGINES:
        key = f"{engine}_engine_active_time_percent"
        if key in counters:
            pairs.append((f"{engine}_active", active_fraction(report, engine), float(counters[key])))
    return pairs


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman rank correlation (no ties expected among latencies)."""
    def ranks(values: list[float]) -> list[int]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0] * len(values)
        for rank, index in enumerate(order):
            out[index] = rank
        return out

    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    if n < 2:
        return 0.0
    return 1.0 - 6.0 * sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True)) / (n * (n * n - 1))


def latency_summary(tasks: list[str]) -> dict[str, float]:
    """Median |error|, worst ratio either way and Spearman of latency over `tasks`."""
    errors = [latency_error(t) for t in tasks]
    ratios = [max(predicted(t).latency_ms / measured(t)["latency"], measured(t)["latency"] / predicted(t).latency_ms)
              for t in tasks]
    return {"median_abs_error": statistics.median(abs(e) for e in errors), "worst_ratio": max(ratios),
            "spearman": spearman([measured(t)["latency"] for t in tasks], [predicted(t).latency_ms for t in tasks])}
