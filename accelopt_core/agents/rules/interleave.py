"""interleave_iterations: unroll an innermost loop by two and interleave the copies statement by
statement, so an engine that runs a chain of dependent instructions always has an independent one to
issue.

Each engine runs its instructions in program order, and an instruction that needs the previous one's
result waits for it to finish and for its result to be visible (the static overhead and the access
latency of the engine, fact sheet A.5: about 60 cycles to start an SBUF access, and more per
instruction when each depends on the one before). A loop body that is one such chain (compiler-style
element-wise code: v13 from v12, v14 from v13, ...) pays that wait at every step. With two iterations
interleaved, `s1(0), s1(1), s2(0), s2(1), ...`, the engine issues `s1(1)` while `s1(0)`'s result
lands: the same instructions, the waits hidden.

Legal for an `affine_range` loop (iterations independent), or a `static_range` or Python `range` loop that
passes no value from one iteration to the next (the shared analysis' `carried`, asked of every form: it
also finds a tensor written at a place that does not follow the loop), written `range(n)` or
`range(start, stop, step)` with static start and step, with a trip count
divisible by two whose body has no inner loop and no accumulation; names the body binds are renamed per copy
(and must not be used after the loop), everything it writes through an index is indexed by the loop variable.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from . import cst_util as u
from .analysis import ForLoop, KernelModel, ModelRule, model_of
from .base import Plan

_FACTOR = 2
_MIN_CHAIN = 3  # statements on one engine that depend on each other, for the wait to matter


def _trips(model: KernelModel, loop: ForLoop, known: int | None = None) -> int | None:
    """The loop's trip count: static, else the profile's, else `known` (the plan's)."""
    found = next((t for t in (loop.trips, model.profile_trips.get(loop.line), known) if t is not None), None)
    return int(found) if found is not None and found == int(found) else None


def _candidates(model: KernelModel, known: int | None = None) -> list[tuple[ForLoop, str | None]]:
    """Innermost loops and why they cannot be interleaved (None: they can)."""
    out = []
    for loop in model.loops:
        if any(other.parent is loop for other in model.loops):
            continue
        out.append((loop, _problem(model, loop, _trips(model, loop, known))))
    return out


def _problem(model: KernelModel, loop: ForLoop, trips: int | None) -> str | None:
    # a value handed to the next iteration would tie the copies together (and the renamed copies would
    # read names nothing binds), whatever the loop form promises
    reordered = model.reorder_problem(loop) or model.carried(loop)
    if reordered:
        return reordered
    if trips is None or trips < _FACTOR or trips % _FACTOR:
        return f"the trip count is not a known multiple of {_FACTOR}"
    body = u.code_statements(loop.node)
    if any(not isinstance(s, cst.SimpleStatementLine) for s in body):
        return "the body is not a sequence of simple statements"
    ops = [op for op in model.ops_in(loop) if not u.is_marker(op.stmt)]
    if any(r.kind == "accumulate" for op in ops for r in op.refs):
        return "the body accumulates across iterations"
    if not loop.counted and (loop.start is None or loop.step is None):
        return "the loop's start or step is not a known integer"
    bound = {r.name for op in ops for r in op.refs if r.kind == "bind"}
    after = [op for op in model.ops if op.order > max(o.order for o in ops) and loop not in op.loops]
    if any(r.name in bound for op in after for r in op.refs):
        return "a name the body binds is used after the loop"
    if _longest_chain(ops) < _MIN_CHAIN:
        return "no chain of dependent instructions on one engine"
    return None


def _longest_chain(ops: list[Any]) -> int:
    """The longest run of statements on one engine each reading what an earlier one of the run wrote."""
    best = 0
    depth: dict[int, int] = {}
    for i, op in enumerate(ops):
        if op.engine is None:
            continue
        reads = {r.name for r in op.reads}
        depth[i] = 1 + max((depth[j] for j in depth if ops[j].engine == op.engine
                            and reads & {r.name for r in ops[j].writes}), default=0)
        best = max(best, depth[i])
    return best


def interleaved(loop: ForLoop, body: list[cst.BaseStatement], bound: list[str], trips: int
                ) -> cst.For | list[cst.BaseStatement]:
    """The loop unrolled by two, the copies' statements alternating (names the body binds renamed
    per copy); fully unrolled when it had two iterations."""
    var = loop.var or ""
    full = trips == _FACTOR
    copies: list[list[cst.BaseStatement]] = []
    for r in range(_FACTOR):
        index = _copy_value(loop, r, full)
        stmts = []
        for stmt in body:
            new = u.rewrite(stmt, names={id(n): index for n in u.name_nodes(stmt) if n.value == var})
            for name in bound:
                new = u.rename(new, name, f"{name}_{r}")
            stmts.append(new.with_changes(leading_lines=[] if r else new.leading_lines))
        copies.append(stmts)
    mixed = [s for group in zip(*copies, strict=True) for s in group]
    if full:
        mixed[0] = mixed[0].with_changes(leading_lines=[*loop.node.leading_lines, *mixed[0].leading_lines])
        return mixed
    return loop.node.with_changes(iter=_halved(loop), body=loop.node.body.with_changes(body=mixed))


def _copy_value(loop: ForLoop, r: int, full: bool) -> cst.BaseExpression:
    """What the loop variable is in copy `r` of the unrolled body: the value itself when the loop is
    unrolled fully, else an expression of the new loop's variable (parenthesized: it replaces the
    variable inside larger expressions such as `r * 128`)."""
    var = loop.var or ""
    if loop.counted:
        if full:
            return cst.Integer(str(r))
        return cst.parse_expression(f"({_FACTOR} * {var} + {r})" if r else f"({_FACTOR} * {var})")
    start, step = int(loop.start or 0), int(loop.step or 1)  # known: _problem declines the loop otherwise
    if full:
        return cst.parse_expression(str(start + r * step))
    return cst.parse_expression(f"({var} + {r * step})" if r else var)


def _halved(loop: ForLoop) -> cst.Call:
    """The loop header with half the iterations: `range(n // 2)`, or `range(a, b, 2 * s)` for a header
    with a start and a step (the variable keeps its values in the first copy)."""
    call = loop.node.iter
    assert isinstance(call, cst.Call)
    args = u.loop_args(loop.node)
    if loop.counted:
        count = u.code_of(args[0].value)
        return call.with_changes(args=[args[0].with_changes(value=cst.parse_expression(f"({count}) // {_FACTOR}"))])
    doubled = cst.parse_expression(f"{_FACTOR} * ({u.code_of(args[2].value)})" if len(args) == 3 else str(_FACTOR))
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return call.with_changes(args=[args[0].with_changes(comma=comma), args[1].with_changes(comma=comma),
                                   cst.Arg(doubled)])


class InterleaveIterations(ModelRule):
    """Unroll an innermost loop by two and interleave the copies' statements: an engine running a chain of dependent
    instructions issues the other copy's instruction while a result lands."""

    name = "interleave_iterations"

    def plans(self, model: KernelModel) -> list[Plan]:
        latency = model.latency or 0.0
        busy = 1e3 * max(model.busy().values(), default=0.0)
        waiting = max(0.0, latency - busy)  # the kernel takes longer than its busiest engine is busy
        plans = []
        for loop, problem in _candidates(model):
            if problem is not None:
                continue
            spent = sum(max(model.cost(op).values(), default=0.0) for op in model.ops_in(loop))
            priority = min(0.5, 0.5 * waiting / latency * min(1.0, spent / busy)) if latency and busy else 0.01
            plans.append(Plan(self.name, loop.line,
                              f"Unroll `for {loop.var}` (line {loop.line}) by {_FACTOR} and interleave the copies "
                              f"statement by statement: its chain of dependent instructions then always has an "
                              f"independent one to issue while a result lands.",
                              {"var": loop.var, "iter": u.flat(u.code_of(loop.node.iter)),
                               "trips": _trips(model, loop)}, priority))
        return plans

    def rewrite(self, source: str, plan: Plan) -> str:
        model = model_of(source)
        trips = int(plan.params["trips"])
        found = [lp for lp, problem in _candidates(model, trips) if problem is None and lp.var == plan.params["var"]
                 and u.flat(u.code_of(lp.node.iter)) == plan.params["iter"]]
        node = u.locate([lp.node for lp in found], model.pos, plan.line, "the loop to interleave")
        loop = model.loop(node)  # type: ignore[arg-type]
        bound = sorted({r.name for op in model.ops_in(loop) for r in op.refs if r.kind == "bind"})
        new = interleaved(loop, u.code_statements(loop.node), bound, _trips(model, loop, trips) or trips)
        module = u.rewrite(model.module, {id(loop.node): new if isinstance(new, list) else [new]})
        return u.compiled_code(module, "interleave_iterations")
