"""interchange_loops: swap two nested kernel loops when a load in the inner loop does not depend
on the outer loop variable: after the swap the load sits in the new inner loop without depending on
it, and hoist_invariant can take it out. Tiled matmuls are written row tile outside, column tile
inside, so every row tile reloads the same weight tiles from HBM; with the column loop outside,
each weight tile is needed for one column tile only and can be loaded once.

The inner loop must be the last statement of the outer loop's body. Statements before it (the
row tile's own loads and transposes, in a matmul) move into the new inner loop and are recomputed
for every iteration of the new outer loop: allowed only when they write nothing but variables they
bind themselves and read nothing the inner loop writes. Both loops must be `affine_range` (no
loop-carried dependency), or a `static_range` or Python `range` loop in which the shared analysis finds
no value handed from one iteration to the next (`KernelModel.carried`), so the order of their iterations
is free: the outer loop's iterations are then independent of each other, and so are the inner loop's
within one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst

from . import cst_util as u
from .analysis import KernelModel, ModelRule, Statement, model_of
from .base import Plan, RuleError


@dataclass(frozen=True)
class Nest:
    """An outer loop, the inner loop ending its body, and the statements before the inner loop."""

    outer: cst.For
    inner: cst.For

    @property
    def prefix(self) -> Sequence[cst.BaseStatement]:
        return u.block_statements(self.outer)[:-1]

    @property
    def outer_var(self) -> str:
        return u.loop_var(self.outer) or ""

    @property
    def inner_var(self) -> str:
        return u.loop_var(self.inner) or ""


def _free_reads(statements: Sequence[cst.CSTNode]) -> tuple[set[str], set[str]]:
    """(names read before these statements bind them, names they bind or mutate)."""
    bound: set[str] = set()
    free: set[str] = set()
    for stmt in statements:
        for access in u.accesses(stmt):
            if access.kind in ("read", "accumulate") and access.name not in bound:
                free.add(access.name)
            elif access.kind == "bind":
                bound.add(access.name)
    return free, bound


def nest_problem(outer: cst.For, inner: cst.For, model: KernelModel | None = None) -> str | None:
    """Why the two loops cannot be swapped, or None when they can. A `static_range` or `range` loop
    needs `model` (of the function holding the loops) to show it carries no value between iterations."""
    body = u.block_statements(outer)
    if not body or body[-1] is not inner:
        return "the inner loop is not the last statement of the outer loop"
    if outer.orelse is not None or inner.orelse is not None:
        return "a loop has an else branch"
    outer_var, inner_var = u.loop_var(outer), u.loop_var(inner)
    if not outer_var or not inner_var or outer_var == inner_var:
        return "the loop variables are not two distinct names"
    for loop in (outer, inner):
        if u.loop_kind(loop) == "affine":
            continue
        why = model.reorder_problem(model.loop(loop)) if model is not None else "no analysis of its iterations"
        if why:
            return f"`for {u.loop_var(loop)}`: {why}"
    prefix = body[:-1]
    written_before = {outer_var} | set().union(*(u.names_written(s) for s in prefix))
    if u.names_in(inner.iter) & written_before:
        return "the inner loop's range depends on the outer loop"
    free, bound = _free_reads(prefix)
    for stmt in prefix:
        for access in u.accesses(stmt):
            if access.kind in ("write", "accumulate") and access.name not in bound:
                return f"the statements between the loops write `{access.name}`, which they do not create"
    if free & bound:
        return f"the statements between the loops update `{sorted(free & bound)[0]}` from its previous value"
    clash = free & u.names_written(inner.body)
    if clash:
        return f"the inner loop writes `{sorted(clash)[0]}`, which the statements before it read"
    return None


def nests(module: cst.Module) -> list[Nest]:
    """Every swappable pair of nested loops in the module."""
    found = []
    for func in u.functions(module):
        for site in u.sites(func):
            stmt = site.stmt
            if isinstance(stmt, cst.For):
                body = u.block_statements(stmt)
                if not body or not isinstance(body[-1], cst.For):
                    continue
                if nest_problem(stmt, body[-1], nest_model(module, func, stmt, body[-1])) is None:
                    found.append(Nest(stmt, body[-1]))
    return found


def nest_model(module: cst.Module, func: cst.FunctionDef, *loops: cst.For) -> KernelModel | None:
    """The analysis of `func` when one of `loops` is not an `affine_range` (its iterations must be
    shown independent), else None: affine loops need none."""
    if all(u.loop_kind(loop) == "affine" for loop in loops):
        return None
    return model_of(module, function=func.name.value)


def swapped(nest: Nest) -> cst.For:
    """The loop nest with the two loops exchanged (the statements before the inner loop go first
    in the new inner loop); comments on each `for` line stay with their loop."""
    prefix = list(nest.prefix)
    inner_body = list(u.block_statements(nest.inner))
    if inner_body and nest.inner.leading_lines:
        inner_body[0] = inner_body[0].with_changes(
            leading_lines=[*nest.inner.leading_lines, *inner_body[0].leading_lines])
    new_inner = nest.outer.with_changes(
        leading_lines=[], body=nest.outer.body.with_changes(body=[*prefix, *inner_body]))
    return nest.inner.with_changes(
        leading_lines=nest.outer.leading_lines, body=nest.inner.body.with_changes(body=[new_inner]))


def find_nest(module: cst.Module, params: dict[str, Any], line: int | None = None) -> Nest:
    """The nest the params name (loop variables and ranges), or RuleError."""
    pos = u.positions(module)
    matches = [n for n in nests(module)
               if n.outer_var == params["outer_var"] and n.inner_var == params["inner_var"]
               and u.flat(u.code_of(n.outer.iter)) == params["outer_iter"]
               and u.flat(u.code_of(n.inner.iter)) == params["inner_iter"]]
    if not matches:
        raise RuleError(f"no swappable loops `for {params['outer_var']}` / `for {params['inner_var']}` any more")
    outer = u.locate([n.outer for n in matches], pos, line or 0, "the loop nest")
    return next(n for n in matches if n.outer is outer)


def interchange(module: cst.Module, params: dict[str, Any], line: int | None = None) -> cst.Module:
    nest = find_nest(module, params, line)
    return u.replace_statement(module, nest.outer, [swapped(nest)])


def nest_params(nest: Nest) -> dict[str, Any]:
    return {"outer_var": nest.outer_var, "outer_iter": u.flat(u.code_of(nest.outer.iter)),
            "inner_var": nest.inner_var, "inner_iter": u.flat(u.code_of(nest.inner.iter))}


_LOADS = frozenset({"nl.load", "nisa.dma_copy", "nl.load_transpose2d", "nisa.dma_transpose"})


def invariant_loads(model: KernelModel, nest: Nest) -> list[Statement]:
    """Loads in the inner loop that read the same data in every iteration of the outer one (the
    shared analysis' question): after the swap they are invariant of the new inner loop."""
    outer, inner = model.loop(nest.outer), model.loop(nest.inner)
    return [op for op in model.ops_in(inner) if op.call in _LOADS and model.invariant(op, outer) is None]


class InterchangeLoops(ModelRule):
    """Swap two nested loops with independent iterations (row and column tiles of a matmul) so the weight loads no
    longer depend on the inner loop; the swap only prepares a hoist, which then loads them once per outer iteration:
    fewer HBM bytes for a DMA-bound kernel."""

    name = "interchange_loops"

    def plans(self, model: KernelModel) -> list[Plan]:
        module, pos = model.module, model.pos
        engines, trips, latency = model.line_engines, model.profile_trips, model.latency
        plans = []
        for nest in nests(module):
            loads = invariant_loads(model, nest)
            if not loads:
                continue
            outer_line, inner_line = u.line_of(nest.outer, pos), u.line_of(nest.inner, pos)
            load_lines = sorted({load.line for load in loads})
            priority = 0.0
            if latency:
                # what hoisting the loads afterwards could save, against the recomputed prefix
                saved: dict[str, float] = {}
                for line in load_lines:
                    u.add_times(saved, engines.get(line, {}), 1 - 1 / max(trips.get(outer_line, 1), 1))
                added: dict[str, float] = {}
                for stmt in nest.prefix:
                    u.add_times(added, u.engine_times_under(stmt, pos, engines, trips.get(inner_line, 1) - 1))
                gain = u.predicted_gain(model.profile, saved, added)
                if gain <= 0:
                    continue  # even hoisted afterwards, the recomputed prefix costs more than it saves
                priority = 0.5 * min(1.0, gain / latency)  # an enabler: the hoist gets the gain
            recompute = (f"; the {len(nest.prefix)} statement(s) before `for {nest.inner_var}` are recomputed "
                         f"for every `{nest.inner_var}`") if nest.prefix else ""
            where = ", ".join(str(line) for line in load_lines)
            plans.append(Plan(
                self.name, outer_line,
                f"Swap loops `for {nest.outer_var}` (line {outer_line}) and `for {nest.inner_var}` (line "
                f"{inner_line}) so the load(s) on line(s) {where} no longer depend on the inner loop (this only "
                f"swaps the loops: hoisting those loads is a separate step){recompute}.",
                nest_params(nest), priority))
        plans.sort(key=lambda p: -p.priority)
        return plans

    def rewrite(self, source: str, plan: Plan) -> str:
        module = interchange(u.parse(source), plan.params, plan.line)
        return module.code
