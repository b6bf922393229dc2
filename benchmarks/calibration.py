"""Calibration table: published Trainium latencies against the performance model's predictions.

For every published point (matmul and fused-Mamba tutorials, fact sheet D.2) it runs our own kernel
of the same shape from tests/calibration/kernels in trace-only mode, estimates it on trn1 and prints
kernel, shape, measured, predicted and error, then the Spearman rank correlation between measured
and predicted latencies and the median absolute error over all points.

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


def main() -> None:
    began = time.perf_counter()
    print(f"{'kernel':30} {'shape':24} {'measured ms':>12} {'predicted ms':>13} {'error %':>8}  bottleneck")
    measured: list[float] = []
    predicted: list[float] = []
    errors: list[float] = []
    for point in ALL_POINTS:
        value = predicted_ms(point)
        error = error_percent(point)
        measured.append(point.measured_ms)
        predicted.append(value)
        errors.append(abs(error))
        print(f"{point.name:30} {point.shape_label:24} {point.measured_ms:12.3f} {value:13.3f} {error:+8.1f}  "
              f"{report(point).bottleneck}")
    print()
    print(f"points: {len(ALL_POINTS)}   Spearman rank correlation: {spearman(measured, predicted):.3f}   "
          f"median |error|: {statistics.median(errors):.1f}%   max |error|: {max(errors):.1f}%   "
          f"within 25%: {sum(e <= 25 for e in errors)}/{len(errors)}")
    print(f"({time.perf_counter() - began:.1f} s)")


if __name__ == "__main__":
    main()
