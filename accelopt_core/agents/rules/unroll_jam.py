"""jam_matmul_loops: unroll-and-jam of a matmul loop nest, so one stationary tile serves several moving
tiles back to back and several PSUM banks accumulate at once.

A tiled matmul usually walks the output tiles outside the reduction:

    for j in range(J):                    # output tiles (a PSUM accumulator each)
        for k in range(K):                # the reduction
            acc[j] += matmul(S[k], M[k, j])
        out[j] = copy(acc[j])

so every matmul loads a new stationary tile `S[k]` into the PE array (LoadStationary before each
MultiplyMoving, fact sheet A.3), although `S[k]` is the same for every `j`. Jamming the output loop
into the reduction

    for k in range(K):
        for j in range(J):
            acc[j] += matmul(S[k], M[k, j])   # S[k] stays; J accumulation groups in flight
    for j in range(J):
        out[j] = copy(acc[j])

issues J consecutive matmuls per stationary tile and keeps J PSUM banks accumulating (8 banks of
2 KiB per partition, A.4). Legal when the output loop's iterations are independent (`affine_range`, or a
`static_range` or Python `range` loop in which the shared analysis finds no value handed on),
the reduction's ranges and the stationary operand do not depend on `j`, the accumulator of each `j` is
its own (a block of a block tensor indexed by `j`, or a tile allocated per `j`, which becomes a block
tensor), and the read-out does not write anything the reduction reads. The J accumulators must fit in
half of PSUM, leaving the other banks to the transposes and read-outs around them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from . import cst_util as u
from .analysis import KernelModel, ModelRule, model_of
from .base import Plan

_MATMULS = ("nisa.nc_matmul", "nl.matmul")


@dataclass(frozen=True)
class _Jam:
    outer: cst.For  # the loop over output tiles
    reduction: tuple[cst.For, ...]  # the reduction loops, outermost first (a perfect chain)
    accumulate: cst.SimpleStatementLine  # `acc[...] += matmul(...)`
    allocation: cst.SimpleStatementLine | None  # `acc = nl.zeros(...)` in the output loop (tile style)
    tail: tuple[cst.BaseStatement, ...]  # the read-out after the reduction
    accumulator: str
    trips: int


def _matmul_call(model: KernelModel, stmt: cst.BaseStatement) -> cst.Call | None:
    node = u.small(stmt)
    if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) and isinstance(
            node.value, cst.Call) and model.canonical(node.value) in _MATMULS:
        return node.value
    return None


def _stationary(model: KernelModel, call: cst.Call) -> cst.BaseExpression | None:
    name = model.canonical(call)
    keyword = "x" if name == "nl.matmul" else "stationary"
    arg = u.keyword(call, keyword) or next((a for a in call.args if a.keyword is None), None)
    return arg.value if arg is not None else None


def _accumulator(stmt: cst.SimpleStatementLine) -> tuple[str, cst.BaseExpression] | None:
    node = u.small(stmt)
    if not isinstance(node, cst.AugAssign):
        return None
    target = node.target
    root = u.root_name(target)
    return (root, target) if root else None


def find_jams(model: KernelModel, trips: dict[tuple[str, str], int] | None = None) -> list[_Jam | str]:
    """Each output loop that could be jammed into its reduction, or why not (for the loops that look
    like one: a loop whose body starts with a loop nest of matmul accumulations). `trips`: trip
    counts known for loops (by variable and range) whose count the source does not say."""
    out: list[_Jam | str] = []
    for loop in model.loops:
        found = _jam(model, loop.node, (trips or {}).get((loop.var or "", u.flat(u.code_of(loop.node.iter)))))
        if found is not None:
            out.append(found)
    return out


def _jam(model: KernelModel, outer: cst.For, known: int | None) -> _Jam | str | None:
    body = u.code_statements(outer)
    allocation = None
    if body and isinstance(u.small(body[0]), cst.Assign) and not isinstance(body[0], cst.For):
        allocation, body = body[0], body[1:]  # type: ignore[assignment]
    if not body or not isinstance(body[0], cst.For):
        return None
    chain = [body[0]]
    while len(u.code_statements(chain[-1])) == 1 and isinstance(u.code_statements(chain[-1])[0], cst.For):
        chain.append(u.code_statements(chain[-1])[0])  # type: ignore[arg-type]
    inner = u.code_statements(chain[-1])
    accumulations = [s for s in inner if _matmul_call(model, s) is not None]
    if len(accumulations) != 1:
        return None
    var = u.loop_var(outer)
    if var is None:
        return "the output loop has no variable"
    reordered = model.reorder_problem(model.loop(outer))  # its iterations run interleaved after the jam
    if reordered:
        return f"the output loop: {reordered}"
    acc_stmt = accumulations[0]
    assert isinstance(acc_stmt, cst.SimpleStatementLine)
    found = _accumulator(acc_stmt)
    if found is None:
        return None
    name, target = found
    loop = model.loop(outer)
    if not loop.counted:
        return "the output loop is not written as a count (`affine_range(n)`)"
    trips = next((t for t in (loop.trips, model.profile_trips.get(loop.line), known) if t is not None), None)
    if trips is None or trips < 2 or trips != int(trips):
        return "the output loop has no static trip count above 1"
    if any(u.loop_kind(r) is None or var in u.names_in(r.iter) for r in chain):
        return "a reduction range depends on the output loop"
    call = _matmul_call(model, acc_stmt)
    assert call is not None
    stationary = _stationary(model, call)
    varying = u.dependents([*inner], {var}) | {var}
    if stationary is None or u.names_in(stationary) & varying:
        return "the stationary operand changes with the output loop"
    for stmt in inner:
        if stmt is not acc_stmt and (u.names_written(stmt) - {a.name for a in u.accesses(stmt) if a.kind == "bind"}):
            return "the reduction body writes something other than its accumulator and temporaries"
    tensor = model.tensors.get(name)
    if allocation is not None:
        if u.assigned_name(allocation) != name or not _psum_allocation(model, allocation):
            return "the statement before the reduction is not the accumulator's PSUM allocation"
        if not isinstance(target, cst.Name):
            return "the accumulator is written through an index"
        tile_bytes = _tile_bytes(model, allocation)
    else:
        if tensor is None or tensor.buffer != "psum" or not tensor.blocked or not isinstance(target, cst.Subscript):
            return "the accumulator is not a PSUM block tensor indexed by the output loop"
        key = model.block_key(next(r for op in model.ops if op.stmt is acc_stmt for r in op.refs if r.name == name))
        if key is None or not any(e.coeff(var) for e in key) or any(
                {u.loop_var(r) for r in chain} & e.vars for e in key):
            return "the accumulator's block does not follow the output loop alone"
        tile_bytes = _free_bytes(tensor.shape[tensor.par_axis + 1:])
    psum = model.hardware.memory
    banks = psum.psum_banks // 2  # the other half stays for transposes and read-outs
    if tile_bytes is None or trips * max(1, -(-tile_bytes // psum.psum_bank_bytes)) > banks:
        return f"{trips} accumulators would take more than {banks} PSUM banks"
    tail = tuple(body[1:])
    read_by_reduction = set().union(*(u.names_in(s) for s in chain))
    if any(u.names_written(s) & read_by_reduction for s in tail):
        return "the read-out writes something the reduction reads"
    return _Jam(outer, tuple(chain), acc_stmt, allocation, tail, name, int(trips))


def _psum_allocation(model: KernelModel, stmt: cst.BaseStatement) -> bool:
    node = u.small(stmt)
    if not isinstance(node, cst.Assign) or not isinstance(node.value, cst.Call):
        return False
    buffer = u.keyword(node.value, "buffer")
    return model.canonical(node.value) in ("nl.zeros", "nl.ndarray") and buffer is not None and (
        u.dotted(buffer.value) or "").endswith("psum")


def _shape_elements(model: KernelModel, stmt: cst.BaseStatement) -> list[cst.Element] | None:
    node = u.small(stmt)
    assert isinstance(node, cst.Assign) and isinstance(node.value, cst.Call)
    shape = node.value.args[0].value if node.value.args and node.value.args[0].keyword is None else None
    return list(shape.elements) if isinstance(shape, cst.Tuple) else None


def _tile_bytes(model: KernelModel, stmt: cst.BaseStatement) -> int | None:
    elements = _shape_elements(model, stmt)
    if not elements or len(elements) < 2:
        return None
    sizes = [u.static_value(e.value, model.env) for e in elements[1:]]
    return _free_bytes([int(s) if s is not None else None for s in sizes])


def _free_bytes(free: tuple[int | None, ...] | list[int | None]) -> int | None:
    if any(d is None for d in free):
        return None
    total = 4  # PSUM accumulates in FP32
    for d in free:
        total *= int(d)  # type: ignore[arg-type]
    return total


def _indexed(node: Any, name: str, var: str) -> Any:
    """`node` with every use of the variable `name` replaced by `name[var]`."""
    access = cst.parse_expression(f"{name}[{var}]")
    return u.rewrite(node, names={id(n): access for n in u.name_nodes(node) if n.value == name})


def jammed(model: KernelModel, jam: _Jam) -> list[cst.BaseStatement]:
    """The statements replacing the output loop: [the accumulators' allocation,] the reduction with
    the output loop innermost, then the read-out in its own output loop."""
    var = u.loop_var(jam.outer) or ""
    header = jam.outer.with_changes(leading_lines=[])
    inner = u.code_statements(jam.reduction[-1])
    if jam.allocation is not None:
        inner = [_indexed(s, jam.accumulator, var) for s in inner]
    # what does not depend on the output tile (the stationary tile's loads) is done once per step
    varying = u.dependents(inner, {var}) | {var}
    once = [s for s in inner if not u.names_in(s) & varying]
    each = [s for s in inner if u.names_in(s) & varying]
    staged = _staged_transpose(model, each, varying)
    if staged is not None:
        transpose, old, new = staged
        once.append(transpose)
        each = [new if s is old else s for s in each]
    jammed_loop = header.with_changes(body=header.body.with_changes(body=each))
    nest: cst.For = jam.reduction[-1].with_changes(body=jam.reduction[-1].body.with_changes(
        body=[*once, jammed_loop]), leading_lines=[])
    for loop in reversed(jam.reduction[:-1]):
        nest = loop.with_changes(body=loop.body.with_changes(body=[nest]), leading_lines=[])
    tail = [_indexed(s, jam.accumulator, var) if jam.allocation is not None else s for s in jam.tail]
    readout = header.with_changes(body=header.body.with_changes(body=tail or [cst.SimpleStatementLine([cst.Pass()])]))
    out: list[cst.BaseStatement] = []
    if jam.allocation is not None:
        out.append(_block_allocation(model, jam))
    out += [nest, readout]
    out[0] = out[0].with_changes(leading_lines=jam.outer.leading_lines)
    return out


def _staged_transpose(model: KernelModel, each: list[cst.BaseStatement], varying: set[str]
                      ) -> tuple[cst.BaseStatement, cst.BaseStatement, cst.BaseStatement] | None:
    """`nl.matmul(x, y)` transposes x on the Tensor engine for every call: with the output loop inside,
    the transpose of an `x` it does not change is made once per reduction step instead
    (`xt = nl.copy(nl.transpose(x))`, then `nl.matmul(xt, y, transpose_x=True)` for every output tile)."""
    stmt = next((s for s in each if _matmul_call(model, s) is not None), None)
    call = _matmul_call(model, stmt) if stmt is not None else None
    if call is None or model.canonical(call) != "nl.matmul":
        return None
    flag = u.keyword(call, "transpose_x")
    if flag is not None and not (isinstance(flag.value, cst.Name) and flag.value.value == "False"):
        return None
    x = _stationary(model, call)
    if x is None or u.names_in(x) & varying or not u.is_pure(x):
        return None
    nl = next((k for k, v in model.aliases.items() if v.endswith("language")), "nl")
    staged = u.fresh_name(model.fn, "stationary_t")
    first = next(a for a in call.args if a.keyword is None or a.keyword.value == "x")
    args = [a.with_changes(value=cst.Name(staged)) if a is first else a for a in call.args if a is not flag]
    staged_call = u.with_keyword(call.with_changes(args=args), "transpose_x", cst.Name("True"))
    new_stmt = u.replace_nodes(stmt, {id(call): staged_call})
    return u.parse_statement(f"{staged} = {nl}.copy({nl}.transpose({u.code_of(x)}))\n"), stmt, new_stmt


def _block_allocation(model: KernelModel, jam: _Jam) -> cst.SimpleStatementLine:
    """`acc = nl.zeros((J, nl.par_dim(P), F), ...)`: one accumulator per output tile at once."""
    assert jam.allocation is not None
    node = u.small(jam.allocation)
    assert isinstance(node, cst.Assign) and isinstance(node.value, cst.Call)
    elements = _shape_elements(model, jam.allocation) or []
    count = u.code_of(u.loop_args(jam.outer)[0].value)
    nl = next((k for k, v in model.aliases.items() if v.endswith("language")), "nl")
    parts = [count, f"{nl}.par_dim({u.code_of(elements[0].value)})", *(u.code_of(e.value) for e in elements[1:])]
    shape = cst.parse_expression(f"({', '.join(parts)})")
    args = [node.value.args[0].with_changes(value=shape), *node.value.args[1:]]
    return jam.allocation.with_changes(body=[node.with_changes(value=node.value.with_changes(args=args))])


class JamMatmulLoops(ModelRule):
    """Jam the loop over output tiles into the matmul reduction (unroll-and-jam): one stationary tile serves several
    moving tiles back to back and several PSUM banks accumulate at once."""

    name = "jam_matmul_loops"

    def plans(self, model: KernelModel) -> list[Plan]:
        busy = model.busy()
        latency = model.latency or 0.0
        tensor_share = 1e3 * busy.get("tensor", 0.0) / latency if latency else 0.0
        plans = []
        for jam in find_jams(model):
            if isinstance(jam, str):
                continue
            outer = model.loop(jam.outer)
            first = model.loop(jam.reduction[0])
            reused = ", ".join(f"`{u.loop_var(r)}`" for r in jam.reduction)
            plans.append(Plan(
                self.name, outer.line,
                f"Jam `for {outer.var}` (line {outer.line}, {jam.trips} output tiles) into its matmul reduction over "
                f"{reused} (line {first.line}): each stationary tile then serves {jam.trips} moving tiles back to "
                f"back and {jam.trips} PSUM accumulators fill at once; the read-out gets its own `for {outer.var}`.",
                {"var": outer.var, "iter": u.flat(u.code_of(jam.outer.iter)), "accumulator": jam.accumulator,
                 "trips": jam.trips},
                0.05 * min(1.0, tensor_share)))
        return plans

    def rewrite(self, source: str, plan: Plan) -> str:
        model = model_of(source)
        params = plan.params
        known = {(params["var"], params["iter"]): int(params["trips"])}
        matches = [j for j in find_jams(model, known) if not isinstance(j, str) and u.loop_var(j.outer) == params["var"]
                   and u.flat(u.code_of(j.outer.iter)) == params["iter"] and j.accumulator == params["accumulator"]]
        outer = u.locate([j.outer for j in matches], model.pos, plan.line, "the matmul loop nest to jam")
        jam = next(j for j in matches if j.outer is outer)
        module = u.rewrite(model.module, {id(jam.outer): jammed(model, jam)})
        return u.compiled_code(module, "jam_matmul_loops")
