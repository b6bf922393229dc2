"""The headline of the offline optimizer: % of peak on the 14 NKIBench tasks before and after
`accelopt optimize` with the rule-based optimizer (simulated trn1), the time each search took, the
evaluation rate, and what the optimization memory saves on a second, similar kernel.

    python3 benchmarks/optimize_nkibench.py [--preset default] [--tasks silu matmul ...] [--workers 2]
                                            [--json out.json] [--memory-effect]

Each task's search starts from its baseline with a fresh memory database (so one task's lessons do
not help another), checks candidates on the small variant and times them at full size.
--memory-effect then optimizes a second kernel of the same family twice — once with an empty memory,
once with the memory of the first search — and counts evaluations until the best latency is reached.
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

from accelopt_core.agents.rules.agent import RuleAgent  # noqa: E402
from accelopt_core.agents.rules.registry import default_rules  # noqa: E402
from accelopt_core.blas import single_threaded_blas  # noqa: E402
from accelopt_core.memory import Memory  # noqa: E402
from accelopt_core.nki.loader import read_source  # noqa: E402
from accelopt_core.profiling import SimulatorProfiler, TaskRef  # noqa: E402
from accelopt_core.search import BeamSearch, SearchResult, preset  # noqa: E402
from accelopt_core.tasks.registry import all_task_files, find_task  # noqa: E402
from nkibench.bench import bench_task_names  # noqa: E402


def optimize(task: str, source: str, config_name: str, workers: int, db: str) -> SearchResult:
    config = preset(config_name, workers=workers)
    with Memory(db) as memory:
        profiler = SimulatorProfiler(seeds=config.seeds, check_variant="small")
        search = BeamSearch(profiler, [RuleAgent(default_rules())], config, memory)
        return search.run(source, TaskRef(task), "trn1", find_task(task).family)


def evaluations_to_best(result: SearchResult, search: BeamSearch | None = None) -> int:
    """1-based position, in evaluation order, of the first candidate as fast as the final best."""
    target = result.best.latency_ms * (1 + 1e-9)
    order = [c for c in (search.evaluated.values() if search else [])]
    for position, candidate in enumerate(order, start=1):
        if candidate.result.correct and candidate.latency_ms <= target:
            return position
    return len(order)


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


def memory_effect(first: str, second: str, config_name: str, workers: int) -> dict:
    """Evaluations a search on `second` needs to reach its best, without and with `first`'s memory."""
    with tempfile.TemporaryDirectory() as tmp:
        warm_db, cold_db = os.path.join(tmp, "warm.db"), os.path.join(tmp, "cold.db")
        optimize(first, read_source(all_task_files()[first].kernel), config_name, workers, warm_db)
        source = read_source(all_task_files()[second].kernel)
        counts = {}
        for label, db in (("cold", cold_db), ("warm", warm_db)):
            config = preset(config_name, workers=workers)
            with Memory(db) as memory:
                search = BeamSearch(SimulatorProfiler(seeds=config.seeds, check_variant="small"),
                                    [RuleAgent(default_rules())], config, memory)
                result = search.run(source, TaskRef(second), "trn1", find_task(second).family)
            counts[label] = {"evaluations_to_best": evaluations_to_best(result, search),
                             "evaluated": result.evaluated, "best_ms": result.best.latency_ms}
        return {"first": first, "second": second, **counts}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="default")
    parser.add_argument("--tasks", nargs="+")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--memory-effect", action="store_true")
    args = parser.parse_args()
    single_threaded_blas()
    tasks = args.tasks or bench_task_names()
    rows = headline(tasks, args.preset, args.workers)
    before = geomean([r["before_peak"] for r in rows])
    after = geomean([r["after_peak"] for r in rows])
    evals = sum(r["evaluated"] for r in rows)
    minutes = sum(r["seconds"] for r in rows) / 60
    print(f"geometric mean % of peak (simulated trn1): {before:.1f}% -> {after:.1f}% ({after / before:.2f}x)")
    print(f"{evals} evaluations in {minutes:.1f} min with {args.workers} workers: {evals / minutes:.1f} per minute")
    payload: dict = {"preset": args.preset, "rows": rows, "geomean_before": before, "geomean_after": after,
                     "evaluations_per_minute": evals / minutes}
    if args.memory_effect:
        effect = memory_effect("rmsnorm_matmul", "add_rmsnorm_matmul", args.preset, args.workers)
        print(f"memory effect on {effect['second']} after {effect['first']}: evaluations to reach the best "
              f"{effect['cold']['evaluations_to_best']} (empty memory) vs {effect['warm']['evaluations_to_best']} "
              "(with memory)")
        payload["memory_effect"] = effect
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)


if __name__ == "__main__":
    main()
