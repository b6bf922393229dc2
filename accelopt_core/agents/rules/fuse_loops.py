"""fuse_loops: merge two adjacent loops over the same range into one.

`for k in R: A(k)` followed by `for j in R: B(j)` becomes `for k in R: A(k); B(k)`. One loop
instead of two lets the two bodies' instructions interleave (the second body's loads are issued
while the first body's matmuls run), and an intermediate written by the first body and read by the
second stays the current iteration's tile.

The check is syntactic and conservative: a variable written in one body and used in the other must
be a per-iteration temporary of both (rebound before use), an accumulator both only `+=` into, or
be accessed in both bodies at the same index, written in terms of the loop variable and of names
neither loop changes. Any other sharing (the second loop reading a whole buffer the first fills, a
value of the first loop's last iteration) keeps the loops apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ...profiling import ProfileResult
from . import cst_util as u
from .base import Plan, RuleError


def _locals(items: Sequence[u.Access]) -> set[str]:
    """Variables rebound before any other use: fresh in every iteration."""
    first: dict[str, str] = {}
    for access in items:
        first.setdefault(access.name, access.kind)
    return {name for name, kind in first.items() if kind == "bind"}


def _index_names(index: str) -> set[str]:
    return u.names_in(cst.parse_expression(f"_[{index}]")) - {"_"}


def _shared_ok(name: str, var: str, first: Sequence[u.Access], second: Sequence[u.Access],
               locals1: set[str], locals2: set[str], written: set[str]) -> bool:
    if name in locals1 and name in locals2:
        return True
    uses = [a for a in (*first, *second) if a.name == name]
    if all(a.kind == "accumulate" for a in uses):
        return True
    indices = {a.index for a in uses}
    if len(indices) != 1 or None in indices:
        return False
    names = _index_names(next(iter(indices)) or "")
    return var in names and not (names - {var}) & written


def fusion_problem(first: cst.For, second: cst.For, rest: Sequence[cst.BaseStatement]) -> str | None:
    """Why `first` and the loop right after it cannot be fused (`rest`: the statements after them)."""
    if first.orelse is not None or second.orelse is not None:
        return "a loop has an else branch"
    var, other = u.loop_var(first), u.loop_var(second)
    if var is None or other is None:
        return "a loop target is not a single name"
    if u.loop_kind(first) is None or u.flat(u.code_of(first.iter)) != u.flat(u.code_of(second.iter)):
        return "the loops do not run over the same range"
    if not u.block_statements(first) or not u.block_statements(second):
        return "a loop body is not an indented block"
    if var != other:
        if var in u.names_in(second.body):
            return f"the second loop already uses `{var}`"
        for stmt in rest:
            if other in u.names_in(stmt) and not (isinstance(stmt, cst.For) and u.loop_var(stmt) == other):
                return f"`{other}` is used after the loops"
    body2 = u.rename(second.body, other, var) if var != other else second.body
    items1 = [a for a in u.accesses(first.body) if a.name != var]
    items2 = [a for a in u.accesses(body2) if a.name != var]
    writes1 = {a.name for a in items1 if a.kind != "read"}
    writes2 = {a.name for a in items2 if a.kind != "read"}
    reads1 = {a.name for a in items1}
    reads2 = {a.name for a in items2}
    locals1, locals2 = _locals(items1), _locals(items2)
    written = writes1 | writes2
    for name in sorted((writes1 & reads2) | (writes2 & reads1)):
        if not _shared_ok(name, var, items1, items2, locals1, locals2, written):
            return f"`{name}` is written by one loop and used by the other at another iteration"
    return None


def pairs(module: cst.Module) -> list[tuple[cst.For, cst.For, Sequence[cst.BaseStatement]]]:
    """Adjacent loops that can be fused, with the statements that follow them."""
    found = []
    for func in u.functions(module):
        owners: list[cst.CSTNode] = [func, *(s.stmt for s in u.sites(func) if isinstance(s.stmt, cst.For | cst.If))]
        for owner in owners:
            body = list(u.block_statements(owner))
            for i in range(len(body) - 1):
                a, b = body[i], body[i + 1]
                if isinstance(a, cst.For) and isinstance(b, cst.For) and fusion_problem(a, b, body[i + 2:]) is None:
                    found.append((a, b, body[i + 2:]))
    return found


def fused(first: cst.For, second: cst.For) -> cst.For:
    """One loop: the first body, then the second with its loop variable renamed to the first's."""
    var, other = u.loop_var(first) or "", u.loop_var(second) or ""
    body2 = list(u.block_statements(u.rename(second, other, var) if var != other else second))
    lead = list(second.leading_lines)
    comment = second.body.header.comment if isinstance(second.body, cst.IndentedBlock) else None
    if comment is not None:
        lead.append(cst.EmptyLine(comment=comment))
    if body2:
        body2[0] = body2[0].with_changes(leading_lines=[*lead, *body2[0].leading_lines])
    return first.with_changes(body=first.body.with_changes(body=[*u.block_statements(first), *body2]))


class FuseLoops:
    """Fuse adjacent loops over the same range when no iteration of one needs another's result."""

    name = "fuse_loops"
    summary = ("Fuse adjacent loops over the same range into one, so the two bodies' loads and compute "
               "interleave and shared intermediates stay per iteration.")

    def plan(self, source: str, profile: ProfileResult | None) -> list[Plan]:
        module = u.parse(source)
        pos = u.positions(module)
        spans = u.loop_spans(profile)
        latency = u.latency_ms(profile)
        plans = []
        for first, second, _ in pairs(module):
            line, line2 = u.line_of(first, pos), u.line_of(second, pos)
            shorter = min(spans.get(line, 0.0), spans.get(line2, 0.0))
            priority = 0.02 * min(1.0, shorter / latency) if latency else 0.01
            plans.append(Plan(
                self.name, line,
                f"Fuse `for {u.loop_var(first)}` (line {line}) with the loop right after it, `for "
                f"{u.loop_var(second)}` (line {line2}), over the same range: their bodies then interleave "
                f"in one loop.",
                {"var": u.loop_var(first), "iter": u.flat(u.code_of(first.iter)), "var2": u.loop_var(second)},
                priority))
        plans.sort(key=lambda p: -p.priority)
        return plans

    def apply(self, source: str, plan: Plan) -> str:
        module = u.parse(source)
        pos = u.positions(module)
        params = plan.params
        matches = [(a, b) for a, b, _ in pairs(module)
                   if u.loop_var(a) == params["var"] and u.loop_var(b) == params["var2"]
                   and u.flat(u.code_of(a.iter)) == params["iter"]]
        first = u.locate([a for a, _ in matches], pos, plan.line, "the pair of loops to fuse")
        second = next(b for a, b in matches if a is first)
        assert isinstance(first, cst.For)
        if fusion_problem(first, second, []) is not None:
            raise RuleError("the loops can no longer be fused")
        return u.rewrite(module, {id(first): [fused(first, second)], id(second): []}).code
