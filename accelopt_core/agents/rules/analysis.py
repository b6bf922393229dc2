"""One reading of a kernel that the rules (and the editor's findings) ask their questions of.

Kernels come in several styles: compiler output (every tensor declared up front with block
dimensions, `v12`-style names, full `nl.arange` index expressions, masks), the NKI tutorials (tiles
bound per iteration by `nl.load`, slices `i * 128:(i + 1) * 128`), the newer `nki` API (`dst=`
first), and ours. Whatever the spelling, a kernel is loops, tensors, statements that read and write
regions of those tensors through index expressions, and the engine each statement runs on. This
module builds that picture once per source (libcst) and joins the profile's per-line cost, so a
rule asks "is this load invariant in that loop?" or "is this block tensor only used inside one
iteration?" here, once, for every style.

Index expressions are read as affine forms over the loop variables: `512 * i2 + nl.arange(512)[None, :]`
is 512*i2 plus an element range of 512, `i * 128:(i + 1) * 128` is a span of 128 starting at 128*i,
`nl.ds(k * 64, 64)` likewise. Anything else is "not understood" (None) and makes the questions
that need it answer conservatively: a rule declines rather than rewrite wrongly.
"""

from __future__ import annotations

import builtins
import hashlib
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst
from libcst.metadata import CodeRange

from ...hardware import HardwareProfile, load_hardware
from ...nki.instructions import Engine, source_engine_choices, source_engines
from . import cst_util as u
from .base import Plan

# ---------------------------------------------------------------- index expressions


@dataclass(frozen=True)
class Affine:
    """const + sum(coefficient * loop variable) + element ranges (the `nl.arange(n)` terms, each
    `coefficient * [0, n)`)."""

    const: int = 0
    coeffs: tuple[tuple[str, int], ...] = ()
    ranges: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def of(const: int = 0, coeffs: Mapping[str, int] | None = None,
           ranges: Iterable[tuple[int, int]] = ()) -> Affine:
        items = tuple(sorted((v, c) for v, c in (coeffs or {}).items() if c))
        return Affine(const, items, tuple(sorted(r for r in ranges if r[0] and r[1] > 1)))

    @property
    def vars(self) -> set[str]:
        return {v for v, _ in self.coeffs}

    def coeff(self, var: str) -> int:
        return dict(self.coeffs).get(var, 0)

    @property
    def is_scalar(self) -> bool:
        """An integer (per iteration): no element range."""
        return not self.ranges

    def plus(self, other: Affine) -> Affine:
        coeffs = dict(self.coeffs)
        for v, c in other.coeffs:
            coeffs[v] = coeffs.get(v, 0) + c
        return Affine.of(self.const + other.const, coeffs, (*self.ranges, *other.ranges))

    def times(self, k: int) -> Affine:
        return Affine.of(self.const * k, {v: c * k for v, c in self.coeffs}, ((c * k, n) for c, n in self.ranges))

    def spread(self) -> tuple[int, int]:
        """(lowest, highest) offset the element ranges add to the rest."""
        lo = sum(min(0, c * (n - 1)) for c, n in self.ranges)
        hi = sum(max(0, c * (n - 1)) for c, n in self.ranges)
        return lo, hi


@dataclass(frozen=True)
class Span:
    """A slice `a:b` or `nl.ds(a, n)`: `size` elements from `start` (size None when not evident)."""

    start: Affine
    size: int | None


Element = Affine | Span | None  # None: an index the analysis does not understand


# ---------------------------------------------------------------- what the kernel is made of


@dataclass(eq=False)
class ForLoop:
    """One `for` statement of the kernel (a source loop, not the trace's recorded nki.trace.Loop)."""

    node: cst.For = field(repr=False)
    var: str | None
    kind: str | None  # affine / sequential / static / range, None for other iterables
    trips: int | None  # static trip count
    line: int
    parent: ForLoop | None = field(repr=False)
    depth: int
    # the variable's value in iteration k is start + step * k (None: not evident from the header)
    start: int | None = 0
    step: int | None = 1

    @property
    def counted(self) -> bool:
        """Whether the header is a plain count (`range(n)`), the form rules rewrite by changing `n`."""
        args = u.loop_args(self.node)
        return self.kind is not None and len(args) == 1 and args[0].keyword is None

    @property
    def chain(self) -> tuple[ForLoop, ...]:
        """This loop and the loops around it, outermost first."""
        out: list[ForLoop] = []
        loop: ForLoop | None = self
        while loop is not None:
            out.append(loop)
            loop = loop.parent
        return tuple(reversed(out))


@dataclass(frozen=True, eq=False)
class Ref:
    """One access of a variable by a statement. kind: read, write, accumulate (`+=`), or bind
    (`x = ...`: a fresh value). `index` holds one Element per subscript element (None: the whole
    variable); `node` is the Subscript or Name in the source."""

    name: str
    kind: str
    index: tuple[Element, ...] | None
    node: cst.CSTNode = field(repr=False)
    text: str | None = None  # the subscript, without spaces


@dataclass(eq=False)
class Statement:
    """One simple statement of the kernel."""

    order: int
    stmt: cst.SimpleStatementLine = field(repr=False)
    line: int
    loops: tuple[ForLoop, ...] = field(repr=False)
    call: str | None  # canonical callee: `nl.load`, `nisa.tensor_scalar`, `range`, ...
    engine: str | None  # dma, tensor, vector, scalar, gpsimd, or None (no instruction)
    refs: tuple[Ref, ...]

    @property
    def reads(self) -> list[Ref]:
        return [r for r in self.refs if r.kind in ("read", "accumulate")]

    @property
    def writes(self) -> list[Ref]:
        return [r for r in self.refs if r.kind in ("write", "accumulate", "bind")]

    @property
    def loop(self) -> ForLoop | None:
        return self.loops[-1] if self.loops else None

    @property
    def value(self) -> cst.BaseExpression | None:
        """The expression the statement computes (the right-hand side, or the call of a bare call)."""
        node = u.small(self.stmt)
        return node.value if isinstance(node, cst.Assign | cst.AugAssign | cst.Expr) else None


@dataclass(frozen=True, eq=False)
class Locality:
    """A block tensor used only within single iterations of `loop`: `dims` are the block
    dimensions that select the iteration's blocks (`key` their affine forms); the others stay."""

    loop: ForLoop
    dims: tuple[int, ...]
    key: tuple[Affine, ...]


@dataclass(eq=False)
class Tensor:
    """A tensor the kernel allocates (or receives): where it lives and its declared shape. Block
    dimensions are the ones in front of the partition dimension (`par_axis` of them)."""

    name: str
    buffer: str  # hbm, sbuf, psum
    shape: tuple[int | None, ...]
    par_axis: int
    decl: Statement | None = field(repr=False)  # the allocating statement (None: a kernel parameter)

    @property
    def block_shape(self) -> tuple[int | None, ...]:
        return self.shape[:self.par_axis]

    @property
    def blocked(self) -> bool:
        return self.par_axis > 0 and self.buffer in ("sbuf", "psum")


_GRID_AXES = {"p": 0, "x": 1}  # `nl.mgrid[...]`'s partition and free axis, by attribute
ALLOCATORS = frozenset({"nl.ndarray", "nl.zeros", "nl.ones", "nl.full", "nl.empty", "nl.shared_constant"})
# the engine each source name runs on when the kernel picks none, and the engines it may run on
_ENGINES = source_engines()
_ONE_ENGINE = frozenset(name for name, engines in source_engine_choices().items() if len(engines) == 1)
_BUFFERS = {"sbuf": "sbuf", "psum": "psum", "hbm": "hbm", "shared_hbm": "hbm", "private_hbm": "hbm"}


# ---------------------------------------------------------------- building the model


class KernelModel:
    """The kernel function of a module as loops, tensors and statements, with the profile's costs."""

    def __init__(self, module: cst.Module, profile: Any = None, function: str | None = None):
        fn = (next((f for f in u.functions(module) if f.name.value == function), None) if function
              else u.kernel_function(module))
        if fn is None:
            raise u.RuleError(f"no kernel function {function or ''} in the source".replace("  ", " "))
        self.module = module
        self.fn = fn
        self.profile = profile
        self.pos: Mapping[cst.CSTNode, CodeRange] = u.positions(module)
        self.aliases = _aliases(module, fn)
        self.constants = module_constants(module)  # module-level `NAME = value`
        self.env = {**self.constants, **u.single_assignments(fn)}
        self.grids = self._grid_names(fn)
        self.loops: list[ForLoop] = []
        self.ops: list[Statement] = []
        self.loop_of: dict[int, ForLoop] = {}
        self.tensors: dict[str, Tensor] = {p.name.value: Tensor(p.name.value, "hbm", (), 0, None)
                                           for p in fn.params.params}
        self._loop_vars: dict[str, Affine | None] = {}  # each loop variable's value as a form of itself
        self.helpers: dict[str, cst.FunctionDef] = {}  # functions defined inside the kernel, by name
        self._walk(fn, None)
        self._refs: dict[str, list[tuple[Statement, Ref]]] = {}
        for op in self.ops:
            for ref in op.refs:
                self._refs.setdefault(ref.name, []).append((op, ref))
        self.line_engines = u.line_engine_times(profile)
        self.profile_trips = u.loop_trips(profile)
        self.latency = u.latency_ms(profile)

    @property
    def hardware(self) -> HardwareProfile:
        """The generation the profile ran on: the partition, PSUM and SBUF limits the rules respect."""
        return hardware_of(self.profile)

    # ------------------------------------------------------------ construction helpers
    def canonical(self, call: cst.Call) -> str | None:
        """`nl.load` for a call of `nl.load`, `nki.language.load` or `language.load` under any alias."""
        return canonical_name(u.dotted(call.func), self.aliases)

    def _walk(self, owner: cst.CSTNode, loop: ForLoop | None) -> None:
        for stmt in u.block_statements(owner):
            if isinstance(stmt, cst.For):
                self._loop(stmt, loop)
            elif isinstance(stmt, cst.FunctionDef):
                self.helpers[stmt.name.value] = stmt  # its body runs where it is called, not here
            elif isinstance(stmt, cst.BaseCompoundStatement):
                self._walk(stmt, loop)
                orelse = getattr(stmt, "orelse", None)
                while orelse is not None:
                    self._walk(orelse, loop)
                    orelse = getattr(orelse, "orelse", None)
            elif isinstance(stmt, cst.SimpleStatementLine):
                self._op(stmt, loop)

    def _loop(self, node: cst.For, parent: ForLoop | None) -> None:
        start, stop, step = self._bounds(node)
        trips = None
        if start is not None and stop is not None and step:
            trips = max(0, -((start - stop) // step))  # the length of range(start, stop, step)
        loop = ForLoop(node, u.loop_var(node), u.loop_kind(node), trips, u.line_of(node, self.pos), parent,
                    parent.depth + 1 if parent else 0, start, step)
        self.loops.append(loop)
        self.loop_of[id(node)] = loop
        if loop.var:
            form = (Affine.of(start, {loop.var: step}) if start is not None and step is not None else None)
            # two loops binding one name at different starts or steps: the name has no single form
            self._loop_vars[loop.var] = form if self._loop_vars.get(loop.var, form) == form else None
        self._walk(node, loop)

    def _bounds(self, node: cst.For) -> tuple[int | None, int | None, int | None]:
        """(start, stop, step) of a `range`-like header, each None when not a static integer: `range(n)`,
        `range(a, b)` and `range(a, b, s)` in every loop form; (None, None, None) for other iterables."""
        args = u.loop_args(node)
        if u.loop_kind(node) is None or not 1 <= len(args) <= 3 or any(a.keyword is not None for a in args):
            return None, None, None
        values = [u.static_value(a.value, self.env) for a in args]
        ints = [int(v) if v is not None and v == int(v) else None for v in values]
        if len(ints) == 1:
            return 0, ints[0], 1
        return ints[0], ints[1], ints[2] if len(ints) == 3 else 1

    def _op(self, stmt: cst.SimpleStatementLine, loop: ForLoop | None) -> None:
        chain = loop.chain if loop else ()
        node = stmt.body[0] if len(stmt.body) == 1 else None
        value = node.value if isinstance(node, cst.Assign | cst.AugAssign | cst.Expr) else None
        call = self.canonical(value) if isinstance(value, cst.Call) else None
        refs = tuple(self._ref(a) for a in u.accesses(stmt))
        refs += tuple(Ref(name, "read", None, call) for call, helper in self.helper_calls(stmt)
                      for name in sorted(self.closure(helper)))
        if call == "nl.loop_reduce":  # `dst[...] = nl.loop_reduce(x, ...)` is dst = op(dst, x)
            refs = tuple(Ref(r.name, "accumulate", r.index, r.node, r.text) if r.kind == "write" else r for r in refs)
        op = Statement(len(self.ops), stmt, u.line_of(stmt, self.pos), chain, call,
                self._engine(value) if isinstance(value, cst.Call) else None, refs)
        self.ops.append(op)
        if call in ALLOCATORS and isinstance(node, cst.Assign) and isinstance(value, cst.Call):
            target = u.assigned_name(stmt)
            if target is not None:
                self.tensors[target] = self._tensor(target, value, op)

    def helper_calls(self, stmt: cst.CSTNode) -> list[tuple[cst.Call, cst.FunctionDef]]:
        """The calls under `stmt` of functions defined inside the kernel, with their definitions."""
        return [(node, self.helpers[node.func.value]) for node in u.walk(stmt) if isinstance(node, cst.Call)
                and isinstance(node.func, cst.Name) and node.func.value in self.helpers]

    def closure(self, helper: cst.FunctionDef) -> set[str]:
        """Names a helper defined inside the kernel reads from the kernel (not its parameters, its own
        names, the imports, module-level names or builtins): where it is called, the call reads them too."""
        accesses = u.accesses(helper.body)
        own = {p.name.value for p in helper.params.params} | {a.name for a in accesses if a.kind == "bind"}
        outside = (own | set(self.aliases) | set(self.constants) | set(dir(builtins))
                   | {f.name.value for f in u.functions(self.module)})
        return {a.name for a in accesses if a.kind in ("read", "accumulate")} - outside

    def _ref(self, access: u.Access) -> Ref:
        index = None
        if isinstance(access.node, cst.Subscript):
            index = tuple(self.element(e.slice) for e in access.node.slice)
        return Ref(access.name, access.kind, index, access.node, access.index)

    def _tensor(self, name: str, call: cst.Call, op: Statement) -> Tensor:
        fn = self.canonical(call) or ""
        shape_arg = next((a for a in call.args if a.keyword is None or a.keyword.value == "shape"), None)
        buffer_arg = u.keyword(call, "buffer")
        buffer = "hbm" if fn == "nl.shared_constant" else "sbuf"
        if buffer_arg is not None:
            buffer = _BUFFERS.get((u.dotted(buffer_arg.value) or "").rsplit(".", 1)[-1], "sbuf")
        dims: list[int | None] = []
        par_axis = 0
        shape = shape_arg.value if shape_arg is not None and fn != "nl.shared_constant" else None
        elements = shape.elements if isinstance(shape, cst.Tuple | cst.List) else ([cst.Element(shape)]
                                                                                   if shape is not None else [])
        for i, element in enumerate(elements):
            expr = element.value
            if isinstance(expr, cst.Call) and (canonical_name(u.dotted(expr.func), self.aliases) == "nl.par_dim"
                                               or (u.dotted(expr.func) or "").endswith("par_dim")):
                par_axis = i
                expr = expr.args[0].value if expr.args else expr
            value = u.static_value(expr, self.env)
            dims.append(int(value) if value is not None and value == int(value) else None)
        return Tensor(name, buffer, tuple(dims), par_axis, op)

    def _engine(self, call: cst.Call) -> str | None:
        name = self.canonical(call) or ""
        engine = u.keyword(call, "engine")
        chosen = (u.dotted(engine.value) or "").rsplit(".", 1)[-1].replace("_engine", "") if engine else ""
        declared = _ENGINES.get(name)
        if declared == Engine.DMA or (declared is not None and name in _ONE_ENGINE and name.startswith("nisa.")):
            return declared
        if declared == Engine.TENSOR:
            return declared if chosen in ("", "unknown", declared) else chosen
        if chosen in ("vector", "scalar", "gpsimd"):
            return chosen
        if declared is not None:
            return declared
        if name in ALLOCATORS or not name.startswith(("nl.", "nisa.")):
            return None
        if name in ("nl.arange", "nl.mgrid", "nl.par_dim", "nl.ds", "nl.program_id", "nl.num_programs",
                    "nl.device_print", "nl.loop_reduce"):
            return "vector" if name == "nl.loop_reduce" else None
        return "vector"

    # ------------------------------------------------------------ index expressions
    def element(self, index: cst.BaseSlice) -> Element:
        """One subscript element as an Affine (an integer or an element range) or a Span (a slice)."""
        if isinstance(index, cst.Slice):
            if index.step is not None:
                return None
            start = self.affine(index.lower) if index.lower is not None else Affine()
            if start is None:
                return None
            if index.upper is None:
                return Span(start, None)
            upper = self.affine(index.upper)
            if upper is None or upper.ranges or start.ranges:
                return None
            size = upper.plus(start.times(-1))
            return Span(start, size.const if not size.coeffs else None)
        assert isinstance(index, cst.Index)
        expr = index.value
        if isinstance(expr, cst.Call) and canonical_name(u.dotted(expr.func), self.aliases) == "nl.ds":
            args = [a.value for a in expr.args]
            if len(args) == 2:
                start, size = self.affine(args[0]), u.static_value(args[1], self.env)
                if start is not None and start.is_scalar:
                    return Span(start, int(size) if size is not None else None)
            return None
        return self.affine(expr)

    def affine(self, expr: cst.BaseExpression, depth: int = 0) -> Affine | None:
        """The affine form of an integer (or arange) expression, or None."""
        if depth > 12:
            return None
        if isinstance(expr, cst.Integer):
            return Affine(int(expr.evaluated_value))
        if isinstance(expr, cst.Name):
            if expr.value in self._loop_vars:
                return self._loop_vars[expr.value]
            if expr.value in self.grids:
                return self.grids[expr.value]
            if expr.value in self.env:
                return self.affine(self.env[expr.value], depth + 1)
            return None
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            inner = self.affine(expr.expression, depth + 1)
            return inner.times(-1) if inner is not None else None
        if isinstance(expr, cst.BinaryOperation):
            left, right = self.affine(expr.left, depth + 1), self.affine(expr.right, depth + 1)
            if left is None or right is None:
                return None
            if isinstance(expr.operator, cst.Add):
                return left.plus(right)
            if isinstance(expr.operator, cst.Subtract):
                return left.plus(right.times(-1))
            if isinstance(expr.operator, cst.Multiply):
                if not left.coeffs and not left.ranges:
                    return right.times(left.const)
                if not right.coeffs and not right.ranges:
                    return left.times(right.const)
                return None
            if isinstance(expr.operator, cst.FloorDivide) and not (left.coeffs or left.ranges) and not (
                    right.coeffs or right.ranges) and right.const:
                return Affine(left.const // right.const)
            return None
        if isinstance(expr, cst.Subscript):  # nl.arange(n)[:, None] places the range on an axis
            base = expr.value
            if isinstance(base, cst.Call):
                return self._arange(base)
            return None
        if isinstance(expr, cst.Call):
            return self._arange(expr)
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.attr.value in _GRID_AXES:
            grid = self.env.get(expr.value.value)  # `i = nl.mgrid[0:128, 0:512]`, then `i.p`, `i.x`
            if grid is not None and self._is_grid(grid):
                return self._grid_axis(grid, _GRID_AXES[expr.attr.value])  # type: ignore[arg-type]
        value = u.static_value(expr, self.env) if isinstance(expr, cst.Attribute) else None
        return Affine(int(value)) if value is not None and value == int(value) else None

    def _is_grid(self, expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Subscript) and canonical_name(u.dotted(expr.value), self.aliases) == "nl.mgrid"

    def _grid_axis(self, grid: cst.Subscript, axis: int) -> Affine | None:
        """Axis `axis` of `nl.mgrid[a:b, c:d]` as an element range: `a:b` is a + [0, b - a)."""
        if axis >= len(grid.slice) or not isinstance(grid.slice[axis].slice, cst.Slice):
            return None
        part = grid.slice[axis].slice
        assert isinstance(part, cst.Slice)
        lower = u.static_value(part.lower, self.env) if part.lower is not None else 0.0
        upper = u.static_value(part.upper, self.env) if part.upper is not None else None
        if part.step is not None or lower is None or upper is None or lower != int(lower) or upper != int(upper):
            return None
        return Affine.of(int(lower), ranges=((1, int(upper - lower)),))

    def _grid_names(self, fn: cst.FunctionDef) -> dict[str, Affine | None]:
        """Names bound once by unpacking an index grid, `i_p, i_f = nl.mgrid[0:128, 0:512]`, as the
        element range of their axis."""
        found: dict[str, Affine | None] = {}
        for node in u.walk(fn):
            if not isinstance(node, cst.Assign) or len(node.targets) != 1 or not self._is_grid(node.value):
                continue
            target = node.targets[0].target
            if isinstance(target, cst.Tuple | cst.List):
                for axis, element in enumerate(target.elements):
                    if isinstance(element.value, cst.Name) and u.binding_count(fn, element.value.value) == 1:
                        found[element.value.value] = self._grid_axis(node.value, axis)  # type: ignore[arg-type]
        return found

    def _arange(self, call: cst.Call) -> Affine | None:
        if canonical_name(u.dotted(call.func), self.aliases) != "nl.arange" or len(call.args) != 1:
            return None
        size = u.static_value(call.args[0].value, self.env)
        return Affine.of(ranges=((1, int(size)),)) if size is not None and size == int(size) else None

    # ------------------------------------------------------------ looking things up
    def refs(self, name: str) -> list[tuple[Statement, Ref]]:
        """Every access of `name`, in program order."""
        return self._refs.get(name, [])

    def loop(self, node: cst.For) -> ForLoop:
        return self.loop_of[id(node)]

    def ops_in(self, loop: ForLoop) -> list[Statement]:
        return [op for op in self.ops if loop in op.loops]

    def trip(self, loop: ForLoop) -> float:
        """Iterations per execution of `loop`: the profile's, else the static count, else 1."""
        if loop.line in self.profile_trips:
            return self.profile_trips[loop.line]
        return float(loop.trips) if loop.trips is not None else 1.0

    def cost(self, op: Statement) -> dict[str, float]:
        """Time (ms) the profile charges the statement's line, per engine."""
        return dict(self.line_engines.get(op.line, {}))

    def busy(self) -> dict[str, float]:
        return u.engine_busy_ms(self.profile)

    def is_tensor(self, name: str) -> bool:
        return name in self.tensors

    # ------------------------------------------------------------ questions rules ask
    def varying(self, loop: ForLoop) -> set[str]:
        """Names whose value may differ between two iterations of `loop` (at the same point of the
        loops inside it): its variable, every name the body computes from it (a conservative
        fixpoint over the assignments) and every tensor the body writes."""
        inside = self.ops_in(loop)
        seeds = {loop.var} if loop.var else set()
        body = [op.stmt for op in inside]
        found = u.dependents(body, seeds)
        for op in inside:
            found |= {r.name for r in op.writes if r.kind != "bind" or self.is_tensor(r.name)}
        return found

    def invariant(self, op: Statement, loop: ForLoop) -> str | None:
        """Why `op` computes something different in different iterations of `loop`, or None when
        every value it reads is the same in all of them (its destination may still differ)."""
        if loop not in op.loops:
            return "the statement is not inside that loop"
        varying = self.varying(loop)
        written_elsewhere = {r.name for other in self.ops_in(loop) if other is not op for r in other.writes}
        for ref in op.reads:
            if ref.name in written_elsewhere:
                return f"`{ref.name}` is written in the loop"
        for ref in op.reads:
            used = u.names_in(ref.node) if ref.index is not None else {ref.name}
            clash = sorted((used - {ref.name}) & varying) if ref.index is not None else []
            if clash:
                return f"it reads `{ref.name}` at an index that depends on `{clash[0]}`"
        extra = _keyword_names(op) & varying
        if extra:
            return f"its arguments depend on `{sorted(extra)[0]}`"
        return None

    def reorder_problem(self, loop: ForLoop) -> str | None:
        """Why the iterations of `loop` may not run in another order (or together), or None: an
        `affine_range` promises they are independent, a `static_range` or Python `range` loop must
        be shown to carry nothing (`carried`), a `sequential_range` says it does."""
        if loop.kind not in ("affine", "static", "range"):
            return "not an affine_range, static_range or range loop"
        return self.carried(loop) if loop.kind != "affine" else None

    def carried(self, loop: ForLoop) -> str | None:
        """How an iteration of `loop` may use a value an earlier one made, or None when none is found: a
        name read (or accumulated) before the body binds it afresh, something written at a place that
        does not follow the loop variable, or a tensor read or written at more than the one place an
        iteration writes it. A `range`, `static_range` or `sequential_range` loop must be free of these
        for its iterations to run in another order (an `affine_range` promises it)."""
        if loop.var is None:
            return "the loop has no variable"
        ops = [op for op in self.ops_in(loop) if not u.is_marker(op.stmt)]
        bound = {r.name for op in ops for r in op.refs if r.kind == "bind"}
        for op in ops:
            for _, helper in self.helper_calls(op.stmt):
                inner = sorted(self.closure(helper) & (bound | {loop.var}))
                if inner:  # a copy or move of the body would rename or move the name, not the helper's read
                    return f"the helper `{helper.name.value}` reads `{inner[0]}` of the loop's body from inside"
        following = u.dependents([op.stmt for op in ops], {loop.var}) | {loop.var}
        fresh: set[str] = set()
        places: dict[str, set[str | None]] = {}
        for op in ops:
            for ref in op.refs:
                if ref.kind == "bind" or ref.name in fresh:
                    continue
                if ref.name in bound:
                    return f"`{ref.name}` carries a value from one iteration to the next"
                if ref.kind in ("write", "accumulate"):
                    if ref.index is None or not (u.names_in(ref.node) - {ref.name}) & following:
                        return f"`{ref.name}` is written at a place that does not follow the loop"
                    places.setdefault(ref.name, set()).add(ref.text)
            fresh |= {r.name for r in op.refs if r.kind == "bind"}
        for op in ops:
            described = _described(op.stmt)
            for ref in op.refs:
                if ref.name in places and id(ref.node) not in described and (
                        len(places[ref.name]) > 1 or ref.text not in places[ref.name]):
                    return f"`{ref.name}` is used at another place than an iteration writes it"
        return None

    def repeated_loads(self) -> list[tuple[Statement, ForLoop]]:
        """Loads from HBM that read the same bytes in every iteration of an enclosing loop, with the
        outermost such loop: hoisting out of it saves the most DMA."""
        found = []
        for op in self.ops:
            if op.call not in ("nl.load", "nisa.dma_copy", "nl.load_transpose2d", "nisa.dma_transpose"):
                continue
            source = self.load_source(op)
            if source is None or self.tensors.get(source.name, Tensor("", "sbuf", (), 0, None)).buffer != "hbm":
                continue
            for loop in op.loops:
                if self.invariant(op, loop) is None and not self._written_in(source.name, loop):
                    found.append((op, loop))
                    break
        return found

    def load_source(self, op: Statement) -> Ref | None:
        """The tensor a DMA reads (the HBM side of a load)."""
        reads = [r for r in op.reads if self.is_tensor(r.name)]
        hbm = [r for r in reads if self.tensors[r.name].buffer == "hbm"]
        return (hbm or reads or [None])[0]

    def _written_in(self, name: str, loop: ForLoop) -> bool:
        return any(r.name == name for op in self.ops_in(loop) for r in op.writes)

    def block_key(self, ref: Ref) -> tuple[Affine, ...] | None:
        """The block a ref of a block-dimension tensor selects, as affine forms of the loop
        variables; None when the tensor has no block dimensions or an element is not understood."""
        tensor = self.tensors.get(ref.name)
        if tensor is None or not tensor.blocked or ref.index is None or len(ref.index) < tensor.par_axis:
            return None
        key = ref.index[:tensor.par_axis]
        if any(not isinstance(e, Affine) or e.ranges for e in key):
            return None
        return tuple(e for e in key if isinstance(e, Affine))

    def iteration_local(self, name: str) -> Locality | str:
        """Where the block tensor `name` lives only inside single iterations of one loop: every
        access is inside the loop, the block dimensions split into ones that every access indexes
        alike with the variables of that loop and the loops around it (selecting a different block
        set in every iteration, so no value flows between iterations) and ones indexed by loops
        inside it only. The tensor can then be a smaller one, fresh in each iteration. Otherwise
        why not."""
        tensor = self.tensors.get(name)
        if tensor is None or not tensor.blocked:
            return "not a block-dimension tensor on chip"
        uses = [(op, ref) for op, ref in self.refs(name) if op is not tensor.decl]
        if not uses:
            return "it is never used"
        if any(ref.index is None for _, ref in uses):
            return "it is used as a whole"
        if any(op.call is not None and not op.call.startswith(("nl.", "nisa.")) for op, _ in uses):
            return "it is passed to a function the analysis does not know"
        keys = [self.block_key(ref) for _, ref in uses]
        if any(k is None for k in keys):
            return "a block index is not an affine expression of the loop variables"
        common = _common_prefix([op.loops for op, _ in uses])
        decl_loops = tensor.decl.loops if tensor.decl is not None else ()
        if not common or common[-1] in decl_loops:
            return "no loop inside its declaration holds every use"
        loop = common[-1]
        chain_vars = {lp.var for lp in loop.chain if lp.var}
        outer: list[int] = []
        for dim in range(tensor.par_axis):
            forms = {k[dim] for k in keys if k is not None}
            used = set().union(*(f.vars for f in forms))
            if len(forms) == 1 and used <= chain_vars:
                outer.append(dim)
            elif used & chain_vars:
                return f"block dimension {dim} mixes the loop's own variables with others"
        if not outer:
            return "no block dimension follows the loop"
        key = tuple(next(iter({k[d] for k in keys if k is not None})) for d in outer)
        outside = [lp for lp in loop.chain if lp not in decl_loops]
        bounds = [tensor.block_shape[d] for d in outer]
        if not _injective(key, outside, bounds):
            return "two iterations share a block"
        return Locality(loop, tuple(outer), key)



# ---------------------------------------------------------------- helpers


def hardware_of(profile: Any) -> HardwareProfile:
    """The hardware profile of the generation `profile` was measured or simulated on (trn1 without one)."""
    return load_hardware(getattr(profile, "hardware", None) or "trn1")


def canonical_name(dotted: str | None, aliases: Mapping[str, str]) -> str | None:
    """`nl.X` / `nisa.X` for a function of NKI's language / isa module under any alias (legacy
    `neuronxcc.nki`, the newer `nki`), else the dotted name as written."""
    if not dotted:
        return None
    head, _, rest = dotted.partition(".")
    path = aliases.get(head, head)
    full = f"{path}.{rest}" if rest else path
    parts = full.split(".")
    for marker, short in (("language", "nl"), ("isa", "nisa")):
        if marker in parts[:-1]:
            tail = parts[parts.index(marker) + 1:]
            return f"{short}.{'.'.join(tail)}"
    if parts[0] in ("nl", "nisa") and len(parts) > 1:
        return full
    return full


def _aliases(module: cst.Module, fn: cst.FunctionDef) -> dict[str, str]:
    """Import aliases at module level and at the top of the kernel (compiler output imports again)."""
    found = u.import_aliases(module)
    inner = cst.Module(body=[s for s in u.block_statements(fn) if isinstance(s, cst.SimpleStatementLine)
                             and any(isinstance(n, cst.Import | cst.ImportFrom) for n in s.body)])
    found.update(u.import_aliases(inner))
    return found


def module_constants(module: cst.Module) -> dict[str, cst.BaseExpression]:
    """Module-level `NAME = value` bindings (the last one of a name counts): part of a kernel's environment."""
    out: dict[str, cst.BaseExpression] = {}
    for stmt in module.body:
        name = u.assigned_name(stmt)
        node = u.small(stmt)
        if name is not None and isinstance(node, cst.Assign):
            out[name] = node.value
    return out


def _described(stmt: cst.CSTNode) -> set[int]:
    """The ids of names a statement reads only for their description (`out.dtype`, `x.shape`), not
    their values."""
    found: set[int] = set()
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute) and node.attr.value in ("dtype", "shape") and isinstance(
                node.value, cst.Name):
            found.add(id(node.value))
        stack.extend(u.children(node))
    return found


def _keyword_names(op: Statement) -> set[str]:
    """Names passed whole to a statement's call as inputs (a scale, a bias tile), not its outputs
    (`dst=`) or its mask."""
    value = op.value
    if not isinstance(value, cst.Call):
        return set()
    names: set[str] = set()
    for arg in value.args:
        if arg.keyword is not None and (arg.keyword.value == "mask" or arg.keyword.value in u.OUTPUT_KEYWORDS):
            continue
        if isinstance(arg.value, cst.Name):
            names.add(arg.value.value)
    return names


def _common_prefix(chains: Sequence[tuple[ForLoop, ...]]) -> tuple[ForLoop, ...]:
    out: list[ForLoop] = []
    for items in zip(*chains, strict=False):
        if all(item is items[0] for item in items):
            out.append(items[0])
        else:
            break
    return tuple(out)


_DOMAIN_LIMIT = 1 << 20


def _injective(key: Sequence[Affine], loops: Sequence[ForLoop], bounds: Sequence[int | None]) -> bool:
    """Whether distinct iterations of `loops` select distinct blocks (checked exhaustively over the
    iteration space when it is small enough, else by a sufficient condition)."""
    vars_ = [lp.var for lp in loops if lp.var]
    trips = [lp.trips for lp in loops if lp.var]
    sizes = [int(t) for t in trips if t is not None]
    if len(sizes) == len(trips) and math.prod(sizes) <= _DOMAIN_LIMIT:
        seen: set[tuple[int, ...]] = set()
        for point in itertools.product(*(range(s) for s in sizes)):
            env = dict(zip(vars_, point, strict=True))
            block = tuple(e.const + sum(c * env[v] for v, c in e.coeffs) for e in key)
            if any(b is not None and not 0 <= x < b for x, b in zip(block, bounds, strict=False)):
                return False
            if block in seen:
                return False
            seen.add(block)
        return True
    # sufficient: every loop variable has a key element of its own (that variable times a nonzero
    # coefficient plus a constant), so two iterations that differ in it select different blocks
    single = {e.coeffs[0][0] for e in key if len(e.coeffs) == 1}
    return set(vars_) <= single


_CACHE: dict[tuple[str, int], KernelModel] = {}  # a few sources: the rules of one search step share them


def model_of(source: str | cst.Module, profile: Any = None, function: str | None = None) -> KernelModel:
    """The model of a kernel (the `function` of that name, else the jit-decorated one) with this
    profile, built once and shared by every rule that asks. A source text is parsed once (the model's
    `module`); a parsed module is modelled as it is, since rules compare nodes by identity. Without a
    `function`, the kernel is the one in focus (`cst_util.focus`), part of the key."""
    function = function or u.focused()
    if isinstance(source, cst.Module):
        key = (f"module:{id(source)}:{function}", id(profile))
        found = _CACHE.get(key)
        if found is not None and found.module is source and found.profile is profile:
            return found
        model = KernelModel(source, profile, function)
    else:
        key = (hashlib.sha256(source.encode()).hexdigest() + f":{function}", id(profile))
        found = _CACHE.get(key)
        if found is not None and found.profile is profile:
            return found
        model = KernelModel(u.parse(source), profile, function)
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[key] = model
    return model


class ModelRule:
    """A rule that plans on the shared model of the kernel. Its class docstring is its summary (what the
    rewrite does and why it helps on Trainium), as one line for the search's lessons."""

    name: str
    summary: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.summary = " ".join((cls.__doc__ or "").split())

    def plan(self, source: str, profile: Any) -> list[Plan]:
        """Every place the rewrite applies, most promising first; a source without a kernel has none. In a
        file of several kernels (and none in focus) each kernel is planned on, and its plans name it."""
        try:
            model = model_of(source, profile)
            kernels = [] if u.focused() else [fn.name.value for fn in u.kernel_functions(model.module)]
            if len(kernels) <= 1:
                return self.plans(model)
            plans: list[Plan] = []
            for kernel in kernels:
                with u.focus(kernel):
                    plans += [replace(p, params={**p.params, "kernel": kernel})
                              for p in self.plans(model_of(source, profile))]
        except u.RuleError:
            return []
        return sorted(plans, key=lambda p: -p.priority)

    def plans(self, model: KernelModel) -> list[Plan]:
        """The plans on this model of the kernel (with its profile's costs)."""
        raise NotImplementedError

    def apply(self, source: str, plan: Plan) -> str:
        """The rewritten source; a plan naming a kernel of a several-kernel file rewrites that kernel alone."""
        kernel = plan.params.get("kernel")
        if kernel is None:
            return self.rewrite(source, plan)
        with u.focus(str(kernel)):
            return self.rewrite(source, replace(plan, params={k: v for k, v in plan.params.items() if k != "kernel"}))

    def rewrite(self, source: str, plan: Plan) -> str:
        """The source with `plan` done to the kernel in view; RuleError if the plan does not fit it."""
        raise NotImplementedError
