"""sequential_to_affine: turn `nl.sequential_range` (or a plain Python `range`, which legacy NKI
traces as sequential) into `nl.affine_range` when no loop-carried dependency is visible.

A sequential loop makes every iteration wait for the previous one to finish, so the next tile's
DMA cannot overlap this tile's compute; affine iterations are ordered by their data only. The test
is syntactic and conservative, per variable the loop body writes:

* rebound (`x = ...`) before any use in the body: a per-iteration temporary;
* only accumulated (`acc += ...`, `acc[i] += ...`) and never read in the loop: an associative
  reduction, which affine_range allows;
* written through an index (`out[rows, cols] = ...`, `nl.store(out[...])`) that depends on the loop
  variable, and read in the loop only at exactly the same index: each iteration owns its slice.

Anything else (a carry `state = f(state)`, a `carry[...] = ...` read by the next scan, a store to a
fixed place) keeps the loop sequential. The plan says the search's correctness check has the last
word, since a syntactic test cannot see everything (e.g. two indices that overlap).
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ...profiling import ProfileResult
from . import cst_util as u
from .base import Plan, RuleError

_WRITES = ("bind", "write", "accumulate")


def _is_kernel_loop(loop: cst.For) -> bool:
    """A sequential loop, or a Python range whose body issues NKI work."""
    kind = u.loop_kind(loop)
    if kind == "sequential":
        return True
    if kind != "range":
        return False
    return any((u.call_name(node) or "").startswith(("nl.", "nisa.")) for node in u.walk(loop.body))


def _binding_value(body: Sequence[cst.BaseStatement], node: cst.CSTNode) -> cst.BaseExpression | None:
    """The value assigned by the statement whose target is `node`."""
    for stmt in body:
        for item in u.walk(stmt):
            if isinstance(item, cst.Assign) and any(u.contains(t.target, node) for t in item.targets):
                return item.value
    return None


def carried_dependency(loop: cst.For) -> str | None:
    """A variable through which one iteration may see another's result, or None."""
    var = u.loop_var(loop)
    if var is None:
        return "the loop target is not a single name"
    if loop.orelse is not None:
        return "the loop has an else branch"
    body = list(u.block_statements(loop))
    if not body:
        return "the loop body is not an indented block"
    items = [a for stmt in body for a in u.accesses(stmt)]
    loop_dependent = u.dependents(body, {var})
    by_name: dict[str, list[u.Access]] = {}
    for access in items:
        by_name.setdefault(access.name, []).append(access)
    for name, uses in by_name.items():
        if name == var or not any(a.kind in _WRITES for a in uses):
            continue
        first = uses[0]
        if first.kind == "bind":
            value = _binding_value(body, first.node)
            later_writes = [a for a in uses if a.kind in ("write", "accumulate")]
            if later_writes and not isinstance(value, cst.Call):
                return f"`{name}` is a view of another tensor that the loop writes"
            continue  # a fresh value in every iteration
        kinds = {a.kind for a in uses}
        if kinds == {"accumulate"}:
            continue  # an associative reduction into a buffer made outside the loop
        if "bind" in kinds:
            return f"`{name}` is read before the loop rebinds it: its value flows to the next iteration"
        if "accumulate" in kinds:
            return f"`{name}` is accumulated and also read in the loop"
        writes = [a for a in uses if a.kind == "write"]
        indices = {a.index for a in writes}
        for write in writes:
            if write.index is None:
                return f"`{name}` is written as a whole in every iteration"
            index_names = u.names_in(cst.parse_expression(f"_[{write.index}]")) - {"_"}
            if not index_names & loop_dependent:
                return f"`{name}` is written at an index that does not depend on `{var}`"
        for read in (a for a in uses if a.kind == "read"):
            if read.index is None or read.index not in indices:
                return f"`{name}` is read at another place than the iteration writes it"
    return None


def kernel_loops(module: cst.Module) -> list[cst.For]:
    return [site.stmt for func in u.functions(module) for site in u.sites(func)
            if isinstance(site.stmt, cst.For) and _is_kernel_loop(site.stmt)]


class SequentialToAffine:
    """Make sequential kernel loops affine when no loop-carried dependency is visible."""

    name = "sequential_to_affine"
    summary = ("Turn sequential_range (or Python range) kernel loops without a visible loop-carried dependency "
               "into affine_range, so iterations overlap: the next tile's DMA runs under this tile's compute.")

    def plan(self, source: str, profile: ProfileResult | None) -> list[Plan]:
        module = u.parse(source)
        pos = u.positions(module)
        spans = u.loop_spans(profile)
        latency = u.latency_ms(profile)
        plans = []
        for loop in kernel_loops(module):
            if carried_dependency(loop) is not None:
                continue
            line = u.line_of(loop, pos)
            kind = "Python range" if u.loop_kind(loop) == "range" else "sequential_range"
            priority = 0.05 * min(1.0, spans.get(line, 0.0) / latency) if latency else 0.01
            plans.append(Plan(
                self.name, line,
                f"Make the {kind} loop `for {u.loop_var(loop)}` (line {line}) an affine_range: no iteration reads "
                f"what another writes (as far as the source shows; the correctness check confirms), so "
                f"iterations can overlap.",
                {"var": u.loop_var(loop), "iter": u.flat(u.code_of(loop.iter))}, priority))
        plans.sort(key=lambda p: -p.priority)
        return plans

    def apply(self, source: str, plan: Plan) -> str:
        module = u.parse(source)
        pos = u.positions(module)
        matches = [loop for loop in kernel_loops(module)
                   if u.loop_var(loop) == plan.params["var"] and u.flat(u.code_of(loop.iter)) == plan.params["iter"]]
        loop = u.locate(matches, pos, plan.line, f"the loop `for {plan.params['var']}`")
        assert isinstance(loop, cst.For)
        problem = carried_dependency(loop)
        if problem is not None:
            raise RuleError(f"the loop now has a loop-carried dependency: {problem}")
        assert isinstance(loop.iter, cst.Call)
        language = u.alias_of(module, "neuronxcc.nki.language") or "nl"
        func = cst.Attribute(value=cst.Name(language), attr=cst.Name("affine_range"))
        new_loop = loop.with_changes(iter=loop.iter.with_changes(func=func))
        return u.replace_statement(module, loop, [new_loop]).code
