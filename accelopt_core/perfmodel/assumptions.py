"""What the latency assumes the compiler does: the allocation plan's decisions as data, per source line.

The model prices the kernel the Neuron compiler would run, not the one as written (allocator.py): a
repeated load kept on chip instead of issued again, loops merged, loads re-issued or values spilled where
SBUF overflows. A prediction resting on such a decision is only as good as the decision, so each one is
listed with the lines it concerns and what it changes: a tutorial matmul with two loops swapped was
predicted faster than its hand-blocked versions because a load repeated in its inner loop was assumed
removed, and nothing on the screen said so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from accelopt_core.nki.trace import Instruction, Op, Trace
from accelopt_core.perfmodel.allocator import AllocationPlan

REPEATED_LOAD = "repeated load removed"
REPEATED_TRANSPOSE = "repeated transpose removed"
REPEATED_COPY = "repeated copy removed"
DEAD = "dead instruction removed"
LOOPS_MERGED = "loops merged"
LOAD_REISSUED = "load issued again"
SPILLED = "spilled to HBM"
RELOADED = "reloaded from HBM"


@dataclass(slots=True)
class Assumption:
    """One compiler behaviour the latency assumes, summed over the instructions of one statement."""

    kind: str
    line: int  # the statement it changes
    related_lines: tuple[int, ...]  # e.g. the load whose result a removed repeat reuses, the loops merged with it
    instructions: int  # how many executions of the statement it concerns (instructions removed, loop runs merged)
    bytes_not_moved: int  # bytes the removed instructions would have read
    bytes_added: int  # HBM bytes it adds (loads issued again, spill saves and reloads)
    description: str

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["related_lines"] = list(self.related_lines)
        return data


def plan_assumptions(trace: Trace, plan: AllocationPlan) -> list[Assumption]:
    """Every decision of `plan` that changes what runs, one entry per kind and statement, in line order."""
    found: dict[tuple[str, int, tuple[int, ...]], list[int]] = {}  # -> [instructions, bytes not moved, bytes added]

    def add(kind: str, line: int, related: tuple[int, ...], count: int, not_moved: int, added: int) -> None:
        totals = found.setdefault((kind, line, related), [0, 0, 0])
        totals[0] += count
        totals[1] += not_moved
        totals[2] += added

    instructions = trace.instructions
    for i in np.flatnonzero(np.asarray(plan.same_as) >= 0).tolist():  # a million-instruction trace: few of them
        inst = instructions[i]
        add(_repeat_kind(inst), inst.line, (instructions[plan.same_as[i]].line,), 1, _read_bytes(inst), 0)
    for i in plan.dead:
        add(DEAD, instructions[i].line, (), 1, _read_bytes(instructions[i]), 0)
    for i in np.flatnonzero(plan.refetch).tolist():
        line = instructions[i].line
        add(LOAD_REISSUED, plan.refetch_line[i] or line, (line,), 1, 0, plan.refetch[i])
    for kind, amounts in ((SPILLED, plan.save), (RELOADED, plan.reload)):
        for i in np.flatnonzero(amounts).tolist():
            add(kind, instructions[i].line, (), 1, 0, amounts[i])
    for lines, runs in plan.merged_loops.items():
        for line in lines:
            add(LOOPS_MERGED, line, tuple(other for other in lines if other != line), runs, 0, 0)
    result = [Assumption(kind, line, related, *totals, description="")
              for (kind, line, related), totals in found.items()]
    for assumption in result:
        assumption.description = _describe(assumption, plan)
    return sorted(result, key=lambda a: (a.line, a.kind, a.related_lines))


def on_line(assumptions: list[dict[str, Any]] | None, line: int) -> list[dict[str, Any]]:
    """The assumptions (a profile's `assumptions`) that change statement `line`."""
    return [a for a in assumptions or [] if a.get("line") == line]


def in_brief(assumptions: list[dict[str, Any]] | None) -> str | None:
    """Each kind of assumption with the lines it concerns (`repeated load removed (line 10)`), None if none."""
    lines_of: dict[str, list[int]] = {}
    for a in assumptions or []:
        lines = lines_of.setdefault(a["kind"], [])
        if a["line"] not in lines:
            lines.append(a["line"])
    return " · ".join(f"{kind} ({_lines(tuple(lines))})" for kind, lines in lines_of.items()) or None


def _repeat_kind(inst: Instruction) -> str:
    from_hbm = bool(inst.reads) and inst.reads[0].buffer == "hbm"
    if inst.op == Op.NC_TRANSPOSE or (not from_hbm and (inst.attrs or {}).get("transpose")):
        return REPEATED_TRANSPOSE
    return REPEATED_LOAD if from_hbm else REPEATED_COPY


def _read_bytes(inst: Instruction) -> int:
    return sum(acc.nbytes for acc in inst.reads)


def _lines(lines: tuple[int, ...]) -> str:
    return "line " + str(lines[0]) if len(lines) == 1 else "lines " + ", ".join(map(str, lines))


def _describe(a: Assumption, plan: AllocationPlan) -> str:
    """One sentence saying what the compiler is assumed to do and what that changes."""
    times = f"{a.instructions:,} time{'s' if a.instructions != 1 else ''}"
    if a.kind in (REPEATED_LOAD, REPEATED_TRANSPOSE, REPEATED_COPY):
        what = {REPEATED_LOAD: "loads HBM data", REPEATED_TRANSPOSE: "transposes a value",
                REPEATED_COPY: "copies a value"}[a.kind]
        source = ("an earlier execution of this line" if a.related_lines == (a.line,)
                  else _lines(a.related_lines))
        return (f"{a.kind}: {times} this line {what} that {source} already brought on chip; the compiler is"
                f" assumed to keep that result instead ({a.bytes_not_moved:,} bytes not moved)")
    if a.kind == DEAD:
        return (f"{a.kind}: {times} what this line computes only feeds removed repeats, so it is assumed"
                f" removed with them ({a.bytes_not_moved:,} bytes not moved)")
    if a.kind == LOOPS_MERGED:
        return (f"{a.kind}: this loop and the one on {_lines(a.related_lines)} are assumed run as one loop,"
                f" iteration by iteration ({times}), so what one writes stays on chip for the other: live SBUF"
                f" {plan.unmerged_peak_bytes_per_partition:,} B/partition in program order,"
                f" {plan.peak_bytes_per_partition:,} merged")
    if a.kind == LOAD_REISSUED and a.related_lines == (a.line,):  # a single load that gave way: its line is not kept
        return (f"{a.kind}: SBUF cannot hold loaded data until this line uses it, so it is assumed loaded again"
                f" before this line ({times}, {a.bytes_added:,} bytes read from HBM)")
    if a.kind == LOAD_REISSUED:
        return (f"{a.kind}: SBUF cannot hold what this load brought in until its use on {_lines(a.related_lines)},"
                f" so the load is assumed issued again there ({times}, {a.bytes_added:,} bytes read from HBM)")
    verb = "saved to" if a.kind == SPILLED else "reloaded from"
    return (f"{a.kind}: SBUF overflows here, so computed values are assumed {verb} HBM ({times},"
            f" {a.bytes_added:,} bytes)")
