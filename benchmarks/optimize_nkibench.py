"""The headline of the offline optimizer: % of peak on the 14 NKIBench tasks before and after
`accelopt optimize` with the rule-based optimizer (simulated trn1), the time each search took, the
evaluation rate, and what the optimization memory saves on a second, similar kernel.

    python3 benchmarks/optimize_nkibench.py [--preset default] [--tasks silu matmul ...] [--workers 2]
                                            [--json out.json] [--memory-effect]

Each task's search starts from its baseline with a fresh memory database (so one task's lessons do
not help another), checks candidates on the small variant and times them at full size.
--memory-effect then optimizes a second kernel of the same family twice — once with an empty memory,
once with the memory of a search on the first — and counts the evaluations each needed to reach the
empty-memory run's best latency (`--memory-effect --tasks` with no task names runs only that).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from accelopt_core.blas import single_threaded_blas  # noqa: E402
from accelopt_core.engine import ProfilerSettings, SearchSettings, build_search, check_variant, task_family  # noqa: E402
from accelopt_core.memory import Memory  # noqa: E402
from accelopt_core.nki.loader import read_source  # noqa: E402
from accelopt_core.profiling import TaskRef  # noqa: E402
from accelopt_core.search import BeamSearch, SearchResult  # noqa: E402
from accelopt_core.tasks.registry import all_task_files  # noqa: E402
from nkibench.bench import bench_task_names  # noqa: E402


def rule_search(task: str, source: str, config_name: str, workers: int, memory: Memory
                ) -> tuple[BeamSearch, SearchResult]:
    """The rule-based search as `accelopt optimize` builds it, on trn1."""
    ref = TaskRef(task)
    settings = SearchSettings(config_name, workers=workers, profiler=ProfilerSettings(check_variant=check_variant(ref)))
    built = build_search(settings, memory)
    try:
        return built.search, built.search.run(source, ref, "trn1", task_family(ref))
    finally:
        built.close()


def optimize(task: str, source: str, config_name: str, workers: int, db: str) -> SearchResult:
    with Memory(db) as memory:
        return rule_search(task, source, config_name, workers, memory)[1]


def evaluations_to_reach(search: BeamSearch, target_ms: float) -> int | None:
    """1-based position, in evaluation order (the baseline is 1), of the first correct candidate at
    least as fast as `target_ms`; None if the search never got there."""
    for position, candidate in enumerate(search.evaluated.values(), start=1):
        if candidate.result.correct and candidate.latency_ms <= target_ms * (1 + 1e-9):
            return position
    return None


def headline(tasks: list[str], config_name: str, workers: int) -> list[dict]:
    rows = []
    for task in tasks:
        source = read_source(all_task_files()[task].kernel)
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            result = optimize(task, source, config_name, workers, os.path.join(tmp, "m.db"))
            seconds = time.perf_counter() - start
        row = {"task": task, "before_ms": result.base.latency_ms, "after_ms": result.best.latency_ms,
               "before_peak": result.base.result.peak_percent, "after_peak": result.best.result.peak_percent,
               "speedup": result.speedup, "evaluated": result.evaluated, "seconds": seconds,
               "rewrites": [f"{c.origin}: {c.plan}" for c in result.lineage[1:]]}
        rows.append(row)
        print(f"{task:<24} {row['before_peak']:6.1f}% -> {row['after_peak']:6.1f}%  {row['speedup']:5.2f}x  "
              f"{row['evaluated']:4d} evals  {seconds:7.1f} s", flush=True)
    return rows


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


MEMORY_PAIRS = [("rmsnorm_matmul", "add_rmsnorm_matmul"), ("silu", "adamw"), ("matmul", "transpose_matmul"),
                ("bmm_softmax", "gqa_full")]


def memory_effect(first: str, second: str, config_name: str, workers: int) -> dict:
    """Optimize `second` with an empty memory, then with the memory `first`'s search left, and count the
    evaluations each needed to reach the empty-memory run's best."""
    with tempfile.TemporaryDirectory() as tmp:
        warm_db, cold_db = os.path.join(tmp, "warm.db"), os.path.join(tmp, "cold.db")
        optimize(first, read_source(all_task_files()[first].kernel), config_name, workers, warm_db)
        source = read_source(all_task_files()[second].kernel)
        runs = {}
        for label, db in (("cold", cold_db), ("warm", warm_db)):
            with Memory(db) as memory:
                runs[label] = rule_search(second, source, config_name, workers, memory)
        target = runs["cold"][1].best.latency_ms
        return {"first": first, "second": second, "target_ms": target,
                **{label: {"evaluations_to_target": evaluations_to_reach(search, target),
                           "evaluated": result.evaluated, "best_ms": result.best.latency_ms}
                   for label, (search, result) in runs.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="default")
    parser.add_argument("--tasks", nargs="*", help="default: all 14; none at all skips the headline")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--memory-effect", action="store_true")
    args = parser.parse_args()
    single_threaded_blas()
    tasks = bench_task_names() if args.tasks is None else args.tasks
    payload: dict = {"preset": args.preset}
    if tasks:
        rows = headline(tasks, args.preset, args.workers)
        before = geomean([r["before_peak"] for r in rows])
        after = geomean([r["after_peak"] for r in rows])
        evals = sum(r["evaluated"] for r in rows)
        minutes = sum(r["seconds"] for r in rows) / 60
        print(f"geometric mean % of peak (simulated trn1): {before:.1f}% -> {after:.1f}% ({after / before:.2f}x)")
        print(f"{evals} evaluations in {minutes:.1f} min with {args.workers} workers: "
              f"{evals / minutes:.1f} per minute")
        payload.update(rows=rows, geomean_before=before, geomean_after=after, evaluations_per_minute=evals / minutes)
    if args.memory_effect:
        payload["memory_effect"] = []
        print("memory effect (simulated trn1): evaluations until the empty-memory run's best is reached")
        for first, second in MEMORY_PAIRS:
            effect = memory_effect(first, second, args.preset, args.workers)
            cold, warm = effect["cold"], effect["warm"]
            print(f"{second:<20} after {first:<16} empty memory {cold['evaluations_to_target']:3d} of "
                  f"{cold['evaluated']:3d} evals (best {cold['best_ms']:.4f} ms)   with memory "
                  f"{warm['evaluations_to_target'] or '-':>3} of {warm['evaluated']:3d} evals "
                  f"(best {warm['best_ms']:.4f} ms)", flush=True)
            payload["memory_effect"].append(effect)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)


if __name__ == "__main__":
    main()
