"""`accelopt bench`: check and profile every NKIBench baseline, print a table, write JSON and a plot.

Tasks run side by side (one per core by default), each kernel in its own sandboxed process: checked
on its seeds, then timed by the performance model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from accelopt_core.engine import ProfilerSettings, make_profiler
from accelopt_core.hardware import available_hardware
from accelopt_core.nki import KernelLoadError
from accelopt_core.nki.loader import read_source
from accelopt_core.profiling import ProfileResult, TaskRef
from accelopt_core.tasks import TaskError
from accelopt_core.tasks.check import fresh_seeds
from accelopt_core.tasks.registry import all_task_files

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))


def bench_task_names() -> list[str]:
    """The NKIBench tasks (not the bundled examples), in file order."""
    reference_dir = os.path.join(BENCH_DIR, "reference")
    return [name for name, files in all_task_files().items() if os.path.dirname(files.reference) == reference_dir]


@dataclass
class BenchRow:
    task: str
    result: ProfileResult
    seconds: float


def run_task(name: str, hardware: str, small: bool, seeds: Sequence[int] | None, check: bool) -> BenchRow:
    """Check and profile one task's baseline (the kernel runs in its own sandboxed process)."""
    start = time.perf_counter()
    files = all_task_files()[name]
    label = os.path.relpath(files.kernel)
    try:
        source = read_source(files.kernel)
    except KernelLoadError as exc:
        return BenchRow(name, ProfileResult(label, name, hardware, "simulator", error=str(exc)), 0.0)
    profiler = make_profiler(ProfilerSettings(seeds=len(seeds or []) or 1))
    result = profiler.profile(source, TaskRef(f"{name}:small" if small else name), hardware, check=check,
                              seeds=seeds, kernel_label=label)
    return BenchRow(name, result, time.perf_counter() - start)


def geometric_mean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v and v > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


class Progress:
    """A one-line progress bar on a terminal; plain lines otherwise (logs, CI)."""

    def __init__(self, total: int, stream: Any = sys.stderr):
        self.total = total
        self.done = 0
        self.stream = stream
        self.tty = stream.isatty()
        self.start = time.perf_counter()

    def advance(self, label: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        if self.tty:
            width = 30
            filled = int(width * self.done / self.total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                              f"{elapsed:6.1f}s  {label:<28}")
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(f"[{self.done}/{self.total}] {label} ({elapsed:.1f}s)\n")
        self.stream.flush()


def format_table(rows: Sequence[BenchRow], hardware: str) -> str:
    header = f"{'task':<24} {'latency':>11} {'% peak':>7} {'bound':>7} {'bottleneck':>10} {'correct':>8} {'time':>7}"
    lines = [f"NKIBench on the simulator ({hardware}, performance model)", header, "-" * len(header)]
    for row in rows:
        r = row.result
        if r.error:
            lines.append(f"{row.task:<24} {'ERROR':>11}  {r.error}")
            continue
        latency = f"{r.latency_ms:.3f} ms" if r.latency_ms is not None else "-"
        peak = f"{r.peak_percent:.1f}" if r.peak_percent is not None else "-"
        correct = "unchecked" if r.unchecked else "-" if r.correct is None else ("yes" if r.correct else "NO")
        lines.append(f"{row.task:<24} {latency:>11} {peak:>7} {r.bound or '-':>7} {r.bottleneck or '-':>10} "
                     f"{correct:>8} {row.seconds:6.1f}s")
    mean = geometric_mean([row.result.peak_percent or 0 for row in rows if not row.result.error])
    lines.append("-" * len(header))
    lines.append(f"geometric mean % of peak: {mean:.1f}" if mean is not None else "geometric mean % of peak: -")
    return "\n".join(lines)


def write_plot(rows: Sequence[BenchRow], hardware: str, path: str) -> None:
    """Bar chart of % of peak per task, with the geometric mean as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [row.task for row in rows]
    values = [row.result.peak_percent or 0.0 for row in rows]
    colours = ["#4c72b0" if row.result.correct is not False and not row.result.error else "#c44e52" for row in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(names) + 2), 4.2))
    ax.bar(names, values, color=colours)
    mean = geometric_mean(values)
    if mean is not None:
        ax.axhline(mean, color="#333333", linestyle="--", linewidth=1, label=f"geometric mean {mean:.1f}%")
        ax.legend(loc="upper right")
    ax.set_ylabel("% of peak")
    ax.set_ylim(0, 100)
    ax.set_title(f"NKIBench baselines, % of peak ({hardware}, simulated)")
    ax.tick_params(axis="x", rotation=45)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_bench(tasks: Sequence[str], hardware: str = "trn1", small: bool = False, seed_count: int = 1,
              check: bool = True, workers: int | None = None) -> list[BenchRow]:
    known = bench_task_names()
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise TaskError(f"unknown NKIBench task(s): {', '.join(unknown)}; tasks: {', '.join(known)}")
    seeds = fresh_seeds(seed_count)
    progress = Progress(len(tasks))
    rows: dict[str, BenchRow] = {}
    workers = workers or min(len(tasks), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_task, name, hardware, small, seeds, check): name for name in tasks}
        for future in as_completed(futures):
            row = future.result()
            rows[row.task] = row
            progress.advance(row.task)
    return [rows[name] for name in tasks]


HELP = "check and profile the NKIBench baselines, print a table"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accelopt bench", description=HELP)
    parser.add_argument("--hardware", choices=available_hardware(), default="trn1")
    parser.add_argument("--tasks", nargs="+", help="task names (default: all 14)")
    parser.add_argument("--small", action="store_true", help="the small size variants (seconds, not minutes)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds checked per task (default 1)")
    parser.add_argument("--no-check", action="store_true", help="time only (trace-only mode)")
    parser.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    parser.add_argument("--json", help="write all results to this JSON file")
    parser.add_argument("--plot", help="write a bar chart of %% of peak per task to this PNG file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`accelopt bench [options]`: the arguments after `bench`."""
    return run_bench_command(build_parser().parse_args(argv))


def run_bench_command(args: argparse.Namespace) -> int:
    tasks = args.tasks or bench_task_names()
    start = time.perf_counter()
    rows = run_bench(tasks, args.hardware, args.small, args.seeds, not args.no_check, args.workers)
    elapsed = time.perf_counter() - start
    print(format_table(rows, args.hardware))
    print(f"{len(rows)} tasks in {elapsed:.1f} s ({'small' if args.small else 'full'} sizes)")
    if args.json:
        payload = {"hardware": args.hardware, "variant": "small" if args.small else "full", "seconds": elapsed,
                   "geomean_peak_percent": geometric_mean([r.result.peak_percent or 0 for r in rows]),
                   "tasks": [{**row.result.to_dict(), "wall_seconds": row.seconds} for row in rows]}
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
    if args.plot:
        write_plot(rows, args.hardware, args.plot)
    failed = [row for row in rows if row.result.error or row.result.correct is False]
    return 1 if failed else 0
