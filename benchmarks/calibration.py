"""Calibration tables: the performance model's predictions against what Trainium measured.

1. The public calibration set (../shared/calibration, seven NKIBench kernels as published, measured on
   trn1 with the 2025 compiler): per case the predicted and measured latency and every counter, then
   the summary (median |error|, worst ratio and Spearman of latency; median error per counter). Skipped
   with the reason where the set is absent.
2. The two trn1 optimization chains of ../shared/calibration/autocomp (the tutorial BF16 matmul and single-head
   attention, each version a rewrite of its parent, 2025 compiler): per version the predicted and measured
   latency and the model's engine breakdown, per chain and over both the median |error|, and for every
   rewrite trn1 measured faster, whether the model predicts it faster. Skipped where the set is absent.
3. The NKI tutorial points (fact sheet D.2, 2024 compiler): our own kernels of the published shapes,
   trace-only, with Spearman and the median |error|.
4. The same points on the tutorials' own kernels, as their authors published them (read from a copy of
   aws-neuron/nki-samples: pass its git directory, or set ACCELOPT_NKI_SAMPLES; skipped without one),
   and every step of their optimization chains: is the version measured faster predicted faster?
5. The physical floor check: for every kernel above, how far the prediction sits above the floor of the
   work it executed (perfmodel/floor.py), and whether the model flagged itself below it.

Usage: python3 benchmarks/calibration.py [NKI_SAMPLES_GIT_DIR]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "calibration"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import autocomp_chains  # noqa: E402
from calibration_points import (  # noqa: E402
    ALL_POINTS,
    SUPERSEDED,
    Point,
    error_percent,
    predicted_ms,
    published_file,
    published_report,
    report,
    spearman,
)
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

from accelopt_core.perfmodel import PerfReport  # noqa: E402

Timed = tuple[str, PerfReport, float]  # a kernel, its prediction, and its measured latency in ms


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


def calibration_set() -> list[Timed]:
    tasks = [case["task"] for case in cases()]
    if not tasks:
        print(f"calibration set: skipped ({ABSENT})")
        return []
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
    return [(f"calibration set {task}", predicted(task), measured(task)["latency"]) for task in tasks]


def autocomp_set() -> list[Timed]:
    """The autocomp chains: each version against trn1, the medians, and the measured improvements."""
    chain = autocomp_chains.versions()
    if not chain:
        print(f"\nautocomp chains: skipped ({autocomp_chains.ABSENT})")
        return []
    print("\nautocomp chains (trn1, 2025 compiler; predictions simulated trn1): predicted | measured | error, "
          "then the model's busy time per engine (ms)")
    for version in chain:
        report = autocomp_chains.predicted(version)
        busy = "  ".join(f"{engine} {1e3 * seconds:.3f}" for engine, seconds in report.engine_busy_time.items()
                         if seconds > 0)
        print(f"{version.name:16} {report.latency_ms:9.3f} | {version.measured_ms:8.3f} ms | "
              f"{100 * autocomp_chains.error(version):+7.1f}%   {report.bottleneck:7} {busy}")
    for name in [*sorted({v.trace for v in chain}), "both chains"]:
        versions = [v for v in chain if name in (v.trace, "both chains")]
        result = autocomp_chains.summary(versions)
        print(f"{name:16} median |error| {100 * result['median_abs_error']:.1f}%   measured improvements "
              f"(> {100 * autocomp_chains.STEP_MARGIN:.0f}%) predicted faster: {result['predicted_faster']}/"
              f"{result['improvements']}")
    for parent, child in autocomp_chains.improvements(chain):
        before, after = (autocomp_chains.predicted(v).latency_ms for v in (parent, child))
        print(f"  {parent.name} -> {child.name}: measured {parent.measured_ms:.3f} -> {child.measured_ms:.3f} ms, "
              f"predicted {before:.3f} -> {after:.3f} ms  {'yes' if after < before else 'NO'}")
    return [(f"autocomp {v.name}", autocomp_chains.predicted(v), v.measured_ms) for v in chain]


def tutorial_points() -> list[Timed]:
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
    return [(f"tutorial point {point.name}", report(point), point.measured_ms) for point in ALL_POINTS]


# a chain step counts when the hardware told the two versions apart by more than this
_STEP_MARGIN = 0.05


def chain_steps(points: list[Point]) -> list[tuple[Point, Point]]:
    """Consecutive versions of one kernel at one shape whose measured latencies differ by more than
    the margin: the steps of a published optimization chain."""
    by_shape: dict[tuple[str, tuple[int, ...]], list[Point]] = {}
    for point in points:
        by_shape.setdefault((point.family, point.shape), []).append(point)
    steps = []
    for group in by_shape.values():
        group.sort(key=lambda p: p.kernel)
        steps += [(a, b) for a, b in pairwise(group)
                  if abs(a.measured_ms - b.measured_ms) > _STEP_MARGIN * max(a.measured_ms, b.measured_ms)]
    return steps


def published_chains(mirror: str | None) -> list[Timed]:
    points = [p for p in ALL_POINTS if p.published]
    if not mirror:
        print("\ntutorial kernels as published: skipped (pass the git directory of aws-neuron/nki-samples, "
              "or set ACCELOPT_NKI_SAMPLES)")
        return []
    from public_samples import LEGACY, export

    with tempfile.TemporaryDirectory() as folder:
        files = {published_file(p) for p in points}
        exported = [export(mirror, LEGACY, path, Path(folder)) for path in files]
        if None in exported:
            print(f"\ntutorial kernels as published: skipped ({mirror} lacks commit {LEGACY[:12]})")
            return []
        checkout = Path(folder) / LEGACY[:12]
        print(f"\nNKI tutorial kernels as published (nki-samples {LEGACY[:12]}; 2024 compiler)\n"
              f"{'kernel':30} {'function':32} {'measured ms':>12} {'predicted ms':>13} {'error %':>8} "
              f"{'our version':>12}")
        reports = {p: published_report(p, checkout) for p in points}
    predicted = {p: r.latency_ms for p, r in reports.items()}
    errors = []
    for p in points:
        errors.append(abs(predicted[p] / p.measured_ms - 1))
        print(f"{p.name:30} {p.published:32} {p.measured_ms:12.3f} {predicted[p]:13.3f} "
              f"{100 * (predicted[p] / p.measured_ms - 1):+8.1f} {predicted_ms(p):12.3f}")
    print(f"points: {len(points)}   Spearman: {spearman([p.measured_ms for p in points], list(predicted.values())):.3f}"
          f"   median |error|: {100 * statistics.median(errors):.1f}%")
    print("\nchain steps: measured faster -> predicted faster? (* a point the calibration set contradicts, "
          "see SUPERSEDED in tests/calibration/calibration_points.py)")
    tally = {True: [0, 0], False: [0, 0]}  # contradicted? -> [right, steps]
    for slow, fast in chain_steps(points):
        if slow.measured_ms < fast.measured_ms:
            slow, fast = fast, slow
        ratio = predicted[slow] / predicted[fast]
        verdict = "tie" if abs(ratio - 1) < _STEP_MARGIN else "yes" if ratio > 1 else "NO"
        contradicted = slow.name in SUPERSEDED or fast.name in SUPERSEDED
        tally[contradicted][0] += verdict == "yes"
        tally[contradicted][1] += 1
        names = f"{slow.name}{'*' * (slow.name in SUPERSEDED)} -> {fast.name}{'*' * (fast.name in SUPERSEDED)}"
        measured_ratio = slow.measured_ms / fast.measured_ms
        print(f"  {names:50} measured {measured_ratio:5.2f}x   predicted {ratio:5.2f}x   {verdict}")
    for contradicted, (right, steps) in tally.items():
        print(f"steps {'with' if contradicted else 'without'} a contradicted point, predicted faster by more "
              f"than {100 * _STEP_MARGIN:.0f}%: {right}/{steps}")
    return [(f"published {p.name}", r, p.measured_ms) for p, r in reports.items()]


def floor_check(reports: list[Timed]) -> None:
    """How far each prediction sits above the physical floor of the work its kernel executed (perfmodel/floor.py):
    a prediction below it (ratio under 1, flagged by the model as a bug) would be faster than any hardware. The
    measured time over the floor checks the floor itself: a hardware time below its floor would make it wrong."""
    if not reports:
        return
    print(f"\nphysical floor check (simulated trn1 floors and predictions; measured: trn1 hardware)\n"
          f"{'kernel':46} {'predicted ms':>13} {'floor ms':>10} {'bound':>13} {'pred/floor':>10} "
          f"{'meas/floor':>10}  model bug")
    ratios, below = [], []
    for name, result, measured_ms in reports:
        floor_ms = 1e3 * result.physical_floor_time
        ratio = result.latency_ms / floor_ms if floor_ms else float("inf")
        hardware = measured_ms / floor_ms if floor_ms else float("inf")
        ratios.append(ratio)
        if hardware < 1:
            below.append(name)
        print(f"{name:46} {result.latency_ms:13.3f} {floor_ms:10.3f} {result.physical_floor_bound:>13} {ratio:10.2f} "
              f"{hardware:10.2f}  {'YES' if result.model_below_floor else ''}")
    flagged = sum(result.model_below_floor for _, result, _ in reports)
    print(f"kernels: {len(reports)}   model bugs flagged: {flagged}   prediction over floor: min {min(ratios):.2f}   "
          f"median {statistics.median(ratios):.2f}   max {max(ratios):.2f}   measured below its floor: "
          f"{len(below)}{' (' + ', '.join(below) + ')' if below else ''}")


def main() -> None:
    began = time.perf_counter()
    reports = calibration_set()
    reports += autocomp_set()
    reports += tutorial_points()
    reports += published_chains(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ACCELOPT_NKI_SAMPLES"))
    floor_check(reports)
    print(f"({time.perf_counter() - began:.1f} s)")


if __name__ == "__main__":
    main()
