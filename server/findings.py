"""What the diagnostics say, as plain data: errors, wrong results and bottlenecks found in a kernel's
source and profile. No LSP types here; features/diagnostics.py translates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from accelopt_core.editor_api import ProfileResult, RepeatedLoad

from .format import EDITOR_LIMIT_KNOBS, fix_gain, fraction, ms, nbytes
from .kernels import KernelFile, TaskLink

ERROR, WARNING, INFO, HINT = "error", "warning", "information", "hint"
HOT_SHARE = 0.25  # a line taking at least this share of busy time is worth pointing at
MAX_HOT_LINES = 2


@dataclass(frozen=True)
class Finding:
    """One diagnostic: `line` is 1-based; `column` None means the whole line's text."""

    line: int
    severity: str
    code: str
    message: str
    column: int | None = None
    end_column: int | None = None
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    priority: float = 0.0


def line_share(result: ProfileResult) -> dict[int, float]:
    """Each line's share of the summed busy time (lines on different engines overlap in time)."""
    total = sum(entry["time_ms"] for entry in result.lines) or 1.0
    return {entry["line"]: entry["time_ms"] / total for entry in result.lines}


def trip_counts(result: ProfileResult) -> dict[int, int]:
    """Iterations per execution of each loop (by header line), from the profile's loop table."""
    counts = {}
    for loop in result.profile.get("loops") or []:
        executions = max(1, int(loop.get("executions") or 1))
        counts[int(loop["line"])] = max(1, round(int(loop.get("iterations") or 1) / executions))
    return counts


# --- all findings for one kernel ---------------------------------------------------------------


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def structural(kernel: KernelFile, link: TaskLink | None) -> list[Finding]:
    """Findings from the text alone: syntax errors, unrecognisable kernels, broken or missing links."""
    out: list[Finding] = []
    if kernel.syntax_error:
        line, column, message = kernel.syntax_error
        out.append(Finding(line, ERROR, "syntax-error", f"syntax error: {message}", column, column + 1))
        return out
    directive = kernel.directive
    if directive is not None:
        out.extend(Finding(directive.line, WARNING, "bad-directive", f"accelopt directive: {p}")
                   for p in directive.problems)
    if kernel.problem:
        out.append(Finding(directive.line if directive else 1, WARNING, "no-kernel",
                           kernel.problem + " (or add `kernel=NAME` to the `# accelopt:` directive)"))
        return out
    if kernel.choosing and link is not None and link.ok:
        names = ", ".join(k.name for k in kernel.kernels)
        out.append(Finding(directive.line if directive else kernel.kernels[0].def_line, INFO, "several-kernels",
                           f"{len(kernel.kernels)} kernels in this file ({names}): profile one with the lens over "
                           "it, or name it with `kernel=NAME` in the `# accelopt:` directive"))
        return out
    if link is None or link.origin == "none":
        out.append(Finding(kernel.def_line or 1, HINT, "no-task",
                           "No task linked, so this kernel is not profiled: add `# accelopt: task=NAME` or "
                           "`# accelopt: reference=path/to/ref.py`", kernel.name_start,
                           kernel.name_start + len(kernel.function or "")))
    elif link.problem:
        out.append(Finding(link.line or kernel.def_line or 1, ERROR, "bad-task", link.problem))
    return out


def from_results(kernel: KernelFile, trace: ProfileResult | None, checked: ProfileResult | None,
                 task_error: str | None, repeated: Sequence[RepeatedLoad] = ()) -> list[Finding]:
    """Errors, wrong results and the top bottlenecks of the latest profile; `repeated` are the loads the rules'
    analysis of the profiled text found repeated in a loop (worked out in the worker)."""
    def_line = kernel.def_line or 1
    if task_error:
        line = kernel.directive.line if kernel.directive else def_line
        return [Finding(line, ERROR, "task-error", f"the task could not be loaded: {task_error}")]
    result = checked if checked is not None and checked.latency_ms is not None else trace
    failing = checked if checked is not None and checked.error else trace if trace and trace.error else None
    if failing is not None and failing.error:
        if failing.cancelled:
            return []
        line = failing.error_line or def_line
        return [Finding(line, ERROR, "kernel-error", f"the kernel fails: {failing.error}")]
    out: list[Finding] = []
    if checked is not None and checked.correct is False:
        detail = checked.check_message or "outputs differ from the reference"
        errors = []
        if checked.max_abs_error is not None:
            errors.append(f"max abs error {checked.max_abs_error:.3g}")
        if checked.rel_l2_error is not None:
            errors.append(f"relative L2 error {checked.rel_l2_error:.3g}")
        suffix = f" ({', '.join(errors)})" if errors else ""
        out.append(Finding(def_line, WARNING, "wrong-results", f"wrong results: {detail}{suffix}",
                           kernel.name_start, kernel.name_start + len(kernel.function or "")))
    unchecked = checked if checked is not None and checked.unchecked else trace if trace and trace.unchecked else None
    if unchecked is not None:  # our limit, not the kernel's fault: said, never as an error
        out.append(Finding(def_line, INFO, "unchecked", unchecked.unchecked_text(*EDITOR_LIMIT_KNOBS),
                           kernel.name_start, kernel.name_start + len(kernel.function or "")))
    if result is not None and result.latency_ms is not None:
        out.extend(bottlenecks(kernel, result, repeated))
    return out


def bottlenecks(kernel: KernelFile, result: ProfileResult, repeated: Sequence[RepeatedLoad] = ()) -> list[Finding]:
    """Repeated loads, hot lines, an idle Tensor engine, spills: information-level findings."""
    out: list[Finding] = []
    share = line_share(result)
    trips = trip_counts(result)
    by_line = {entry["line"]: entry for entry in result.lines}
    loops = {loop.line: loop for loop in kernel.loops}
    flagged: set[int] = set()
    for load in repeated:
        count = trips.get(load.loop_line)
        times = f"{count}×" if count else "on every iteration"
        variables = " or ".join(f"`{v}`" for v in load.loop_vars) or "its variable"
        spent = share.get(load.line, 0.0)
        if round(100 * spent) == 0:
            continue  # costs nothing measurable (0 % of busy time): not worth a diagnostic
        cost = f"; this line is {fraction(spent)} of busy time"
        loop = loops.get(load.loop_line)
        out.append(Finding(load.line, INFO, "repeated-load",
                           f"this load does not depend on {variables} but runs in every iteration of the loop "
                           f"on line {load.loop_line}{f' ({loop.iterator})' if loop else ''}: the same data is "
                           f"read from HBM {times}{cost}. Load it once before that loop if SBUF has room.",
                           data={"loop_line": load.loop_line}, priority=spent + 0.01))
        flagged.add(load.line)
    hot = [e for e in result.lines if share.get(e["line"], 0.0) >= HOT_SHARE and e["line"] not in flagged]
    for entry in hot[:MAX_HOT_LINES]:
        engines = ", ".join(f"{name} {ms(t)}" for name, t in sorted(entry.get("engines", {}).items(),
                                                                     key=lambda item: -item[1]))
        out.append(Finding(entry["line"], INFO, "hot-line",
                           f"hot spot: {fraction(share[entry['line']])} of the kernel's busy time, mostly "
                           f"on the {entry['engine']} engine ({engines}; "
                           f"{_plural(entry['instructions'], 'instruction')})",
                           priority=share[entry["line"]]))
    profile = result.profile
    tensor_active = profile.get("tensor_engine_active_time_percent")
    if result.bound == "matmul" and tensor_active is not None and tensor_active < 0.5:
        target = next((e["line"] for e in result.lines if e["engine"] != "tensor"), kernel.def_line or 1)
        if not profile.get("hardware_flops"):
            message = ("the Tensor engine is never used, yet this task is matmul-bound at peak: its "
                       "matrix products belong on nisa.nc_matmul")
        elif result.bottleneck in ("tensor", "none", None):  # no engine keeps it waiting: its own inputs do
            message = (f"the Tensor engine is idle {fraction(1 - tensor_active)} of the time in a matmul-bound "
                       "task, and no other engine is busier: its matmuls wait on the instructions they depend on")
        else:
            message = (f"the Tensor engine is idle {fraction(1 - tensor_active)} of the time in a matmul-bound "
                       f"task; it waits on the {result.bottleneck} engine")
        line = target if target in by_line else kernel.def_line or 1
        out.append(Finding(line, INFO, "idle-tensor-engine", message, priority=0.5))
    spilled = (profile.get("spill_save_bytes") or 0) + (profile.get("spill_reload_bytes") or 0)
    peak, usable = profile.get("sbuf_peak_live_bytes_per_partition"), profile.get("sbuf_usable_bytes_per_partition")
    # spill counters include the kernel's own scratch HBM; only live blocks above the SBUF are an overflow
    if spilled and (peak is None or usable is None or peak > usable):
        out.append(Finding(kernel.def_line or 1, INFO, "sbuf-spills",
                           f"SBUF overflows: {nbytes(profile.get('spill_save_bytes'))} saved to HBM and "
                           f"{nbytes(profile.get('spill_reload_bytes'))} reloaded (peak live "
                           f"{nbytes(profile.get('sbuf_peak_live_bytes_per_partition'))} per partition of "
                           f"{nbytes(profile.get('sbuf_usable_bytes_per_partition'))})",
                           kernel.name_start, kernel.name_start + len(kernel.function or ""), priority=0.4))
    return out


def rule_findings(fixes: Sequence[Any]) -> list[Finding]:
    """One information diagnostic per rule-based rewrite on offer (its quick fix applies it)."""
    return [Finding(fix.line, INFO, f"rule:{fix.rule}", f"{fix.rule}: {fix.description} ({fix_gain(fix)})",
                    data={"fix": fix.key}, priority=fix.priority) for fix in fixes]


def applied_fix_findings(fix: Any, result: ProfileResult | None, def_line: int) -> list[Finding]:
    """A warning, as soon as its profile shows it, when the quick fix just applied made the kernel fail, give
    wrong results or run slower than before it (the kernel's latency the fix was compared with): undo reverts it."""
    if fix is None or result is None:
        return []
    where = f"the quick fix just applied ({fix.rule}: {fix.description})"
    if result.error:
        message = f"{where} makes the kernel fail: {result.error.splitlines()[0]}; undo to revert it"
    elif result.correct is False:
        message = f"{where} gives wrong results: {result.check_message or 'the check failed'}; undo to revert it"
    elif result.latency_ms and result.latency_ms > fix.baseline_ms:
        message = (f"{where} made the kernel {result.latency_ms / fix.baseline_ms:.2f}x slower "
                   f"({ms(fix.baseline_ms)} -> {ms(result.latency_ms)}); undo to revert it")
    else:
        return []
    return [Finding(def_line, WARNING, "applied-fix-regressed", message, priority=1.0)]
