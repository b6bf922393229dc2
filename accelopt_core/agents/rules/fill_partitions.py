"""fill_partitions: a loop whose element-wise work uses only 64 (or 32) of the 128 partitions
processes two (or four) iterations at once, stacked on the partitions.

An engine instruction takes about as long for 64 partitions as for 128: its cost is the free size
(fact sheet A.5, elements per cycle per partition). A kernel whose tiles are `nl.par_dim(64)` (rotary
embedding on half of a head dimension of 128, a 64-wide head) leaves half of every engine idle.
When each iteration of a loop (an `affine_range`, or a `static_range` or Python `range` loop that hands
no value between iterations) does the same element-wise work on its own P-row tiles, iteration `f*i + k`
can live in partitions `k*P .. (k+1)*P` of one `f*P`-row tile: the loads and stores are issued per
stacked iteration (the same bytes, f times fewer per statement), every engine instruction covers f
iterations, and the loop runs T/f times.

Legal when the loop body only loads, stores, allocates and computes element-wise (no matmul,
transpose, partition reduction or broadcast), every on-chip tensor it touches is its own (declared
in the body, or a block tensor whose blocks the loop variable selects one per iteration), each of
those is accessed over its whole partition range, and the loop variable reaches compute only
through those block indices. The search checks every candidate numerically as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from . import cst_util as u
from .analysis import ALLOCATORS, Affine, ForLoop, KernelModel, ModelRule, Ref, Span, Statement, Tensor, model_of
from .base import Plan, RuleError

_LOADS_STORES = frozenset({"nl.load", "nl.store", "nisa.dma_copy"})
_ELEMENTWISE = frozenset({
    "nl.add", "nl.subtract", "nl.multiply", "nl.divide", "nl.maximum", "nl.minimum", "nl.power", "nl.copy",
    "nl.negative", "nl.abs", "nl.exp", "nl.log", "nl.sqrt", "nl.rsqrt", "nl.tanh", "nl.sigmoid", "nl.silu",
    "nl.gelu", "nl.relu", "nl.sin", "nl.cos", "nl.erf", "nl.square", "nl.reciprocal", "nl.sign",
    "nisa.tensor_tensor", "nisa.tensor_scalar", "nisa.activation", "nisa.tensor_copy", "nisa.reciprocal",
    "nisa.memset"})

_INDEXING = frozenset({"nl.arange", "nl.ds"})


@dataclass(frozen=True)
class _Fold:
    """Stack `factor` iterations of `loop` on the partitions of its `rows`-row tiles; `blocks` maps
    each block tensor the loop variable indexes to that block dimension."""

    loop: ForLoop
    sizes: tuple[int, ...]  # its trip counts at the sizes the kernel runs (timed first)
    factor: int
    rows: int
    tensors: tuple[str, ...]
    blocks: tuple[tuple[str, int], ...]
    bound: tuple[tuple[str, int], ...]  # tiles bound in the body (by a load or a computation), their ndim

    @property
    def trips(self) -> int:
        return self.sizes[0]

    @property
    def names(self) -> list[str]:
        return sorted([*self.tensors, *(name for name, _ in self.bound)])


def _full_rows(element: object) -> int | None:
    """P when a partition index covers rows 0..P (`nl.arange(P)[:, None]`, `0:P`, `nl.ds(0, P)`)."""
    if isinstance(element, Affine) and not element.coeffs and element.const == 0 and len(element.ranges) == 1:
        step, size = element.ranges[0]
        return size if step == 1 else None
    if isinstance(element, Span) and element.size and element.start == Affine():
        return element.size
    return None


class _Reader:
    """Decides whether one loop can be folded, and why not."""

    def __init__(self, model: KernelModel, loop: ForLoop, known: Sequence[int] = ()):
        self.model = model
        self.loop = loop
        self.known = list(known)
        self.ops = [op for op in model.ops_in(loop) if not u.is_marker(op.stmt)]
        self.rows: set[int] = set()
        self.tensors: set[str] = set()
        self.blocks: dict[str, int] = {}
        self.bound: dict[str, int] = {}  # tiles a statement in the body binds -> their dimension count

    def fold(self) -> _Fold | str:
        loop = self.loop
        trips = _trip_counts(self.model, loop) or self.known
        why = self.model.reorder_problem(loop)
        if why:  # stacked iterations run together
            return why
        if loop.var is None or not trips or not loop.counted:
            return "not a loop over a count with a known trip count"
        bound_outside = {r.name for op in self.model.ops if op.call and op.call.startswith(("nl.", "nisa."))
                         and loop not in op.loops for r in op.writes if r.kind == "bind"}
        for op in self.ops:
            problem = self._op(op, bound_outside)
            if problem:
                return f"line {op.line}: {problem}"
        if len(self.rows) != 1 or not (self.tensors or self.bound):
            return "its tiles do not share one partition size"
        rows = next(iter(self.rows))
        partitions = self.model.hardware.memory.sbuf_partitions
        factor = partitions // rows
        while factor > 1 and any(t % factor for t in trips):
            factor //= 2
        if factor < 2 or factor * rows > partitions:
            return f"its {rows}-row tiles leave no room, or {trips[0]} iterations do not divide"
        return _Fold(loop, tuple(trips), factor, rows, tuple(sorted(self.tensors)),
                     tuple(sorted(self.blocks.items())), tuple(sorted(self.bound.items())))

    def _op(self, op: Statement, bound_outside: set[str]) -> str | None:
        value = op.value
        if op.call in ALLOCATORS:
            return self._declared(op)
        if op.call not in _LOADS_STORES and op.call not in _ELEMENTWISE:
            return f"`{op.call or u.flat(u.code_of(op.stmt))[:40]}` is not element-wise"
        assert isinstance(value, cst.Call)
        mask = u.keyword(value, "mask")
        if mask is not None and u.dotted(mask.value) != "None":
            return "a masked statement"
        inner = {self.model.canonical(c) for c in u.walk(value) if isinstance(c, cst.Call) and c is not value}
        inner -= _INDEXING
        if any(c and c.startswith(("nl.", "nisa.")) and c not in _ELEMENTWISE for c in inner):
            return "a nested call that is not element-wise"
        if op.call == "nl.store" and (inner or not isinstance(_stored(value), cst.Name | cst.Subscript)):
            return "the stored value is computed in the store statement"
        var = self.loop.var
        allowed = 0
        for ref in op.refs:
            tensor = self.model.tensors.get(ref.name)
            if tensor is None:
                problem = self._bound_tile(op, ref, bound_outside)
                if problem:
                    return problem
                continue
            if tensor.buffer == "hbm":
                if op.call not in _LOADS_STORES:
                    return f"`{ref.name}` in HBM is used by a computation"
                allowed += sum(1 for n in u.name_nodes(ref.node) if n.value == var)
                continue
            problem = self._on_chip(ref, tensor)
            if problem:
                return problem
            if ref.index is not None and tensor.name in self.blocks:
                allowed += sum(1 for n in u.name_nodes(_element_node(ref, self.blocks[tensor.name]))
                               if n.value == var)
        if sum(1 for n in u.name_nodes(op.stmt) if n.value == var) != allowed:
            return f"`{var}` reaches the computation outside a block index"
        return None

    def _bound_tile(self, op: Statement, ref: Ref, bound_outside: set[str]) -> str | None:
        """A name that is not a declared tensor: a tile the body binds (by a load: its rows and
        dimensions from the HBM index; by a computation: those of the tiles it reads), a tile from
        outside the loop (not stackable), or something else (a module, a constant)."""
        if ref.kind == "bind":
            if op.call == "nl.load":
                shape = _loaded_shape(self.model, op)
                if shape is None:
                    return f"the shape `{ref.name}` is loaded with is not evident"
                self.rows.add(shape[0])
                self.bound[ref.name] = len(shape)
            elif op.call in _ELEMENTWISE:
                dims = {self.bound[r.name] for r in op.reads if r.name in self.bound}
                if len(dims) != 1:
                    return f"`{ref.name}` is computed from no stacked tile"
                self.bound[ref.name] = dims.pop()
            else:
                return f"`{ref.name}` is bound by `{op.call}`"
            return None
        if ref.name in self.bound:
            return None if ref.index is None else f"`{ref.name}` is indexed"
        if ref.name in bound_outside:
            return f"`{ref.name}` is a tile from outside the loop"
        return None

    def _declared(self, op: Statement) -> str | None:
        name = u.assigned_name(op.stmt)
        tensor = self.model.tensors.get(name or "")
        if tensor is None or tensor.buffer == "hbm":
            return "an allocation the analysis does not read"
        if tensor.par_axis >= len(tensor.shape) or tensor.shape[tensor.par_axis] is None:
            return f"the partition size of `{tensor.name}` is not a number"
        if self.loop.var in u.names_in(op.stmt):
            return f"the shape of `{tensor.name}` depends on `{self.loop.var}`"
        return None

    def _on_chip(self, ref: Ref, tensor: Tensor) -> str | None:
        declared_inside = tensor.decl is not None and self.loop in tensor.decl.loops
        if not declared_inside:
            dim = self._block_dim(tensor)
            if isinstance(dim, str):
                return dim
            self.blocks[tensor.name] = dim
        rows = tensor.shape[tensor.par_axis] if tensor.par_axis < len(tensor.shape) else None
        if rows is None:
            return f"the partition size of `{tensor.name}` is not a number"
        if ref.index is None:
            if not declared_inside:
                return f"`{tensor.name}` is used whole"
        elif len(ref.index) <= tensor.par_axis or _full_rows(ref.index[tensor.par_axis]) != rows:
            return f"`{tensor.name}` is not accessed over its {rows} partitions"
        elif any(self.loop.var in _element_vars(e) for i, e in enumerate(ref.index)
                 if i < tensor.par_axis and i != self.blocks.get(tensor.name)):
            return f"`{tensor.name}` mixes `{self.loop.var}` into another block index"
        self.rows.add(rows)
        self.tensors.add(tensor.name)
        return None

    def _block_dim(self, tensor: Tensor) -> int | str:
        """The block dimension of a tensor declared outside the loop that the loop variable selects
        (alone, coefficient 1, over the whole dimension) in every access, all inside the loop."""
        var, trips = self.loop.var, self.loop.trips
        found: set[int] = set()
        for op, ref in self.model.refs(tensor.name):
            if op is tensor.decl:
                continue
            if self.loop not in op.loops:
                return f"`{tensor.name}` is used outside the loop"
            key = self.model.block_key(ref)
            if key is None:
                return f"`{tensor.name}` is not a block tensor the loop indexes"
            dims = [i for i, e in enumerate(key) if e == Affine.of(coeffs={var: 1})]
            if len(dims) != 1 or tensor.block_shape[dims[0]] != trips:
                return f"`{var}` does not select one block of `{tensor.name}` per iteration"
            found.add(dims[0])
        return found.pop() if len(found) == 1 else f"`{tensor.name}` is indexed by `{var}` in several ways"


def _trip_counts(model: KernelModel, loop: ForLoop) -> list[int]:
    """The loop's trip count: the static one, else one per input size the profile ran (timed first,
    then checked), evaluated from the kernel's shapes; [] when unknown."""
    if loop.trips is not None:
        return [loop.trips]
    args = u.loop_args(loop.node)
    shapes = u.input_shapes(model.profile)
    if len(args) != 1 or not shapes:
        return []
    counts = []
    for sizes in shapes.values():
        params = {p.name.value: s for p, s in zip(model.fn.params.params, sizes, strict=False)}
        value = u.static_value(_with_shapes(args[0].value, params), u.shape_values(model.fn, sizes))
        if value is None or value != int(value):
            return []
        counts.append(int(value))
    return counts


def _with_shapes(expr: cst.BaseExpression, params: dict[str, Sequence[int]]) -> cst.BaseExpression:
    """`expr` with every `p.shape[i]` of an input of known shape written as its number."""

    class _Shapes(cst.CSTTransformer):
        def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:  # noqa: N802
            base, index = original.value, original.slice[0].slice if len(original.slice) == 1 else None
            if (isinstance(base, cst.Attribute) and base.attr.value == "shape" and isinstance(base.value, cst.Name)
                    and base.value.value in params and isinstance(index, cst.Index)
                    and isinstance(index.value, cst.Integer)):
                shape = params[base.value.value]
                position = int(index.value.value)
                if -len(shape) <= position < len(shape):
                    return _integer(shape[position])
            return updated

    return expr.visit(_Shapes())  # type: ignore[return-value]


def _loaded_shape(model: KernelModel, op: Statement) -> list[int | cst.BaseExpression] | None:
    """The shape of the tile `op` loads, from its HBM index (an integer index drops a dimension; an
    open `:` spans the source's whole dimension); None when a size is not evident or the partition
    size is not a number."""
    source = model.load_source(op)
    if source is None or source.index is None:
        return None
    shape: list[int | cst.BaseExpression] = []
    for d, element in enumerate(source.index):
        if isinstance(element, Affine):
            if len(element.ranges) > 1:
                return None
            if element.ranges:
                shape.append(element.ranges[0][1])
        elif isinstance(element, Span) and element.size is not None:
            shape.append(element.size)
        elif isinstance(element, Span) and element.start == Affine():
            shape.append(cst.parse_expression(f"{source.name}.shape[{d}]"))
        else:
            return None
    return shape if shape and isinstance(shape[0], int) else None


def _stored(call: cst.Call) -> cst.BaseExpression | None:
    """The value a store writes (`value=` or its second argument)."""
    value = u.keyword(call, "value")
    if value is not None:
        return value.value
    positional = [a for a in call.args if a.keyword is None]
    return positional[1].value if len(positional) > 1 else None


def _element_vars(element: object) -> set[str]:
    if isinstance(element, Affine):
        return element.vars
    if isinstance(element, Span):
        return element.start.vars
    return set()


def _element_node(ref: Ref, i: int) -> cst.CSTNode:
    assert isinstance(ref.node, cst.Subscript)
    return ref.node.slice[i]


def folds(model: KernelModel, known: dict[int, Sequence[int]] | None = None) -> list[_Fold]:
    """Every loop that can be folded, outermost first; `known`: trip counts by loop line, for a loop
    whose count only the profile's input sizes tell."""
    found = []
    for loop in model.loops:
        fold = _Reader(model, loop, (known or {}).get(loop.line, ())).fold()
        if isinstance(fold, _Fold):
            found.append(fold)
    return found


class FillPartitions(ModelRule):
    """Stack two (or four) iterations of a loop whose element-wise tiles use 64 (or 32) partitions on all 128: every
    engine instruction does the work of several, as an instruction's cost is its free size, not its partition count."""

    name = "fill_partitions"

    def plans(self, model: KernelModel) -> list[Plan]:
        found = folds(model)
        folding = {id(fold.loop) for fold in found}
        # an enclosing loop that folds already covers the nest: one plan per nest
        plans = [self._plan(model, fold) for fold in found
                 if not any(id(outer) in folding for outer in fold.loop.chain[:-1])]
        return sorted(plans, key=lambda p: -p.priority)

    def _plan(self, model: KernelModel, fold: _Fold) -> Plan:
        engines: dict[str, float] = {}
        for op in model.ops_in(fold.loop):
            u.add_times(engines, {e: t for e, t in model.cost(op).items() if e != "dma"})
        saved = {e: t * (1 - 1 / fold.factor) for e, t in engines.items()}
        latency = model.latency or 0.0
        priority = u.predicted_gain(model.profile, saved) / latency if latency else 0.01
        what = (f"Stack {fold.factor} iterations of `for {fold.loop.var}` (line {fold.loop.line}) on the partitions: "
                f"its {fold.rows}-row tiles ({', '.join(fold.names)}) become {fold.factor * fold.rows}-row tiles, "
                f"each load and store is issued per stacked iteration, and the loop runs "
                f"{fold.trips // fold.factor} times instead of {fold.trips}.")
        params = {"loop": fold.loop.line, "factor": fold.factor, "trips": list(fold.sizes)}
        return Plan(self.name, fold.loop.line, what, params, priority)

    def rewrite(self, source: str, plan: Plan) -> str:
        model = model_of(source)
        line = plan.params.get("loop")
        known = {line: plan.params.get("trips") or []} if isinstance(line, int) else {}
        fold = next((f for f in folds(model, known) if f.loop.line == line
                     and f.factor == plan.params.get("factor")), None)
        if fold is None:
            raise RuleError(f"the loop at line {plan.params.get('loop')} no longer stacks on the partitions")
        return u.compiled_code(_rewrite(model, fold), self.name)


# ---------------------------------------------------------------- the rewrite


def _integer(value: int) -> cst.Integer:
    return cst.Integer(str(value))


def _rows_element(element: cst.SubscriptElement, rows: int, offset: int) -> cst.SubscriptElement:
    """A partition index over `rows` rows from `offset`: `offset + nl.arange(rows)...`, `a:b`, `nl.ds(a, rows)`."""
    index = element.slice
    if isinstance(index, cst.Slice):
        return element.with_changes(slice=index.with_changes(lower=_integer(offset) if offset or index.lower
                                                             else None, upper=_integer(offset + rows)))
    assert isinstance(index, cst.Index)
    expr = index.value
    if isinstance(expr, cst.Call) and u.dotted(expr.func) and u.dotted(expr.func).endswith(".ds"):  # type: ignore[union-attr]
        args = [expr.args[0].with_changes(value=_integer(offset)), expr.args[1].with_changes(value=_integer(rows))]
        return element.with_changes(slice=index.with_changes(value=expr.with_changes(args=args)))
    sized = _with_arange_size(expr, rows)
    if offset:
        sized = cst.BinaryOperation(_integer(offset), cst.Add(), sized)
    return element.with_changes(slice=index.with_changes(value=sized))


def _with_arange_size(expr: cst.BaseExpression, rows: int) -> cst.BaseExpression:
    class _Size(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:  # noqa: N802
            if (u.dotted(original.func) or "").endswith("arange") and len(updated.args) == 1:
                return updated.with_changes(args=[updated.args[0].with_changes(value=_integer(rows))])
            return updated

    return expr.visit(_Size())  # type: ignore[return-value]


def _rows_of(name: str, dims: int, rows: int, offset: int) -> cst.Subscript:
    """`name[offset:offset + rows, :, ...]`: the rows of a whole tile of `dims` dimensions."""
    elements = [cst.SubscriptElement(cst.Slice(lower=_integer(offset) if offset else None,
                                               upper=_integer(offset + rows)))]
    elements += [cst.SubscriptElement(cst.Slice(lower=None, upper=None))] * (dims - 1)
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return cst.Subscript(cst.Name(name), [*(e.with_changes(comma=comma) for e in elements[:-1]), elements[-1]])


def _resized(ref: Ref, tensor: Tensor, rows: int, offset: int) -> cst.Subscript:
    """The access `ref` of an on-chip tensor over `rows` partitions from `offset`."""
    node = ref.node
    if not isinstance(node, cst.Subscript):
        return _rows_of(ref.name, len(tensor.shape) - tensor.par_axis, rows, offset)
    elements = list(node.slice)
    elements[tensor.par_axis] = _rows_element(elements[tensor.par_axis], rows, offset)
    return node.with_changes(slice=elements)


def _declaration(op: Statement, tensor: Tensor, fold: _Fold) -> cst.SimpleStatementLine:
    """The allocation with the partition dimension grown (and the loop's block dimension shrunk)."""
    block = dict(fold.blocks).get(tensor.name)

    def stacked(elements: list[cst.Element]) -> list[cst.Element]:
        par = elements[tensor.par_axis].value
        grown: cst.BaseExpression = _integer(fold.factor * fold.rows)
        if isinstance(par, cst.Call) and (u.dotted(par.func) or "").endswith("par_dim"):
            grown = par.with_changes(args=[par.args[0].with_changes(value=grown)])
        elements[tensor.par_axis] = elements[tensor.par_axis].with_changes(value=grown)
        if block is not None:
            elements[block] = elements[block].with_changes(value=_integer(fold.trips // fold.factor))
        return elements

    return u.with_allocated_shape(op.stmt, tensor.name, stacked)


def _stacked(model: KernelModel, op: Statement, fold: _Fold, k: int) -> cst.SimpleStatementLine:
    """Copy `k` of a load or store: the HBM side at iteration `factor*i + k`, the on-chip side in
    partitions `k*rows ..` (a tile the load binds is written there instead)."""
    var = fold.loop.var
    assert var is not None
    iteration: cst.BaseExpression = cst.BinaryOperation(_integer(fold.factor), cst.Multiply(), cst.Name(var))
    if k:
        iteration = cst.BinaryOperation(iteration, cst.Add(), _integer(k))
    iteration = iteration.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    bound = dict(fold.bound)
    swaps: dict[int, cst.CSTNode] = {}
    for ref in op.refs:
        tensor = model.tensors.get(ref.name)
        if tensor is None:
            if ref.name in bound and ref.index is None:
                swaps[id(ref.node)] = _rows_of(ref.name, bound[ref.name], fold.rows, k * fold.rows)
        elif tensor.buffer == "hbm":
            for name in u.name_nodes(ref.node):
                if name.value == var:
                    swaps[id(name)] = iteration
        else:
            swaps[id(ref.node)] = _resized(ref, tensor, fold.rows, k * fold.rows)
    return u.replace_nodes(op.stmt, swaps)


def _loaded_tile(model: KernelModel, op: Statement, fold: _Fold) -> list[cst.BaseStatement]:
    """`t = nl.load(src[...])` as a declaration of the stacked tile and one load per stacked iteration."""
    name = u.assigned_name(op.stmt)
    shape = _loaded_shape(model, op)
    source = model.load_source(op)
    node = u.small(op.stmt)
    assert name is not None and shape is not None and source is not None and isinstance(node, cst.Assign)
    assert isinstance(node.value, cst.Call)
    dims = [u.code_of(_integer(fold.factor * fold.rows))] + [
        str(d) if isinstance(d, int) else u.code_of(d) for d in shape[1:]]
    dtype = u.keyword(node.value, "dtype")
    dtype_text = u.code_of(dtype.value) if dtype is not None else f"{source.name}.dtype"
    language = next((a for a, path in model.aliases.items() if path.endswith("language")), None)
    if language is None:
        raise RuleError("the kernel does not import the NKI language module under a name")
    shape_text = ", ".join(dims) + ("," if len(dims) == 1 else "")
    text = f"{name} = {language}.ndarray(({shape_text}), dtype={dtype_text}, buffer={language}.sbuf)\n"
    declaration = op.stmt.with_changes(body=[cst.parse_statement(text).body[0]])
    copies: list[cst.BaseStatement] = []
    for k in range(fold.factor):
        stmt = _stacked(model, op, fold, k)
        small = u.small(stmt)
        assert isinstance(small, cst.Assign)
        target = cst.AssignTarget(_rows_of(name, len(shape), fold.rows, k * fold.rows))
        copies.append(stmt.with_changes(body=[small.with_changes(targets=[target])], leading_lines=[]))
    return [declaration, *copies]


def _rewrite(model: KernelModel, fold: _Fold) -> cst.Module:
    swaps: dict[int, cst.CSTNode | cst.FlattenSentinel] = {}
    bound = dict(fold.bound)
    for name in fold.tensors:
        tensor = model.tensors[name]
        assert tensor.decl is not None
        swaps[id(tensor.decl.stmt)] = _declaration(tensor.decl, tensor, fold)
    for op in model.ops_in(fold.loop):
        if u.is_marker(op.stmt) or op.call in ALLOCATORS:
            continue
        if op.call == "nl.load" and u.assigned_name(op.stmt) in bound:
            swaps[id(op.stmt)] = cst.FlattenSentinel(_loaded_tile(model, op, fold))
        elif op.call in _LOADS_STORES:
            swaps[id(op.stmt)] = cst.FlattenSentinel([_stacked(model, op, fold, k) for k in range(fold.factor)])
        else:
            for ref in op.refs:
                tensor = model.tensors.get(ref.name)
                if tensor is not None and tensor.buffer != "hbm" and isinstance(ref.node, cst.Subscript):
                    swaps[id(ref.node)] = _resized(ref, tensor, fold.factor * fold.rows, 0)
    header = fold.loop.node
    call = header.iter
    assert isinstance(call, cst.Call)
    (arg,) = u.loop_args(header)
    count: cst.BaseExpression = _integer(fold.trips // fold.factor)
    if fold.loop.trips is None:  # written from the input sizes: divide what is written
        count = cst.BinaryOperation(arg.value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]),
                                    cst.FloorDivide(), _integer(fold.factor))
    swaps[id(call)] = call.with_changes(args=[arg.with_changes(value=count)])
    return u.replace_nodes(model.module, swaps)
