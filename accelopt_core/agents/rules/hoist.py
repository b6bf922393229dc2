"""hoist_invariant: move work that does not change from one loop iteration to the next out of the
loop, so it runs once.

Two forms:

* plain: a statement `x = <pure expression>` whose inputs are not written anywhere in the loop
  (an `nl.load` of a slice that does not use the loop variable, arithmetic on such tiles) moves
  in front of the loop, together with the index helpers it needs (`cols = n * 512 + i_n`);
* buffered: an `nl.load` that depends on inner loop variables (`k`, maybe `n`) but not on an outer
  loop (`m`) is done once for every value of those variables before the outer loop, into an SBUF
  block `x_buf = nl.ndarray((n_k, nl.par_dim(P), F))` filled by its own `affine_range` loop; the
  uses read `x_buf[k]`. This is what a tiled matmul needs: the weight tiles are otherwise reloaded
  from HBM for every row tile. The block must fit in the SBUF space the profile shows the kernel
  leaves free (usable bytes per partition minus its peak live bytes); without a profile, in half of
  an SBUF partition of the generation (its hardware profile: 96 KiB on trn1).

When the load depends on a loop between the outer loop and itself (the column tile `n` of a
matmul whose row loop `m` is outside), the plan may first swap those two loops (interchange_loops)
and then buffer the load out of the row loop, in one rewrite.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from . import cst_util as u
from .analysis import KernelModel, ModelRule, Statement, model_of
from .base import Plan, RuleError
from .interchange import Nest, interchange, nest_model, nest_params, nest_problem


@dataclass
class Tile:
    """The shape of a loaded tile, as source text (partition first) and, where known, numbers."""

    dims: list[str]
    free_values: list[float | None]
    itemsize: int
    dtype: str


@dataclass
class Hoist:
    """One statement and the loop it leaves, with everything the rewrite needs."""

    func: cst.FunctionDef
    stmt: cst.SimpleStatementLine
    name: str
    target: cst.For
    index_loops: list[cst.For] = field(default_factory=list)
    outer_companions: list[cst.BaseStatement] = field(default_factory=list)
    inner_companions: list[cst.BaseStatement] = field(default_factory=list)
    uses: list[cst.Name] = field(default_factory=list)
    tile: Tile | None = None

    @property
    def index_vars(self) -> list[str]:
        return [u.loop_var(loop) or "" for loop in self.index_loops]

    @property
    def mode(self) -> str:
        return "buffered" if self.index_loops else "plain"


def _value(stmt: cst.CSTNode) -> cst.BaseExpression | None:
    node = u.small(stmt)
    return node.value if isinstance(node, cst.Assign) and u.assigned_name(stmt) else None


def _worth_hoisting(value: cst.BaseExpression) -> bool:
    """Has an NKI call other than index helpers (arange, mgrid), or a tile method that is an instruction
    (`g.broadcast_to(shape)` runs on the Tensor engine, `t.astype(dt)` is a copy): moving it saves
    engine time."""
    cheap = ("nl.arange", "nl.mgrid", "nl.par_dim", "nl.program_id")
    for node in _calls(value):
        name = u.call_name(node) or ""
        if name.startswith(("nl.", "nisa.")) and name not in cheap:
            return True
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("broadcast_to", "astype"):
            return True
    return False


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    return [n for n in u.walk(node) if isinstance(n, cst.Call)]


def _is_load(value: cst.BaseExpression | None) -> bool:
    if not isinstance(value, cst.Call) or u.call_name(value) != "nl.load":
        return False
    positional = [a for a in value.args if a.keyword is None]
    keywords = {a.keyword.value for a in value.args if a.keyword is not None}
    return (len(positional) == 1 and keywords <= {"mask", "dtype"} and isinstance(positional[0].value, cst.Subscript)
            and isinstance(positional[0].value.value, cst.Name))


def _strip_blank(stmt: cst.BaseStatement) -> cst.BaseStatement:
    return stmt.with_changes(leading_lines=[line for line in stmt.leading_lines if line.comment is not None])


class _Analysis:
    """Whether one statement of the modelled kernel can leave one loop, and how (see `Hoist`)."""

    def __init__(self, model: KernelModel):
        self.model = model
        self.func = model.fn
        self.pos = model.pos
        self.env = model.env

    def _before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        pa, pb = self.pos[a].start, self.pos[b].start
        return (pa.line, pa.column) < (pb.line, pb.column)

    def run(self, stmt: cst.SimpleStatementLine, chain: Sequence[cst.For], target: cst.For) -> Hoist | str:
        """`stmt` (inside the loops `chain`, outermost first) out of `target`, or why not."""
        name, value = u.assigned_name(stmt), _value(stmt)
        if name is None or value is None:
            return "not a simple assignment"
        if not u.is_pure(value):
            return "the statement has side effects or allocates"
        if target not in chain:
            return "the statement is not inside that loop"
        below = list(chain[chain.index(target) + 1:])
        written = u.names_written(target)
        target_var = u.loop_var(target)
        loop_of = {u.loop_var(loop): loop for loop in below}
        blocks = [s for owner in (target, *below) for s in u.block_statements(owner)]
        companions: dict[str, cst.BaseStatement] = {}
        index_vars: set[str] = set()

        def need(names: set[str]) -> str | None:
            for var in sorted(names):
                if var not in written or var in companions or var in index_vars:
                    continue
                if var == target_var:
                    return f"it depends on the loop variable `{var}`"
                if var in loop_of:
                    index_vars.add(var)
                    continue
                if u.binding_count(target, var) != 1:
                    return f"`{var}` is written more than once in the loop"
                define = [s for s in blocks if u.assigned_name(s) == var and self._before(s, stmt)]
                if len(define) != 1 or not u.is_pure(_value(define[0]) or cst.Name("x")):
                    return f"`{var}` is not defined by one pure assignment before the statement"
                companions[var] = define[0]
                problem = need(u.names_in(_value(define[0]) or cst.Name("x")))
                if problem:
                    return problem
            return None

        problem = need(u.names_in(value))
        if problem:
            return problem
        if u.binding_count(target, name) != 1:
            return f"`{name}` is assigned more than once in the loop"
        index_loops = [loop for loop in below if u.loop_var(loop) in index_vars]
        for loop in index_loops:
            args = u.loop_args(loop)
            if u.loop_kind(loop) is None or len(args) != 1 or args[0].keyword is not None:
                return "an index loop is not a one-argument range"
            if u.names_in(loop.iter) & written:
                return "an index loop's range changes inside the loop"
        inner = u.dependents([companions[c] for c in companions], index_vars) - index_vars
        outer_companions = [s for s in blocks if s in companions.values() and u.assigned_name(s) not in inner]
        inner_companions = [s for s in blocks if s in companions.values() and u.assigned_name(s) in inner]
        for moved in (*outer_companions, stmt):
            moved_name = u.assigned_name(moved)
            for occurrence in u.name_nodes(target):
                if occurrence.value == moved_name and self._before(occurrence, moved):
                    return f"`{moved_name}` is used in the loop before it is assigned"
        uses = [n for n in u.name_nodes(target) if n.value == name and not u.contains(stmt, n)]
        hoist = Hoist(self.func, stmt, name, target, index_loops, outer_companions, inner_companions, uses)
        if index_loops:
            if not _is_load(value):
                return "only loads are buffered across loops"
            scope = index_loops[-1]
            if any(not u.contains(scope, n) for n in uses):
                return f"`{name}` is used outside the loop of `{u.loop_var(scope)}`"
            outside = [n for n in u.name_nodes(self.func) if n.value == name and not u.contains(target, n)]
            if outside:
                return f"`{name}` is also used outside the loop"
            for var in index_vars:
                if any(n.value == var and not any(isinstance(p, cst.For) and u.loop_var(p) == var
                                                  for p in _ancestors(self.func, n)) for n in u.name_nodes(self.func)):
                    return f"`{var}` is used outside the loops it indexes"
            tile = self.tile(value, companions, written)
            if isinstance(tile, str):
                return tile
            hoist.tile = tile
        return hoist

    def _resolve(self, expr: cst.BaseExpression, companions: Mapping[str, cst.BaseStatement],
                 depth: int = 0) -> cst.BaseExpression:
        """A Name followed to its single definition (companion or function-level), else itself."""
        if isinstance(expr, cst.Name) and depth < 8:
            if expr.value in companions:
                return self._resolve(_value(companions[expr.value]) or expr, companions, depth + 1)
            if expr.value in self.env:
                return self._resolve(self.env[expr.value], companions, depth + 1)
        return expr

    def _arange(self, expr: cst.BaseExpression, companions: Mapping[str, cst.BaseStatement],
                depth: int = 0) -> cst.BaseExpression | None:
        """The size argument of an `nl.arange` an index expression is built on, if any."""
        if depth > 8:
            return None
        for node in _calls(expr):
            if u.call_name(node) == "nl.arange" and len(node.args) == 1:
                return node.args[0].value
        for name in u.name_nodes(expr):
            resolved = self._resolve(name, companions)
            if resolved is not name and (found := self._arange(resolved, companions, depth + 1)) is not None:
                return found
        return None

    def _is_scalar(self, expr: cst.BaseExpression, companions: Mapping[str, cst.BaseStatement],
                   depth: int = 0) -> bool:
        """Integer arithmetic on constants, loop variables and names defined that way."""
        if depth > 8:
            return False
        if isinstance(expr, cst.Integer):
            return True
        if isinstance(expr, cst.Name):
            resolved = self._resolve(expr, companions)
            return resolved is expr or self._is_scalar(resolved, companions, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            return self._is_scalar(expr.left, companions, depth + 1) and self._is_scalar(expr.right, companions,
                                                                                           depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return self._is_scalar(expr.expression, companions, depth + 1)
        return False

    def _extent(self, lower: cst.BaseExpression | None, upper: cst.BaseExpression | None) -> cst.BaseExpression | None:
        """The length of `lower:upper` as an expression, for the shapes tiled code writes."""
        if upper is None:
            return None
        if lower is None:
            return upper
        if _is_op(lower, cst.Multiply) and _is_op(upper, cst.Multiply):  # i * T : (i + 1) * T
            assert isinstance(lower, cst.BinaryOperation) and isinstance(upper, cst.BinaryOperation)
            for base, size in ((lower.left, lower.right), (lower.right, lower.left)):
                for plus_one, size2 in ((upper.left, upper.right), (upper.right, upper.left)):
                    if _same(size, size2) and _is_plus_one(plus_one, base):
                        return size
        if _is_op(upper, cst.Add):  # a : a + T
            assert isinstance(upper, cst.BinaryOperation)
            if _same(upper.left, lower):
                return upper.right
            if _same(upper.right, lower):
                return upper.left
        lo, hi = u.static_value(lower, self.env), u.static_value(upper, self.env)
        if lo is not None and hi is not None:
            return cst.Integer(str(int(hi - lo)))
        return None

    def tile(self, load: cst.BaseExpression, companions: Mapping[str, cst.BaseStatement],
             written: set[str]) -> Tile | str:
        assert isinstance(load, cst.Call)
        sub = load.args[0].value
        assert isinstance(sub, cst.Subscript) and isinstance(sub.value, cst.Name)
        source = sub.value.value
        dims: list[cst.BaseExpression] = []
        for axis, element in enumerate(sub.slice):
            index = element.slice
            if isinstance(index, cst.Index):
                resolved = self._resolve(index.value, companions)
                if isinstance(resolved, cst.Call) and u.call_name(resolved) == "slice" and len(resolved.args) == 2:
                    extent = self._extent(resolved.args[0].value, resolved.args[1].value)
                    if extent is None:
                        return "a slice of the load has no evident length"
                    dims.append(extent)
                    continue
                size = self._arange(index.value, companions)
                if size is not None:
                    dims.append(size)
                elif not self._is_scalar(index.value, companions):
                    return "an index of the load is neither a slice, an arange nor an integer"
                continue  # an integer index drops the axis
            assert isinstance(index, cst.Slice)
            if index.step is not None:
                return "the load has a strided slice"
            if index.lower is None and index.upper is None:
                dims.append(cst.parse_expression(f"{source}.shape[{axis}]"))
                continue
            extent = self._extent(index.lower, index.upper)
            if extent is None:
                return "a slice of the load has no evident length"
            dims.append(extent)
        if not dims:
            return "the load reads a single element"
        for dim in dims:
            if u.names_in(dim) & written:
                return "the tile's shape changes inside the loop"
        dtype_arg = u.keyword(load, "dtype")
        itemsize = u.dtype_bytes(dtype_arg.value if dtype_arg else None) or u.ELEMENT_BYTES
        dtype = u.code_of(dtype_arg.value) if dtype_arg else f"{source}.dtype"
        return Tile([u.code_of(d) for d in dims], [u.static_value(d, self.env) for d in dims[1:]], itemsize, dtype)


def _strip_parens(text: str) -> str:
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1]
    return text


def _is_op(expr: cst.BaseExpression, op: type) -> bool:
    return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, op)


def _same(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    return _strip_parens(u.flat(u.code_of(a))) == _strip_parens(u.flat(u.code_of(b)))


def _is_plus_one(expr: cst.BaseExpression, base: cst.BaseExpression) -> bool:
    """`expr` is `base + 1` or `1 + base`."""
    if not isinstance(expr, cst.BinaryOperation) or not isinstance(expr.operator, cst.Add):
        return False
    one = (isinstance(expr.right, cst.Integer) and expr.right.value == "1" and _same(expr.left, base)) or \
          (isinstance(expr.left, cst.Integer) and expr.left.value == "1" and _same(expr.right, base))
    return bool(one)


def _ancestors(root: cst.CSTNode, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes from `root` down to `node`'s parent (empty when `node` is not under `root`)."""
    path: list[cst.CSTNode] = []

    def walk(current: cst.CSTNode) -> bool:
        if current is node:
            return True
        path.append(current)
        if any(walk(child) for child in u.children(current)):
            return True
        path.pop()
        return False

    walk(root)
    return path


def _indent(text: str, depth: int) -> str:
    pad = "    " * depth
    return "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))


def build(module: cst.Module, hoist: Hoist) -> cst.Module:
    """The module with the hoist done."""
    target = hoist.target
    removed: dict[int, list[cst.BaseStatement]] = {id(s): [] for s in (hoist.stmt, *hoist.outer_companions)}
    moved = [_strip_blank(s) for s in hoist.outer_companions]
    names: dict[int, cst.BaseExpression] = {}
    if hoist.tile is None:
        moved.append(_strip_blank(hoist.stmt))
    else:
        tile = hoist.tile
        buf = u.fresh_name(hoist.func, f"{hoist.name}_buf")
        counts = [u.code_of(u.loop_args(loop)[0].value) for loop in hoist.index_loops]
        shape = ", ".join([*counts, f"nl.par_dim({tile.dims[0]})", *tile.dims[1:]])
        head = f"{buf} = nl.ndarray(({shape}),"
        depth = sum(isinstance(node, cst.IndentedBlock) for node in _ancestors(module, target))
        gap = "\n" + " " * len(f"{buf} = nl.ndarray(") if 4 * depth + len(head) > 80 else " "
        moved.append(u.parse_statement(f"{head}{gap}dtype={tile.dtype}, buffer=nl.sbuf)\n"))
        lines = [f"for {var} in nl.affine_range({count}):\n"
                 for var, count in zip(hoist.index_vars, counts, strict=True)]
        text = "".join(_indent(line, level) for level, line in enumerate(lines))
        for stmt in hoist.inner_companions:
            text += _indent(u.code_of(stmt.with_changes(leading_lines=[])), len(lines))
        value = _value(hoist.stmt)
        assert value is not None
        comment = hoist.stmt.trailing_whitespace.comment
        tail = f"  {comment.value}" if comment is not None else ""
        text += _indent(f"{buf}[{', '.join(hoist.index_vars)}] = {u.code_of(value)}{tail}\n", len(lines))
        moved.append(u.parse_statement(text))
        access = cst.parse_expression(f"{buf}[{', '.join(hoist.index_vars)}]")
        names = {id(n): access for n in hoist.uses}
    new_target = u.rewrite(target, removed, names).with_changes(leading_lines=[])
    moved[0] = moved[0].with_changes(leading_lines=[*target.leading_lines, *moved[0].leading_lines])
    return u.replace_statement(module, target, [*moved, new_target])


def _loop_key(loop: cst.For) -> tuple[str, str]:
    return (u.loop_var(loop) or "", u.flat(u.code_of(loop.iter)))


class HoistInvariant(ModelRule):
    """Move loop-invariant loads and computations out of loops, buffering tiles that depend only on inner loops in
    an SBUF block, so each HBM tile is loaded once: fewer DMA bytes."""

    name = "hoist_invariant"

    # ---------------------------------------------------------------- planning

    def plans(self, model: KernelModel) -> list[Plan]:
        model = _with_declared_loads(model)
        ctx = _Context(model)
        analysis = _Analysis(model)
        plans: list[Plan] = []
        for op in model.ops:
            value = _value(op.stmt)
            chain = _leavable_loops(op)
            if value is None or not chain or not _worth_hoisting(value):
                continue
            plans.extend(self._plans_for(ctx, analysis, op.stmt, chain))
        plans.sort(key=lambda p: -p.priority)
        return plans

    def _plans_for(self, ctx: _Context, analysis: _Analysis, stmt: cst.SimpleStatementLine,
                   chain: tuple[cst.For, ...]) -> list[Plan]:
        best: tuple[Hoist, float] | None = None
        for target in chain:
            hoist = analysis.run(stmt, chain, target)
            if isinstance(hoist, str):
                continue
            gain = ctx.gain(ctx.engines_under(stmt, ctx.saved_share(hoist, chain)))
            if hoist.tile is not None and not ctx.fits(hoist):
                continue
            best = (hoist, gain)
            break
        plans = []
        if best is not None and (best[1] > 0 or ctx.latency is None):
            plans.append(self._plan(best[0], best[1], ctx))
        if _is_load(_value(stmt)) and (best is None or best[0].target is not chain[0]):
            swapped = self._with_interchange(ctx, stmt, chain, best[0].target if best else None)
            if swapped is not None and swapped.priority > (plans[0].priority if plans else -1.0):
                plans.append(swapped)
        return plans

    def _with_interchange(self, ctx: _Context, stmt: cst.SimpleStatementLine, chain: tuple[cst.For, ...],
                          limit: cst.For | None) -> Plan | None:
        """The best plan that swaps a loop with the one inside it, then buffers the load out of the
        loop that went inside."""
        model = ctx.model
        stop = chain.index(limit) if limit is not None else len(chain)
        found: Plan | None = None
        stmt_key = _statement_key(stmt)
        for outer, inner in itertools.pairwise(chain[:stop + 1]):
            if nest_problem(outer, inner, nest_model(model.module, model.fn, outer, inner)) is not None:
                continue
            params = nest_params(Nest(outer, inner))
            analysis = ctx.swapped(params, u.line_of(outer, ctx.pos))
            if analysis is None:
                continue
            for new_op in analysis.model.ops:
                if _statement_key(new_op.stmt) != stmt_key:
                    continue
                new_chain = _leavable_loops(new_op)
                new_target = next((loop for loop in new_chain if _loop_key(loop) == _loop_key(outer)), None)
                if new_target is None:
                    continue
                hoist = analysis.run(new_op.stmt, new_chain, new_target)
                if isinstance(hoist, str) or hoist.tile is None or not ctx.fits(hoist):
                    continue
                added: dict[str, float] = {}
                for moved in u.block_statements(outer)[:-1]:  # recomputed for every `inner` iteration
                    u.add_times(added, ctx.engines_under(moved, ctx.trip(inner) - 1))
                gain = ctx.gain(ctx.engines_under(stmt, ctx.saved_share(hoist, new_chain)), added)
                if ctx.latency is not None and gain <= 0:
                    continue
                plan = self._plan(hoist, gain, ctx, swap=(params, outer, inner), line=stmt)
                if found is None or plan.priority > found.priority:
                    found = plan
        return found

    def _plan(self, hoist: Hoist, gain: float, ctx: _Context,
              swap: tuple[dict[str, Any], cst.For, cst.For] | None = None, line: cst.CSTNode | None = None) -> Plan:
        stmt_line = u.line_of(line if line is not None else hoist.stmt, ctx.pos)
        target_line = u.line_of(swap[1] if swap else hoist.target, ctx.pos)
        var = u.loop_var(hoist.target)
        priority = min(1.0, max(0.0, gain / ctx.latency)) if ctx.latency else 0.01
        params: dict[str, Any] = {"stmt": _statement_key(hoist.stmt),
                                  "target_var": var, "target_iter": u.flat(u.code_of(hoist.target.iter)),
                                  "mode": hoist.mode, "index": ",".join(hoist.index_vars)}
        prefix = ""
        if swap is not None:
            params["interchange"] = swap[0]
            params["nest_line"] = target_line
            prefix = (f"Swap loops `for {swap[0]['outer_var']}` (line {target_line}) and `for "
                      f"{swap[0]['inner_var']}` (line {u.line_of(swap[2], ctx.pos)}), then ")
        if hoist.tile is None:
            what = (f"hoist `{hoist.name} = ...` (line {stmt_line}) out of `for {var}` (line {target_line}): it does "
                    f"not depend on the loop, so it runs once instead of on every iteration.")
        else:
            size = ctx.block_bytes(hoist)
            kib = f", {size / 1024:.0f} KiB per partition" if size is not None else ""
            each = ", ".join(f"`{v}`" for v in hoist.index_vars)
            what = (f"load `{hoist.name}` (line {stmt_line}) once for every {each} before `for {var}` (line "
                    f"{target_line}) into an SBUF block `{hoist.name}_buf`{kib}, and read the block inside the "
                    f"loop: the same tiles were loaded from HBM on every `{var}` iteration.")
        description = (prefix + what) if prefix else what[0].upper() + what[1:]
        return Plan(self.name, stmt_line, description, params, priority)

    # ---------------------------------------------------------------- applying

    def rewrite(self, source: str, plan: Plan) -> str:
        params = plan.params
        module = u.fold_declared_loads(u.parse(source))
        line: int | None = plan.line
        if params.get("interchange"):
            module = u.parse(interchange(module, params["interchange"], params.get("nest_line")).code)
            line = None
        analysis = _Analysis(model_of(module))
        found: list[tuple[cst.SimpleStatementLine, tuple[cst.For, ...], cst.For]] = []
        for op in analysis.model.ops:
            if _statement_key(op.stmt) != params["stmt"]:
                continue
            chain = _leavable_loops(op)
            found += [(op.stmt, chain, loop) for loop in chain
                      if _loop_key(loop) == (params["target_var"], params["target_iter"])]
        stmt = u.locate([f[0] for f in found], analysis.pos, line or 0, "the statement to hoist")
        hoist = analysis.run(*next(f for f in found if f[0] is stmt))
        if isinstance(hoist, str):
            raise RuleError(f"the statement can no longer be hoisted: {hoist}")
        if hoist.mode != params["mode"] or ",".join(hoist.index_vars) != params["index"]:
            raise RuleError("the statement would now be hoisted differently from the plan")
        return build(module, hoist).code


def _with_declared_loads(model: KernelModel) -> KernelModel:
    """The model with the tutorials' declared loads read as loads (`cst_util.fold_declared_loads`; every line
    keeps its number, so the profile's costs still apply)."""
    folded = u.fold_declared_loads(model.module)
    return model if folded is model.module else model_of(folded, model.profile, model.fn.name.value)


def _leavable_loops(op: Statement) -> tuple[cst.For, ...]:
    """The loops a statement may leave, outermost first: those around it with no other compound statement
    between (a statement under an `if` or a `with` stays inside it)."""
    chain: list[cst.For] = []
    inner: cst.CSTNode = op.stmt
    for loop in reversed(op.loops):
        if not any(s is inner for s in u.block_statements(loop.node)):
            break
        chain.append(loop.node)
        inner = loop.node
    return tuple(reversed(chain))


def _statement_key(stmt: cst.BaseStatement) -> str:
    """A statement's text without layout: how a plan finds its statement again in a rewritten kernel."""
    return u.flat(u.code_of(u.small(stmt) or stmt))


class _Context:
    """What the planner knows of the kernel from its model: line costs, loop trip counts (the profile's by
    loop, found again by header in the kernel with two loops swapped), SBUF headroom, the hardware."""

    def __init__(self, model: KernelModel):
        self.model = model
        self.pos = model.pos
        self.latency = model.latency
        self.peak = u.profile_value(model.profile, "sbuf_peak_live_bytes_per_partition")
        self.usable = u.profile_value(model.profile, "sbuf_usable_bytes_per_partition")
        self.trips_by_key: dict[tuple[str, str], float] = {}
        for loop in model.loops:
            if loop.line in model.profile_trips:
                self.trips_by_key.setdefault(_loop_key(loop.node), model.profile_trips[loop.line])
        self.loops = dict(model.loop_of)  # every modelled loop, in this kernel and its swapped versions
        self._swapped: dict[tuple[str, int], _Analysis | None] = {}

    def swapped(self, params: dict[str, Any], line: int) -> _Analysis | None:
        """The analysis of the kernel with one loop nest swapped (None when it cannot be), made once."""
        key = (repr(sorted(params.items())), line)
        if key not in self._swapped:
            try:
                module = u.parse(interchange(self.model.module, params, line).code)
            except RuleError:
                self._swapped[key] = None
            else:
                model = model_of(module, self.model.profile, self.model.fn.name.value)
                self.loops.update(model.loop_of)
                self._swapped[key] = _Analysis(model)
        return self._swapped[key]

    def trip(self, loop: cst.For) -> float:
        """Iterations per execution of `loop` (profile, else static value, else 1)."""
        known = self.known_trip(loop)
        return known if known is not None else 1.0

    def known_trip(self, loop: cst.For) -> float | None:
        """The profile's trip count of the loop with this header, else the static count of a plain `range(n)`."""
        if _loop_key(loop) in self.trips_by_key:
            return self.trips_by_key[_loop_key(loop)]
        modelled = self.loops.get(id(loop))
        return float(modelled.trips) if modelled is not None and modelled.counted and modelled.trips is not None \
            else None

    def block_bytes(self, hoist: Hoist) -> float | None:
        tile = hoist.tile
        if tile is None:
            return 0.0
        counts = [self.known_trip(loop) for loop in hoist.index_loops]
        if any(v is None for v in (*counts, *tile.free_values)):
            return None
        return math.prod(counts) * math.prod(tile.free_values) * tile.itemsize  # type: ignore[arg-type]

    def fits(self, hoist: Hoist) -> bool:
        size = self.block_bytes(hoist)
        if size is None:
            return False
        if self.peak is not None and self.usable is not None:
            return self.peak + size <= self.usable
        return size <= self.model.hardware.memory.sbuf_bytes_per_partition // 2  # without a profile: half of SBUF

    def engines_under(self, node: cst.CSTNode, scale: float = 1.0) -> dict[str, float]:
        return u.engine_times_under(node, self.pos, self.model.line_engines, scale)

    def saved_share(self, hoist: Hoist, chain: Sequence[cst.For]) -> float:
        """The share of the statement's executions that go away."""
        inside = list(chain[chain.index(hoist.target):])
        runs = math.prod(self.trip(loop) for loop in inside)
        kept = math.prod(self.trip(loop) for loop in hoist.index_loops)
        return 1.0 - kept / runs if runs > 0 else 0.0

    def gain(self, saved: Mapping[str, float], added: Mapping[str, float] | None = None) -> float:
        return u.predicted_gain(self.model.profile, saved, added)
