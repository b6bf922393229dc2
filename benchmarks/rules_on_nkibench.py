"""Which rewrite rules fire on the NKIBench baselines (or on kernels written by others), and what
their first plan does.

For every task and rule: the rule plans on the baseline and its profile; the first plan (and, with
--best K, the best of the first K) is applied and the rewritten kernel is checked and timed by
`SimulatorProfiler(seeds=2, check_variant="small")`, exactly as the search would. Prints a
Markdown table; --json writes the rows.

    python benchmarks/rules_on_nkibench.py [--rules fuse_elementwise,...] [--tasks silu,...] [--best 3]
                                           [--chain 4]
    python benchmarks/rules_on_nkibench.py --public ../shared/calibration [--no-check] [--chain 3]

--chain N then runs a greedy rule-only search per task (up to N rewrites, each the best correct
improvement among the first K plans of every rule) and prints a second table.

--public DIR runs on kernels in the public NKIBench layout (DIR/kernels/NAME.py checked against
DIR/reference/NAME.py, one size: checks simulate it in full, on --seeds seeds). --no-check times
every kernel trace-only instead: what the rules reach by the performance model, nothing verified
(the table says so).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from accelopt_core.agents.rules.registry import default_rules  # noqa: E402
from accelopt_core.blas import single_threaded_blas  # noqa: E402
from accelopt_core.engine import ProfilerSettings, make_profiler  # noqa: E402
from accelopt_core.profiling import ProfileResult, SimulatorProfiler, TaskRef  # noqa: E402

KERNELS = os.path.join(ROOT, "nkibench", "kernels")


@dataclass
class Row:
    task: str
    rule: str
    plans: int
    first: str = ""
    correct: bool | None = None
    before_ms: float | None = None
    after_ms: float | None = None
    best_ms: float | None = None  # best correct latency among the first K plans
    best_plan: str = ""
    note: str = ""

    @property
    def speedup(self) -> float | None:
        if self.before_ms and self.after_ms and self.correct:
            return self.before_ms / self.after_ms
        return None


def load_rules(names: list[str] | None) -> list[Any]:
    """The optimizer's rules (all of them, in their default order), or those named."""
    return [rule for rule in default_rules() if names is None or rule.name in names]


def task_names(folder: str = KERNELS) -> list[str]:
    return sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))


@dataclass
class Bench:
    """Where the kernels come from and how they are checked: our NKIBench tasks (small variant,
    2 seeds) or public-layout kernels with their references (full size, `seeds`), or not at all."""

    public: str | None = None
    seeds: int = 2
    check: bool = True

    def kernel(self, task: str) -> str:
        folder = os.path.join(self.public, "kernels") if self.public else KERNELS
        with open(os.path.join(folder, f"{task}.py"), encoding="utf-8") as handle:
            return handle.read()

    def ref(self, task: str) -> TaskRef:
        if self.public:
            return TaskRef(reference=os.path.join(self.public, "reference", f"{task}.py"))
        return TaskRef(task)

    def profiler(self) -> SimulatorProfiler:
        """The search's profiler; the public references declare no small size, so they check at full size."""
        return make_profiler(ProfilerSettings(seeds=self.seeds, check_variant=None if self.public else "small"))

    def evaluate(self, profiler: SimulatorProfiler, source: str, task: str) -> ProfileResult:
        result = profiler.profile(source, self.ref(task), check=self.check)
        if not self.check and result.error is None:
            result.correct = True  # timed only: the tables say so
        return result


def _describe(result: ProfileResult) -> str:
    return result.error or result.check_message or ""


def run(tasks: list[str], rules: list[Any], best: int, bench: Bench) -> list[Row]:
    profiler = bench.profiler()
    rows: list[Row] = []
    for task in tasks:
        source = bench.kernel(task)
        base = bench.evaluate(profiler, source, task)
        for rule in rules:
            start = time.perf_counter()
            try:
                plans = rule.plan(source, base)
            except Exception as exc:  # a crashing planner is a finding, not a reason to stop
                rows.append(Row(task, rule.name, 0, note=f"plan raised {type(exc).__name__}: {exc}"))
                continue
            row = Row(task, rule.name, len(plans), before_ms=base.latency_ms)
            for index, plan in enumerate(plans[:max(1, best)]):
                try:
                    result = bench.evaluate(profiler, rule.apply(source, plan), task)
                except Exception as exc:
                    if index == 0:
                        row.first, row.note = plan.description, f"apply raised {type(exc).__name__}: {exc}"
                    continue
                if index == 0:
                    row.first, row.correct, row.after_ms = plan.description, result.correct, result.latency_ms
                    row.note = _describe(result)
                if result.correct and result.latency_ms and (row.best_ms is None or result.latency_ms < row.best_ms):
                    row.best_ms, row.best_plan = result.latency_ms, plan.description
            rows.append(row)
            print(f"{task:24s} {rule.name:18s} plans={row.plans:2d} {time.perf_counter() - start:6.1f}s",
                  file=sys.stderr, flush=True)
    return rows


def _ms(value: float | None) -> str:
    return f"{value:.4f}" if value is not None else "-"


def table(rows: list[Row], best: int) -> str:
    head = "| task | rule | plans | first plan | correct | before ms | after ms | speedup |"
    sep = "|---|---|---|---|---|---|---|---|"
    if best > 1:
        head += f" best of {best} ms |"
        sep += "---|"
    lines = [head, sep]
    for r in rows:
        first = (r.first[:90] + "...") if len(r.first) > 93 else r.first
        if r.note:
            first += f" [{r.note[:80]}]"
        speed = f"{r.speedup:.2f}x" if r.speedup else "-"
        line = (f"| {r.task} | {r.rule} | {r.plans} | {first or '-'} | "
                f"{'-' if r.correct is None else r.correct} | {_ms(r.before_ms)} | {_ms(r.after_ms)} | {speed} |")
        if best > 1:
            line += f" {_ms(r.best_ms)} |"
        lines.append(line)
    return "\n".join(lines)


@dataclass
class Chain:
    """Greedy rule-only search on one task: at each step the best correct improvement among the
    first K plans of every rule, until none improves (what the beam search does with width 1)."""

    task: str
    before_ms: float | None
    after_ms: float | None
    steps: list[str]

    @property
    def speedup(self) -> float | None:
        return self.before_ms / self.after_ms if self.before_ms and self.after_ms else None


def chain(tasks: list[str], rules: list[Any], best: int, max_steps: int, bench: Bench) -> list[Chain]:
    profiler = bench.profiler()
    found: list[Chain] = []
    for task in tasks:
        source = bench.kernel(task)
        current = bench.evaluate(profiler, source, task)
        record = Chain(task, current.latency_ms, current.latency_ms, [])
        for _ in range(max_steps):
            candidates = []
            for rule in rules:
                try:
                    candidates += [(plan.priority, rule, plan) for plan in rule.plan(source, current)[:max(1, best)]]
                except Exception:  # a crashing planner shows in the per-rule table
                    continue
            winner = None
            for _, rule, plan in sorted(candidates, key=lambda c: -c[0]):
                try:
                    new_source = rule.apply(source, plan)
                except Exception:  # a failing apply shows in the per-rule table
                    continue
                result = bench.evaluate(profiler, new_source, task)
                if (result.correct and result.latency_ms and current.latency_ms
                        and result.latency_ms < current.latency_ms
                        and (winner is None or result.latency_ms < winner[1].latency_ms)):
                    winner = (new_source, result, f"{rule.name}: {plan.description}")
            if winner is None:
                break
            source, current = winner[0], winner[1]
            record.after_ms = current.latency_ms
            record.steps.append(winner[2])
            print(f"{task:24s} step {len(record.steps)}: {current.latency_ms:.4f} ms", file=sys.stderr, flush=True)
        found.append(record)
    return found


def chain_table(chains: list[Chain]) -> str:
    lines = ["| task | before ms | after ms | speedup | steps |", "|---|---|---|---|---|"]
    for c in chains:
        steps = "<br>".join(f"{i + 1}. {s[:110]}" for i, s in enumerate(c.steps)) or "-"
        speed = f"{c.speedup:.2f}x" if c.speedup else "-"
        lines.append(f"| {c.task} | {_ms(c.before_ms)} | {_ms(c.after_ms)} | {speed} | {steps} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rules", help="comma-separated rule names (default: all in RULES)")
    parser.add_argument("--tasks", help="comma-separated NKIBench tasks (default: all 14)")
    parser.add_argument("--best", type=int, default=1, help="also try the first K plans and report the best")
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--chain", type=int, default=0, metavar="N",
                        help="also chain up to N rewrites per task greedily (correct improvements only)")
    parser.add_argument("--public", metavar="DIR", help="kernels in the public NKIBench layout: DIR/kernels/*.py "
                        "checked against DIR/reference/*.py at their one size")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per check (default 2)")
    parser.add_argument("--no-check", action="store_true", help="time trace-only, check nothing (marked so)")
    args = parser.parse_args(argv)
    single_threaded_blas()
    rules = load_rules(args.rules.split(",") if args.rules else None)
    bench = Bench(args.public, args.seeds, not args.no_check)
    tasks = args.tasks.split(",") if args.tasks else task_names(
        os.path.join(args.public, "kernels") if args.public else KERNELS)
    if not bench.check:
        print("timed trace-only by the performance model; nothing below was checked for correctness\n")
    rows = run(tasks, rules, args.best, bench)
    print(table(rows, args.best))
    if args.chain:
        print()
        print(chain_table(chain(tasks, rules, args.best, args.chain, bench)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([{**asdict(r), "speedup": r.speedup} for r in rows], handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
