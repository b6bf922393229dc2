"""`accelopt optimize`: run the beam search on one kernel and report before/after on the terminal."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import threading
from dataclasses import replace
from typing import Any

from .config import ConfigError, LLMSettings
from .engine import (
    REMOTE,
    ProfilerSettings,
    SearchAgents,
    check_variant,
    kernel_family_name,
    limits_of,
    make_profiler,
    profile_cache,
    search_agents,
    task_family,
)
from .memory import Memory
from .nki.loader import check_source, read_source
from .profiling import TaskRef, measured_on
from .report import CLI_LIMIT_KNOBS, counted, what_bounds
from .search import BeamSearch, SearchConfig, SearchError, SearchEvent, SearchResult, preset

NO_ENDPOINT = "no LLM endpoint configured: using the rule-based optimizer"


class ProgressLine:
    """One self-rewriting status line on a terminal, plain lines elsewhere."""

    def __init__(self, stream: Any = sys.stderr):
        self.stream = stream
        self.tty = stream.isatty()

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


def choose_agents(args: argparse.Namespace, config: SearchConfig, settings: LLMSettings) -> tuple[SearchAgents, str]:
    """The search's agents for --planner / --llm and who plans, in words. The LLM agents run when asked for,
    or by default when an endpoint is configured; asked for with no endpoint configured, the rule-based
    optimizer runs instead and says so."""
    planner = args.planner or ("llm" if args.llm or settings.configured() else "rules")
    if args.llm and planner == "rules":
        planner = "llm"
    chosen = search_agents(planner, settings, config.samples_per_plan)
    if chosen.missing:
        print(f"{NO_ENDPOINT} (missing {', '.join(chosen.missing)})", file=sys.stderr)
    models = ", ".join(sorted({settings.for_role(role).model for role in ("planner", "executor")}))
    who = {"rules": "the rule-based optimizer", "llm": f"the LLM agents ({models} at {settings.base_url})",
           "both": f"the rule-based optimizer and the LLM agents ({models} at {settings.base_url})"}[chosen.planner]
    return chosen, who


def profiler_settings(args: argparse.Namespace, config: SearchConfig, variant: str | None) -> ProfilerSettings:
    """The simulator, or the profiling service with --backend remote (e.g. a Trainium host)."""
    if args.backend == REMOTE:
        token = read_source(args.token_file).strip()
        return ProfilerSettings(REMOTE, args.service_url, token, check_variant=variant,
                                allow_fallback=args.allow_fallback)
    return ProfilerSettings(seeds=config.seeds, check_variant=variant, limits=limits_of(args.seconds, args.memory_mb))


def run_optimize(args: argparse.Namespace, source: str, task: TaskRef) -> int:
    config = preset(args.preset, iterations=args.iterations, beam_width=args.beam_width, workers=args.workers,
                    replay_steps=args.replay_steps)
    budget = getattr(args, "time_budget", None)
    if budget is not None:
        config = replace(config, time_budget_s=budget or None)  # 0: no limit
    try:
        settings = LLMSettings.load()
    except ConfigError as exc:
        print(f"accelopt: {exc}", file=sys.stderr)
        return 2
    chosen, who = choose_agents(args, config, settings)
    llm = chosen.llm
    memory = Memory(args.db)
    cancel = threading.Event()
    profiler = make_profiler(profiler_settings(args, config, check_variant(task)), profile_cache(memory))
    search = BeamSearch(profiler, chosen.agents, config, memory, ProgressLine(), cancel)
    print(f"optimizing {os.path.relpath(args.kernel)} for {task.key} on {args.hardware} ({profiler.backend} backend) "
          f"with {who}", file=sys.stderr)
    try:
        family = task_family(task, kernel_family_name(check_source(source, args.kernel, args.kernel_name), args.kernel))
        result = search.run(source, task, args.hardware, family, resume=args.resume,
                            kernel_name=args.kernel_name)
    except SearchError as exc:
        print(f"accelopt: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        cancel.set()
        print("\naccelopt: interrupted; resume with --resume", file=sys.stderr)
        return 130
    finally:
        memory.close()
        chosen.close()
    found = improved(result)
    target, diff_path = write_outputs(args.kernel, args.out, result) if found else (None, None)
    to_stdout = args.json == "-"  # `--json`: the JSON is stdout's, the words go to stderr
    words = sys.stderr if to_stdout else sys.stdout
    print("\n".join(summary_lines(result, args.hardware)), file=words)
    if llm is not None:
        print(llm.usage_line(), file=words)
    if found:
        print(f"best kernel: {target}\ndiff:        {diff_path}", file=words)
    else:
        print(f"no faster correct kernel found: nothing written ({os.path.relpath(args.kernel)} stays the best)",
              file=words)
        print("\n".join(what_bounds(result.base.result)), file=words)
    print(f"search id:   {result.search_id}", file=words)
    if args.json:
        summary = {"search_id": result.search_id, "speedup": result.speedup, "evaluated": result.evaluated,
                   "seconds": result.seconds, "before": result.base.result.to_dict(),
                   "after": result.best.result.to_dict(),
                   "written": {"kernel": target, "diff": diff_path} if found else None,
                   "why_not_faster": None if found else what_bounds(result.base.result),
                   "history": [vars(h) for h in result.history],
                   "failed": [{"origin": c.origin, "plan": c.plan, "error": c.result.error,
                               "check_message": None if c.result.error else c.result.check_message}
                              for c in result.failures],
                   "llm": None if llm is None else {
                       "settings": settings.describe(), "usage": llm.usage().to_dict(), "stopped": llm.stop_reason,
                       "by_agent": {r: u.to_dict() for r, u in llm.usage_by_role().items()}}}
        if to_stdout:
            print(json.dumps(summary, indent=2))
        else:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump(summary, handle, indent=2)
    return 0
