"""Calibration tables: the performance model's predictions against what Trainium measured.

1. The public calibration set (../shared/calibration, seven NKIBench kernels as published, measured on
   trn1 with the 2025 compiler): per case the predicted and measured latency and every counter, then
   the summary (median |error|, worst ratio and Spearman of latency; median error per counter). Skipped
   with the reason where the set is absent.
2. The NKI tutorial points (fact sheet D.2, 2024 compiler): our own kernels of the published shapes,
   trace-only, with Spearman and the median |error|.

Usage: python3 benchmarks/calibration.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "calibration"))

from calibration_points import ALL_POINTS, error_percent, predicted_ms, report, spearman  # noqa: E402
from measured_cases import (  # noqa: E402
    ABSENT,
    cases,
    counter_pairs,
    latency_error,
    latency_summary,
    measured,
    predicted,
    relative_error,
)


def _value(counter: str, value: float) -> str:
    if counter.endswith("_active"):
        return f"{value:.3f}"
    return f"{value / 1e6:.4g} M" if counter.endswith("_bytes") else f"{value / 1e9:.4g} G"


def _difference(counter: str, model: float, hardware: float) -> str:
    if counter.endswith("_active"):
        return f"{100 * (model - hardware):+.1f} pt"
    error = relative_error(model, hardware)
    if error is None:
        return "exact" if model == 0 else "(trn1: 0)"
    return f"{100 * error:+.1f}%"


def calibration_set() -> None:
    tasks = [case["task"] for case in cases()]
    if not tasks:
        print(f"calibration set: skipped ({ABSENT})")
        return
    print("calibration set (trn1, 2025 compiler): predicted | measured | difference")
    by_counter: dict[str, list[float]] = {}
    for task in tasks:
        print(f"\n{task}: latency {predicted(task).latency_ms:.3f} ms | {measured(task)['latency']:.3f} ms | "
              f"{100 * latency_error(task):+.1f}%   (bottleneck {predicted(task).bottleneck})")
        for counter, model, hardware in counter_pairs(task):
            print(f"  {counter:20} {_value(counter, model):>12} | {_value(counter, hardware):>12} | "
                  f"{_difference(counter, model, hardware)}")
            error = model - hardware if counter.endswith("_active") else relative_error(model, hardware)
            if error is not None:
                by_counter.setdefault(counter, []).append(error)
    summary = latency_summary(tasks)
    print(f"\nlatency over {len(tasks)} cases: median |error| {100 * summary['median_abs_error']:.1f}%   "
          f"worst {summary['worst_ratio']:.2f}x   Spearman {summary['spearman']:.3f}")
    print("median error per counter (active time in points of the latency):")
    for counter, errors in by_counter.items():
        scale, unit = (100, " pt") if counter.endswith("_active") else (100, "%")
        print(f"  {counter:20} {scale * statistics.median(errors):+8.1f}{unit}   "
              f"median |error| {scale * statistics.median(abs(e) for e in errors):.1f}{unit}   ({len(errors)} cases)")


def tutorial_points() -> None:
    print(f"\nNKI tutorial points (2024 compiler)\n{'kernel':30} {'shape':24} {'measured ms':>12} "
          f"{'predicted ms':>13} {'error %':>8}  bottleneck")
    measured_ms: list[float] = []
    predicted_list: list[float] = []
    errors: list[float] = []
    for point in ALL_POINTS:
        value = predicted_ms(point)
        error = error_percent(point)
        measured_ms.append(point.measured_ms)
        predicted_list.append(value)
        errors.append(abs(error))
        print(f"{point.name:30} {point.shape_label:24} {point.measured_ms:12.3f} {value:13.3f} {error:+8.1f}  "
              f"{report(point).bottleneck}")
    print(f"\npoints: {len(ALL_POINTS)}   Spearman rank correlation: {spearman(measured_ms, predicted_list):.3f}   "
          f"median |error|: {statistics.median(errors):.1f}%   max |error|: {max(errors):.1f}%   "
          f"within 25%: {sum(e <= 25 for e in errors)}/{len(errors)}")


def main() -> None:
    began = time.perf_counter()
    calibration_set()
    tutorial_points()
    print(f"({time.perf_counter() - began:.1f} s)")


if __name__ == "__main__":
    main()
