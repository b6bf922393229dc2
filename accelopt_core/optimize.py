"""`accelopt optimize`: run the beam search on one kernel and report before/after on the terminal."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from .config import ConfigError, LLMSettings
from .engine import (
    MIN_FIX_SPEEDUP,
    REMOTE,
    ProfilerSettings,
    SearchAgents,
    SearchSettings,
    build_search,
    check_variant,
    kernel_family_name,
    limits_of,
    task_family,
)
from .memory import Memory
from .nki.loader import check_source, read_source
from .profiling import TaskRef, measured_on
from .report import CLI_LIMIT_KNOBS, counted, what_bounds
from .search import SearchError, SearchEvent, SearchResult

NO_ENDPOINT = "no LLM endpoint configured: using the rule-based optimizer"


class ProgressLine:
    """One self-rewriting status line on a terminal, plain lines elsewhere."""

    def __init__(self, stream: Any = None):
        self.stream = stream if stream is not None else sys.stderr  # the stderr of now, not of the first import
        self.tty = self.stream.isatty()

    def __call__(self, event: SearchEvent) -> None:
        best = f"{event.best_latency_ms:.4g} ms" if event.best_latency_ms is not None else "-"
        peak = f", {event.best_peak_percent:.1f}% of peak" if event.best_peak_percent is not None else ""
        speed = f" ({event.speedup:.2f}x)" if event.speedup else ""
        text = (f"iteration {min(event.iteration + 1, event.iterations)}/{event.iterations} · {event.evaluated} "
                f"evaluated · best {best}{speed}{peak}")
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if event.kind in ("finished", "cancelled") else ""))
        elif event.kind != "evaluated":
            self.stream.write(f"{text} [{event.kind}] {event.message}\n")
        self.stream.flush()


def write_outputs(path: str, out: str | None, result: SearchResult) -> tuple[str, str]:
    """The best kernel next to the original (or at --out) and a unified diff beside it."""
    target = out or f"{os.path.splitext(path)[0]}.optimized.py"
    with open(target, "w", encoding="utf-8") as handle:
        handle.write(result.best.source)
    diff_path = os.path.splitext(target)[0] + ".diff"
    before, after = result.base.source.splitlines(keepends=True), result.best.source.splitlines(keepends=True)
    diff = difflib.unified_diff(before, after, fromfile=os.path.relpath(path), tofile=os.path.relpath(target))
    with open(diff_path, "w", encoding="utf-8") as handle:
        handle.writelines(diff)
    return target, diff_path


def improved(result: SearchResult) -> bool:
    """Whether the search found a faster kernel than the one it started from (else nothing is written)."""
    best, base = result.best, result.base
    return best.hash != base.hash and best.latency_ms < base.latency_ms


def why_not_faster(result: SearchResult) -> list[str] | None:
    """What bounds the best kernel, when the search found no win a person can see (none, or under
    MIN_FIX_SPEEDUP: a 1.00x "win" with a written kernel said nothing about why there was no more); None
    after a visible win."""
    if improved(result) and result.speedup >= MIN_FIX_SPEEDUP:
        return None
    return what_bounds((result.best if improved(result) else result.base).result)


def crash_lines(result: SearchResult) -> list[str]:
    """One line per plan whose rewrite raised inside the optimizer: our bug, named so it can be reported."""
    return [f"optimizer error (please report): {crash.origin} could not write its plan: {crash.error}"
            for crash in result.crashed]


def summary_lines(result: SearchResult, hardware: str) -> list[str]:
    base, best = result.base.result, result.best.result

    def peak(value: float | None) -> str:
        return f"{value:.1f}%" if value is not None else "-"

    lines = [f"{'':<10}{'latency':>14}{'% of peak':>12}   ({measured_on(base)})",
             f"{'before':<10}{base.latency_ms:>11.4g} ms{peak(base.peak_percent):>12}",
             f"{'after':<10}{best.latency_ms:>11.4g} ms{peak(best.peak_percent):>12}",
             f"speedup {result.speedup:.2f}x after {counted(result.evaluated, 'evaluated candidate')} in "
             f"{result.seconds:.0f} s"
             + (" (cancelled)" if result.cancelled else "")]
    if base.unchecked:
        lines.append(f"before: {base.unchecked_text(*CLI_LIMIT_KNOBS)}; only a kernel checked correct replaced it")
    steps = result.lineage[1:] if improved(result) else []
    if steps:
        lines.append("rewrites in the best kernel:")
        lines.extend(f"  {step.latency_ms:9.4g} ms  {step.origin}: {step.plan}" for step in steps)
    return lines


@dataclass(frozen=True)
class OptimizeRun:
    """One `accelopt optimize` apart from how it searches: the kernel file (and which of its functions), the
    Trainium it is timed on, the search to resume, where the results and the optimization memory go."""

    kernel: str
    hardware: str
    kernel_name: str | None = None
    resume: int | None = None
    out: str | None = None
    json: str | None = None
    db: str | None = None


def optimize_run(args: argparse.Namespace) -> OptimizeRun:
    return OptimizeRun(args.kernel, args.hardware, args.kernel_name, args.resume, args.out, args.json, args.db)


def planner_of(args: argparse.Namespace, llm: LLMSettings) -> str:
    """Who plans for --planner / --llm: the LLM agents when asked for, or by default when an endpoint is
    configured; else the rule-based optimizer."""
    planner = args.planner or ("llm" if args.llm or llm.configured() else "rules")
    return "llm" if args.llm and planner == "rules" else planner


def search_settings(args: argparse.Namespace, task: TaskRef, llm: LLMSettings) -> SearchSettings:
    """The search the optimize command's flags ask for."""
    return SearchSettings(args.preset, args.iterations, args.beam_width, args.workers, args.replay_steps,
                          args.time_budget, profiler_settings(args, check_variant(task)), planner_of(args, llm), llm)


def profiler_settings(args: argparse.Namespace, variant: str | None) -> ProfilerSettings:
    """The simulator, or the profiling service with --backend remote (e.g. a Trainium host)."""
    if args.backend == REMOTE:
        token = read_source(args.token_file).strip()
        return ProfilerSettings(REMOTE, args.service_url, token, check_variant=variant,
                                allow_fallback=args.allow_fallback)
    return ProfilerSettings(check_variant=variant, limits=limits_of(args.seconds, args.memory_mb))


def who_plans(chosen: SearchAgents, llm: LLMSettings | None) -> str:
    """Who plans, in words: the rule-based optimizer, the LLM agents (their models and endpoint) or both."""
    if chosen.planner == "rules" or llm is None:
        return "the rule-based optimizer"
    models = ", ".join(sorted({llm.for_role(role).model for role in ("planner", "executor")}))
    agents = f"the LLM agents ({models} at {llm.base_url})"
    return agents if chosen.planner == "llm" else f"the rule-based optimizer and {agents}"


def optimize_command(args: argparse.Namespace, source: str, task: TaskRef) -> int:
    """`accelopt optimize` with its flags; 2 when the LLM configuration cannot be read."""
    try:
        llm = LLMSettings.load()
    except ConfigError as exc:
        print(f"accelopt: {exc}", file=sys.stderr)
        return 2
    return run_optimize(optimize_run(args), search_settings(args, task, llm), source, task)


def run_optimize(run: OptimizeRun, settings: SearchSettings, source: str, task: TaskRef) -> int:
    """Search for a faster kernel than `source`; the asked-for LLM agents, when they cannot run, are replaced by
    the rule-based optimizer, which says so."""
    memory = Memory(run.db)
    cancel = threading.Event()
    built = build_search(settings, memory, ProgressLine(), cancel)
    chosen, llm = built.agents, built.agents.llm
    if chosen.missing:
        print(f"{NO_ENDPOINT} (missing {', '.join(chosen.missing)})", file=sys.stderr)
    print(f"optimizing {os.path.relpath(run.kernel)} for {task.key} on {run.hardware} ({built.profiler.backend} "
          f"backend) with {who_plans(chosen, settings.llm)}", file=sys.stderr)
    try:
        family = task_family(task, kernel_family_name(check_source(source, run.kernel, run.kernel_name), run.kernel))
        result = built.search.run(source, task, run.hardware, family, resume=run.resume, kernel_name=run.kernel_name,
                                  kernel_label=os.path.abspath(run.kernel))
    except SearchError as exc:
        print(f"accelopt: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        cancel.set()
        print("\naccelopt: interrupted; resume with --resume", file=sys.stderr)
        return 130
    finally:
        memory.close()
        built.close()
    found = improved(result)
    target, diff_path = write_outputs(run.kernel, run.out, result) if found else (None, None)
    to_stdout = run.json == "-"  # `--json`: the JSON is stdout's, the words go to stderr
    words = sys.stderr if to_stdout else sys.stdout
    print("\n".join(summary_lines(result, run.hardware)), file=words)
    if llm is not None:
        print(llm.usage_line(), file=words)
    if found:
        print(f"best kernel: {target}\ndiff:        {diff_path}", file=words)
    else:
        print(f"no faster correct kernel found: nothing written ({os.path.relpath(run.kernel)} stays the best)",
              file=words)
    bounds = why_not_faster(result)
    if bounds is not None:
        if found:
            print(f"the rewrites gain less than {100 * (MIN_FIX_SPEEDUP - 1):.0f}%; what bounds the best kernel:",
                  file=words)
        print("\n".join(bounds), file=words)
    for line in crash_lines(result):
        print(line, file=words)
    print(f"search id:   {result.search_id}", file=words)
    if run.json:
        summary = {"search_id": result.search_id, "speedup": result.speedup, "evaluated": result.evaluated,
                   "seconds": result.seconds, "before": result.base.result.to_dict(),
                   "after": result.best.result.to_dict(),
                   "written": {"kernel": target, "diff": diff_path} if found else None,
                   "why_not_faster": bounds,
                   "history": [vars(h) for h in result.history],
                   "failed": [{"origin": c.origin, "plan": c.plan, "error": c.result.error,
                               "check_message": None if c.result.error else c.result.check_message}
                              for c in result.failures],
                   "crashed_rewrites": [vars(crash) for crash in result.crashed],
                   "llm": None if llm is None else {
                       "settings": llm.settings.describe(), "usage": llm.usage().to_dict(), "stopped": llm.stop_reason,
                       "by_agent": {r: u.to_dict() for r, u in llm.usage_by_role().items()}}}
        if to_stdout:
            print(json.dumps(summary, indent=2))
        else:
            with open(run.json, "w", encoding="utf-8") as handle:
                json.dump(summary, handle, indent=2)
    return 0
