"""Words and tables about a profile: the hovers' markdown and the JSON report. Engine-side data in,
plain strings and dicts out; the hover and report features wrap them in LSP types."""

from __future__ import annotations

import os
from typing import Any

from accelopt_core.editor_api import ProfileResult, measured_on
from accelopt_core.perfmodel.assumptions import in_brief, on_line
from accelopt_core.report import counted

from .findings import line_share, trip_counts
from .format import EDITOR_LIMIT_KNOBS, flops, fraction, ms, nbytes, percent
from .kernels import KernelFile, SourceLoop, analyze
from .state import KernelDocument

ENGINES = (("Tensor", "tensor"), ("Vector", "vector"), ("Scalar", "scalar"), ("GpSimd", "gpsimd"), ("DMA", "dma"))


def profiled_info(doc: KernelDocument) -> KernelFile:
    if not doc.outdated or doc.profiled_source is None:
        return doc.info
    return analyze(doc.profiled_source, os.path.basename(doc.path or "kernel.py"))


def check_text(doc: KernelDocument) -> str:
    checked = doc.checked
    if checked is None:
        return "checking…" if doc.phase == "checking" else "not checked yet"
    if checked.error:
        return f"fails: {checked.error}"
    if checked.unchecked:
        return checked.unchecked_text(*EDITOR_LIMIT_KNOBS)
    if checked.correct:
        detail = f", max abs error {checked.max_abs_error:.2g}" if checked.max_abs_error is not None else ""
        return f"✓ correct on {counted(len(checked.seeds), 'seed')}{detail}"
    return f"✗ wrong results: {checked.check_message or 'outputs differ'}"


def line_bytes(entry: dict[str, Any], result: ProfileResult) -> tuple[float, bool] | None:
    """Bytes a line moved and whether that is exact. Exact when the profile's line carries a `bytes`
    number; for a line that only issues DMA, an estimate from its share of the kernel's DMA
    instructions (exact when all of them move equal tiles, as in most tiled kernels)."""
    exact = entry.get("bytes")
    if isinstance(exact, (int, float)):
        return float(exact), True
    if isinstance(exact, dict):
        return None  # bytes per memory level: shown level by level, see bytes_text
    engines = entry.get("engines") or {}
    total_bytes = result.profile.get("dma_transfer_total_bytes")
    total_dma = result.profile.get("dma_instruction_count")
    if set(engines) == {"dma"} and total_bytes and total_dma:
        return entry["instructions"] * total_bytes / total_dma, False
    return None


def bytes_text(entry: dict[str, Any], result: ProfileResult) -> str | None:
    """`HBM 1.0 MiB · SBUF 1.0 MiB` when the profile has bytes per level for the line, else one figure."""
    levels = entry.get("bytes")
    if isinstance(levels, dict):
        shown = [f"{str(level).upper()} {nbytes(amount)}" for level, amount in levels.items() if amount]
        return " · ".join(shown) or None
    moved = line_bytes(entry, result)
    if moved is None:
        return None
    amount, exact = moved
    return nbytes(amount) if exact else f"≈ {nbytes(amount)} (estimated from this line's share of DMA instructions)"


def enclosing_loop(info: KernelFile, line: int) -> SourceLoop | None:
    inside = [loop for loop in info.loops if loop.line <= line <= loop.end_line]
    return max(inside, key=lambda loop: loop.line) if inside else None


def loop_text(loop: SourceLoop, result: ProfileResult) -> str:
    stats = next((entry for entry in result.profile.get("loops") or [] if entry.get("line") == loop.line), None)
    name = ", ".join(loop.targets) or "_"
    text = f"`for {name} in {loop.iterator}(…)` (line {loop.line})"
    if stats:
        per_run = trip_counts(result).get(loop.line)
        runs = int(stats.get("executions") or 1)
        count = f"{per_run} iterations" + (f" × {runs} runs" if runs > 1 else "")
        text += f": {count}, {ms(stats.get('time_ms'))} busy, {ms(stats.get('span_ms'))} from first to last"
    return text


def line_markdown(doc: KernelDocument, line: int) -> str | None:
    """Hover text for a kernel line (1-based, current numbering), or None if the profile says nothing."""
    result = doc.result
    if result is None or result.error or not result.lines:
        return None
    old = doc.profiled_line_of(line)
    if old is None:
        return None
    info = profiled_info(doc)
    entry = next((e for e in result.lines if e["line"] == old), None)
    loop_here = next((loop for loop in info.loops if loop.line == old), None)
    if entry is None and loop_here is None:
        return None
    parts: list[str] = []
    if entry is not None:
        share = line_share(result).get(old, 0.0)
        parts.append(f"**{ms(entry['time_ms'])}** · {fraction(share)} of the kernel's busy time "
                     f"({measured_on(result)})")
        engines = sorted((entry.get("engines") or {}).items(), key=lambda item: -item[1])
        detail = ", ".join(f"{name} {ms(t)}" for name, t in engines)
        parts.append(f"- engine: **{entry['engine']}**" + (f" ({detail})" if len(engines) > 1 else ""))
        parts.append(f"- instructions: {entry['instructions']:,}")
        text = bytes_text(entry, result)
        if text:
            parts.append(f"- bytes moved: {text}")
    loop = loop_here or enclosing_loop(info, old)
    if loop is not None:
        parts.append(f"- {'this loop' if loop_here else 'loop'}: {loop_text(loop, result)}")
    parts += [f"- assumes {assumption['description']}"
              for assumption in on_line(result.profile.get("assumptions"), old)]
    if doc.outdated:
        parts.append("\n_profile of the text before your latest edits_")
    return "\n".join(parts)


def summary_markdown(doc: KernelDocument) -> str | None:
    """The kernel-name hover: the profile summary as a small markdown table."""
    result = doc.result
    link = doc.link
    if result is None:
        if doc.task_error:
            return f"**{doc.info.function}** · task `{link.label if link else '?'}`\n\nthe task fails: {doc.task_error}"
        return None
    title = f"**{doc.info.function}** · task `{link.label if link else result.task}` · {measured_on(result)}"
    if result.error:
        where = f" (line {result.error_line})" if result.error_line else ""
        return f"{title}\n\nthe kernel fails{where}: {result.error}"
    if result.unchecked and result.latency_ms is None:
        return f"{title}\n\n{result.unchecked_text(*EDITOR_LIMIT_KNOBS)}"
    p = result.profile
    bound = f" ({result.bound_text()})" if result.bound else ""
    rows = [
        ("latency", ms(result.latency_ms)),
        ("% of peak", percent(result.peak_percent, 1) + bound),
        ("bottleneck", str(p.get("bottleneck_summary") or result.bottleneck)),
        ("check", check_text(doc)),
        ("engines active", " · ".join(f"{label} {fraction(p.get(f'{key}_engine_active_time_percent'))}"
                                      if key != "dma" else f"{label} {fraction(p.get('dma_active_time_percent'))}"
                                      for label, key in ENGINES)),
        ("HBM", f"read {nbytes(p.get('hbm_read_bytes'))} · write {nbytes(p.get('hbm_write_bytes'))}"),
        ("SBUF", f"read {nbytes(p.get('sbuf_read_bytes'))} · write {nbytes(p.get('sbuf_write_bytes'))}"),
        ("PSUM", f"read {nbytes(p.get('psum_read_bytes'))} · write {nbytes(p.get('psum_write_bytes'))}"),
        ("Tensor engine", f"{flops(p.get('hardware_flops'))} ({flops(p.get('transpose_flops'))} of it transposes)"
                          if p.get("hardware_flops") else "no matmuls"),
        ("instructions", f"{p.get('instruction_count', 0):,}"),
    ]
    spilled = (p.get("spill_save_bytes") or 0) + (p.get("spill_reload_bytes") or 0)
    if spilled:
        rows.append(("SBUF spills", f"save {nbytes(p.get('spill_save_bytes'))} · "
                                    f"reload {nbytes(p.get('spill_reload_bytes'))}"))
    assumed = in_brief(p.get("assumptions"))
    if assumed:
        rows.append(("compiler assumed", f"{assumed} (hover a line for what it changes)"))
    table = "\n".join(["| | |", "|---|---|", *(f"| {k} | {v.replace('|', '/')} |" for k, v in rows)])
    note = "\n\n_profile of the text before your latest edits_" if doc.outdated else ""
    return f"{title}\n\n{table}{note}"


def report(doc: KernelDocument, hardware: str, backend: str) -> dict[str, Any]:
    """The whole picture of one kernel as JSON, for the extension's panel (accelopt/report)."""
    import linecache

    from accelopt_core.report import render

    if doc.path:
        linecache.checkcache(doc.path)  # render() reads kernel lines through linecache
    result = doc.result
    source = doc.profiled_source or doc.source
    text_lines = source.splitlines()
    lines = []
    if result is not None and not result.error:
        share = line_share(result)
        for entry in result.lines:
            moved = line_bytes(entry, result)
            lines.append({**entry, "share": share.get(entry["line"], 0.0),
                          "text": text_lines[entry["line"] - 1].strip() if 0 < entry["line"] <= len(text_lines) else "",
                          "currentLine": doc.current_line_of(entry["line"]),
                          "bytes": entry.get("bytes", moved[0] if moved else None),
                          "bytesExact": "bytes" in entry or (moved[1] if moved else None)})
    link = doc.link
    return {
        "uri": doc.uri,
        "path": doc.path,
        "kernel": doc.info.function,
        "task": link.label if link else None,
        "taskOrigin": link.origin if link else None,
        "reference": link.reference_path if link else None,
        "hardware": doc.hardware(hardware),
        "backend": backend,
        "phase": doc.phase,
        "outdated": doc.outdated,
        "taskError": doc.task_error,
        "failure": doc.failure,
        "result": result.to_dict() if result is not None else None,
        "trace": doc.trace.to_dict() if doc.trace is not None and doc.trace is not result else None,
        "lines": lines,
        "quickFixes": [{"rule": f.rule, "line": f.line, "description": f.description, "priority": f.priority,
                        "baseline_ms": f.baseline_ms, "estimated_ms": f.estimated_ms, "checked": f.checked}
                       for f in doc.current_fixes()],
        "rewrites": [{"title": r.title, "speedup": r.speedup, "latency_ms": r.latency_ms, "plan": r.plan,
                      "peak_percent": r.peak_percent, "seeds": r.seeds} for r in doc.current_rewrites()],
        "search": ({"running": True, "stopping": doc.search.stopping,
                    "lastEvent": vars(doc.search.last_event) if doc.search.last_event is not None else None}
                   if doc.search is not None else {"running": False}),
        "lastSearch": doc.last_search,
        "history": search_history(doc),
        "text": render(result, doc.path if not doc.outdated else None, limit_knobs=EDITOR_LIMIT_KNOBS)
        if result is not None else "",
    }


def search_history(doc: KernelDocument) -> list[dict[str, Any]]:
    """The best kernel so far, point by point: of the running search while one runs, else of the last one.

    Point 0 is the baseline as the search timed it, point k the best after the search's k-th iteration
    (the "iteration k/N" of the progress messages). The search's own records count from 0 and each holds
    the best *after* that iteration; shown as they were, "iteration 0" already carried the first round's
    winner (10.5 us for silu, where the profile said 15.7 us: the 1.49x rewrite found in that round) and
    read like a baseline timed differently. Both time the same full-size kernel (the small variant is
    only used to check results), so the baseline point matches the profile's latency."""
    if doc.search is not None:
        return list(doc.search.history)
    last = doc.last_search
    if last is None:
        return []
    base = last.get("base") or {}
    points = [{"iteration": 0, "best_latency_ms": base.get("latency_ms"),
               "best_peak_percent": base.get("peak_percent")}]
    return points + [{"iteration": h["iteration"] + 1, "best_latency_ms": h["best_latency_ms"],
                      "best_peak_percent": h["best_peak_percent"]} for h in last.get("history") or []]
