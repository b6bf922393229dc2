"""The optimization memory as markdown, for `accelopt.showMemory`: the lessons a search of this kernel
would be shown (top experiences of its task family on its hardware) and the task's recent searches."""

from __future__ import annotations

from typing import Any

TOP_EXPERIENCES = 8
RECENT_SEARCHES = 5


def _cell(text: str, width: int = 90) -> str:
    """One table cell: a single line, no pipes, cut to `width`."""
    line = " ".join(str(text or "").split()).replace("|", "\\|")
    return line if len(line) <= width else line[: width - 1] + "…"


def memory_markdown(memory: Any, task: str, family: str, hardware: str, path: str) -> str:
    experiences = memory.top_experiences(family, hardware, limit=TOP_EXPERIENCES)
    searches = memory.list_searches(task, hardware)[:RECENT_SEARCHES]
    out = [f"# AccelOpt memory: {task} on {hardware}", "",
           f"Task family `{family}`; memory `{path}`.", "",
           f"## Top experiences ({len(experiences)})", ""]
    if experiences:
        out += ["| speedup | task | lesson | from |", "| ---: | --- | --- | --- |"]
        for exp in experiences:
            mark = " (pinned)" if exp.pinned else ""
            lesson = exp.summary or exp.plan or "(no summary)"
            out.append(f"| {exp.speedup:.2f}x{mark} | {_cell(exp.task, 30)} | {_cell(lesson)} | "
                       f"{_cell(exp.label, 30)} |")
    else:
        out.append("No experiences yet: Optimize records what worked (and what did not) here.")
    out += ["", f"## Recent searches of {task} ({len(searches)})", ""]
    if searches:
        out += ["| search | status | planner | started | finished |", "| ---: | --- | --- | --- | --- |"]
        for info in searches:
            out.append(f"| {info.id} | {info.status} | {_cell(info.planner or '-', 30)} | {info.created} | "
                       f"{info.finished or '-'} |")
    else:
        out.append("No searches of this task yet.")
    return "\n".join(out) + "\n"
