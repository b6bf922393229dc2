"""defer_row_scale: scale a matmul's output rows instead of every element of the tile it multiplies.

Attention normalises its probabilities before the second matmul: every element of each row of
`exp(scores)` is multiplied by that row's 1/sum (a [P, 1] column), then the tile is transposed and
multiplied by V. Each output row is a sum over that row's probabilities only, so scaling the row of
the product is the same arithmetic: `(r * E) @ V == r * (E @ V)`. The rows of E are as long as the
sequence; the output's as the head dimension. Deferring the scale to the copy that takes the result out
of PSUM (which then scales as it copies) removes one pass over every score on the Vector engine, and
the transposes take the unscaled tile.

The rule follows the scaled tile P through the ways a row stays a row: a transpose (`nc_matmul(..,
is_transpose=True)`, `nc_transpose`, `nl.transpose`) then copies, then the stationary side of
`nc_matmul` (its free dimension becomes the output's partition), or `nl.matmul(P, ..)` directly. It
declines unless every reader of P, of the transposed copies and of the result is on that path, the
scale column is unchanged between the scale and the result's copy, and the result is taken out of
PSUM by copies only (each becomes the scaling copy). Everything else, and the numerics, the search's
check decides.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from . import cst_util as u
from .analysis import Affine, KernelModel, ModelRule, Ref, Statement, model_of
from .base import Plan, RuleError

_SCALE_OPS = frozenset({"nl.multiply", "nl.divide", "np.multiply", "np.divide"})
_REDUCTIONS = frozenset({"nl.sum", "nl.max", "nl.min", "nl.mean", "nl.prod", "nisa.tensor_reduce"})
_COLUMN_MAPS = frozenset({"nl.reciprocal", "nisa.reciprocal", "nl.negative", "nl.multiply", "nl.divide", "nl.add",
                          "nl.subtract", "nl.exp", "nl.rsqrt", "nl.sqrt", "nisa.tensor_scalar", "nisa.activation",
                          "nl.copy", "nisa.tensor_copy"})
_TRANSPOSES = frozenset({"nisa.nc_transpose", "nl.transpose"})
_COPIES = frozenset({"nl.copy", "nisa.tensor_copy"})


@dataclass(frozen=True)
class _Deferral:
    scale: Statement  # P = E (op) R
    product: str  # P
    source: Ref  # E, as the scale reads it
    operand: cst.BaseExpression  # R, as the scale reads it
    operation: str  # the scale's op, as written (`nl.multiply`)
    readers: tuple[tuple[Statement, Ref], ...]  # P's reads: the first step of each path
    result: str  # O, the matmul's output
    copies: tuple[tuple[Statement, Ref], ...]  # the copies that take O out


def _arg(call: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
    """An argument by keyword, else by position (None when absent)."""
    named = u.keyword(call, keyword)
    if named is not None:
        return named.value
    positional = [a for a in call.args if a.keyword is None]
    return positional[position].value if position < len(positional) else None


def _true(call: cst.Call, keyword: str) -> bool:
    arg = u.keyword(call, keyword)
    return u.is_true(arg.value if arg is not None else None)


def _ref_at(op: Statement, expr: cst.BaseExpression | None) -> Ref | None:
    """The read of a tile that is exactly `expr` (a name or a subscript of one)."""
    return next((r for r in op.reads if r.node is expr), None) if expr is not None else None


def _text(node: cst.CSTNode) -> str:
    return u.flat(u.code_of(node))


class DeferRowScale(ModelRule):
    """Scale a matmul's output rows by a per-row factor instead of the whole tile before it (attention's 1/sum): one
    pass over the short output rows instead of over every probability."""

    name = "defer_row_scale"

    def plans(self, model: KernelModel) -> list[Plan]:
        plans = []
        for op in model.ops:
            found = _deferral(model, op)
            if isinstance(found, _Deferral):
                plans.append(self._plan(model, found))
        return plans

    def _plan(self, model: KernelModel, d: _Deferral) -> Plan:
        cost = sum(model.cost(d.scale).values())
        share = cost / model.latency if model.latency else 0.0
        lines = ", ".join(str(op.line) for op, _ in d.copies)
        what = (f"scale the rows of `{d.result}` by `{_text(d.operand)}` where it is copied out of PSUM (line {lines}) "
                f"instead of every element of `{d.product}` before the matmul (line {d.scale.line})")
        return Plan(self.name, d.scale.line, what, {"product": d.product, "scale_line": d.scale.line},
                    priority=share)

    def rewrite(self, source: str, plan: Plan) -> str:
        module = u.parse(source)
        model = model_of(module)
        found = [d for op in model.ops if op.line == plan.params["scale_line"]
                 for d in [_deferral(model, op)] if isinstance(d, _Deferral) and d.product == plan.params["product"]]
        if not found:
            raise RuleError("the row scale no longer feeds a matmul the way the plan saw")
        d = found[0]
        nisa = u.alias_of(module, "nki.isa") or "nisa"
        nodes: dict[int, cst.CSTNode | cst.RemovalSentinel] = {id(ref.node): _substituted(model, d, ref)
                                                                for _, ref in d.readers}
        for copy, ref in d.copies:
            call = _call(copy)
            keep = [a for a in call.args if a.keyword is not None and a.keyword.value in ("dtype", "mask")]
            scaled = cst.parse_expression(f"{nisa}.tensor_scalar(data={u.code_of(ref.node)}, op0={d.operation}, "
                                          f"operand0={u.code_of(d.operand)})")
            assert isinstance(scaled, cst.Call)
            nodes[id(call)] = scaled.with_changes(args=[*scaled.args, *keep])
        nodes[id(d.scale.stmt)] = cst.RemoveFromParent()
        declaration = model.tensors.get(d.product)
        if declaration is not None and declaration.decl is not None and all(
                o is declaration.decl or o is d.scale or any(o is r for r, _ in d.readers)
                for o, _ in model.refs(d.product)):
            nodes[id(declaration.decl.stmt)] = cst.RemoveFromParent()
        rewritten, _ = u.ensure_import(u.replace_nodes(module, nodes), _isa_path(module), nisa)
        return u.compiled_code(rewritten, self.name)


def _isa_path(module: cst.Module) -> str:
    """Where the ISA is imported from in this kernel's interface (the newer `nki` or `neuronxcc.nki`)."""
    language = u.import_aliases(module).get(u.alias_of(module, "nki.language") or "", "")
    return "nki.isa" if language.startswith("nki.") else "neuronxcc.nki.isa"


def _deferral(model: KernelModel, op: Statement) -> _Deferral | str:
    """The deferral the scale statement `op` allows, or why not."""
    scale = _row_scale(model, op)
    if isinstance(scale, str):
        return scale
    product, source, operand, operation = scale
    if any(o is not op for o, r in model.refs(product.name) if r.kind in ("write", "accumulate", "bind")
           and not _is_declaration(model, o, product.name)):
        return f"`{product.name}` is written elsewhere too"
    readers = [(o, r) for o, r in model.refs(product.name) if r.kind == "read" and o is not op]
    if not readers:
        return f"`{product.name}` is not read"
    chain: list[Statement] = []
    results: set[str] = set()
    for reader, ref in readers:
        if reader.order < op.order or not set(op.loops) <= set(reader.loops):
            return f"`{product.name}` is read outside the iteration that scales it (line {reader.line})"
        if _written_between(model, source.name, op, reader):
            return f"`{source.name}` changes before `{product.name}` is read (line {reader.line})"
        try:
            results.add(_rows_kept(model, reader, ref, transposed=False, chain=chain))
        except _RowsLostError as why:
            return str(why)
    if len(results) != 1:
        return "the scaled rows reach more than one matmul result"
    result = results.pop()
    chained = {id(o) for o in chain}
    copies = [(o, r) for o, r in model.refs(result) if id(o) not in chained and r.kind == "read"]
    writes = [o for o, r in model.refs(result) if id(o) not in chained and r.kind != "read"
              and not _is_declaration(model, o, result)]
    if writes or not copies:
        return f"`{result}` is written by more than the matmul, or never copied out"
    for copy, ref in copies:
        if copy.call not in _COPIES or _arg(_call(copy), 0, "data") is not ref.node:
            return f"`{result}` is read by more than a copy (line {copy.line})"
        if copy.order < max(o.order for o in chain):
            return f"`{result}` is copied before the matmul ends (line {copy.line})"
        problem = _operand_reaches(model, operand, op, copy)
        if problem:
            return problem
    return _Deferral(op, product.name, source, operand, operation, tuple(readers), result, tuple(copies))


def _call(op: Statement) -> cst.Call:
    value = op.value
    if not isinstance(value, cst.Call):
        raise RuleError(f"line {op.line} is not a call")
    return value


def _is_declaration(model: KernelModel, op: Statement, name: str) -> bool:
    tensor = model.tensors.get(name)
    return tensor is not None and tensor.decl is op


def _row_scale(model: KernelModel, op: Statement) -> tuple[Ref, Ref, cst.BaseExpression, str] | str:
    """(P's write, E's read, R, the op as written) for `P = E * R` or `E / R` with R a [P, 1] column."""
    value = op.value
    writes = [r for r in op.writes if not _is_declaration(model, op, r.name)]
    if not isinstance(value, cst.Call) or len(writes) != 1 or writes[0].kind == "accumulate":
        return "not a single scaling statement"
    call, product = value, writes[0]
    if op.call == "nisa.tensor_scalar":
        data, operation, operand = _arg(call, 0, "data"), u.keyword(call, "op0"), u.keyword(call, "operand0")
        if operation is None or operand is None or u.keyword(call, "op1") is not None or _true(call, "reverse0"):
            return "not a single tensor_scalar multiply or divide"
        spelled = model.canonical(cst.Call(operation.value)) or ""
        if spelled not in _SCALE_OPS:
            return "not a multiply or divide"
        written, column = u.code_of(operation.value), operand.value
    elif op.call in ("nl.multiply", "nl.divide"):
        first, second = _arg(call, 0, "x"), _arg(call, 1, "y")
        if first is None or second is None or len([a for a in call.args if a.keyword is None]) != 2:
            return "not a two-operand multiply or divide"
        data, column = first, second
        if op.call == "nl.multiply" and _is_column(model, first, op) and not _is_column(model, second, op):
            data, column = second, first
        written = u.code_of(call.func)
    else:
        return "not a scaling statement"
    source = _ref_at(op, data)
    if source is None or not _is_column(model, column, op):
        return "the factor is not a [P, 1] column of a tile"
    return product, source, column, written


def _is_column(model: KernelModel, expr: cst.BaseExpression | None, op: Statement, depth: int = 0) -> bool:
    """Whether `expr` is one value per partition: an index whose last element is one element, or a name
    bound to a reduction along the free axis, or to an element-wise function of such columns."""
    if isinstance(expr, cst.Subscript):
        last = model.element(expr.slice[-1].slice)
        return isinstance(last, Affine) and (last.is_scalar or all(n == 1 for _, n in last.ranges))
    if not isinstance(expr, cst.Name) or depth > 4:
        return False
    bound = [o for o, r in model.refs(expr.value) if r.kind == "bind" and o.order < op.order]
    if len(bound) != 1 or not isinstance(bound[0].value, cst.Call):
        return False
    definition, call = bound[0], bound[0].value
    if definition.call in _REDUCTIONS:
        axis = _arg(call, 1, "axis") if definition.call != "nisa.tensor_reduce" else u.keyword(call, "axis")
        axis_value = axis.value if isinstance(axis, cst.Arg) else axis
        return axis_value is not None and _text(axis_value) in ("1", "[1]", "(1,)", "-1", "[-1]")
    if definition.call in _COLUMN_MAPS:
        tiles = [a.value for a in call.args if isinstance(a.value, cst.Name | cst.Subscript)
                 and (a.keyword is None or a.keyword.value in ("data", "x", "y", "operand0"))
                 and (not isinstance(a.value, cst.Name) or model.refs(a.value.value))]
        return bool(tiles) and all(_is_column(model, t, definition, depth + 1) for t in tiles)
    return False


def _written_between(model: KernelModel, name: str, first: Statement, last: Statement) -> bool:
    return any(first.order < o.order < last.order for o, r in model.refs(name) if r.kind != "read")


class _RowsLostError(Exception):
    """Why the rows do not stay rows on the way to a matmul's output."""


def _rows_kept(model: KernelModel, op: Statement, ref: Ref, transposed: bool, chain: list[Statement],
               depth: int = 0) -> str:
    """Follow a tile of rows from its read `ref` in `op` to the matmul output whose partitions are those rows
    and name that output (_RowsLostError when the rows do not stay rows). `transposed`: the tile holds the rows
    on its free dimension. The statements on the way go to `chain`."""
    if depth > 6 or not isinstance(op.value, cst.Call):
        raise _RowsLostError(f"line {op.line} does something else with the rows")
    call = op.value
    keyword = "x" if op.call == "nl.matmul" else "stationary" if op.call == "nisa.nc_matmul" else "data"
    if _arg(call, 0, keyword) is not ref.node:
        raise _RowsLostError(f"the rows are not the first operand at line {op.line}")
    chain.append(op)
    writes = [r for r in op.writes if not _is_declaration(model, op, r.name)]
    if len(writes) != 1:
        raise _RowsLostError(f"line {op.line} writes more than one tile")
    out = writes[0].name
    swaps = (op.call == "nisa.nc_matmul" and _true(call, "is_transpose")) or op.call in _TRANSPOSES
    if swaps and not transposed:
        return _follow(model, op, out, True, chain, depth)
    if op.call in _COPIES:
        return _follow(model, op, out, transposed, chain, depth)
    if op.call == "nisa.nc_matmul" and transposed and not _true(call, "is_transpose"):
        return out
    if op.call == "nl.matmul" and _true(call, "transpose_x") == transposed:
        return out
    raise _RowsLostError(f"line {op.line} does not keep the rows as rows")


def _follow(model: KernelModel, op: Statement, name: str, transposed: bool, chain: list[Statement], depth: int) -> str:
    """Every reader of the tile `name` that `op` wrote must keep the rows, to one result."""
    if any(r.kind != "read" and o is not op and not _is_declaration(model, o, name) and o.call not in _COPIES
           and o.call != "nisa.nc_matmul" and o.call not in _TRANSPOSES for o, r in model.refs(name)):
        raise _RowsLostError(f"`{name}` is written by something else too")
    results = {_rows_kept(model, reader, ref, transposed, chain, depth + 1)
               for reader, ref in model.refs(name) if ref.kind == "read" and reader is not op}
    if len(results) != 1:
        raise _RowsLostError(f"`{name}` is read by no matmul, or by several")
    return results.pop()


def _operand_reaches(model: KernelModel, operand: cst.BaseExpression, scale: Statement, copy: Statement) -> str | None:
    """Why the factor R, as the scale reads it, cannot be read at the copy (None: it can): its indices must
    use only loops around the copy, and nothing may write R after the scale or inside a loop the copy
    is not in."""
    around = {loop.var for loop in copy.loops}
    loops = {loop.var for loop in model.loops if loop.var}
    used = u.names_in(operand)
    if (used & loops) - around:
        return "the scale's factor depends on a loop the result's copy is not in"
    name = u.root_name(operand)
    for o, r in model.refs(name or ""):
        if r.kind == "read" or _is_declaration(model, o, r.name):
            continue
        if o.order > scale.order or not set(o.loops) <= set(copy.loops):
            return f"`{name}` changes between the scale and the result's copy (line {o.line})"
    return None


def _substituted(model: KernelModel, d: _Deferral, ref: Ref) -> cst.BaseExpression:
    """The reader's access of P as the same elements of E (P's row block is E's, element for element)."""
    product = model.tensors.get(d.product)
    source = model.tensors.get(d.source.name)
    written = next(r for r in d.scale.writes if r.name == d.product)
    if not isinstance(written.node, cst.Subscript):  # P = E * R: the reader's access, on E
        if isinstance(d.source.node, cst.Name):
            return _renamed(ref.node, d.source.name)
        if isinstance(ref.node, cst.Name):
            return d.source.node  # type: ignore[return-value]
        raise RuleError(f"`{d.product}` is read in parts of a tile of `{d.source.name}`")
    if not isinstance(d.source.node, cst.Subscript) or not isinstance(ref.node, cst.Subscript):
        raise RuleError(f"`{d.product}` and `{d.source.name}` are not indexed alike")
    own = product.par_axis if product is not None else 0
    theirs = source.par_axis if source is not None else 0
    wrote, read, reads = written.node.slice, d.source.node.slice, ref.node.slice
    if ([_text(e) for e in wrote[own:]] != [_text(e) for e in read[theirs:]]
            or [_text(e) for e in wrote[:own]] != [_text(e) for e in reads[:own]] or len(reads) != len(wrote)):
        raise RuleError(f"`{d.product}` is read at other blocks than it was written, or not as `{d.source.name}`")
    return d.source.node.with_changes(slice=[*read[:theirs], *reads[own:]])


def _renamed(node: cst.CSTNode, name: str) -> cst.BaseExpression:
    if isinstance(node, cst.Name):
        return node.with_changes(value=name)
    assert isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name)
    return node.with_changes(value=node.value.with_changes(value=name))
