"""Moving a legacy (`neuronxcc.nki`) kernel to the `nki` package, one mechanical rewrite at a time.

A first slice of `accelopt migrate`: the imports, `nl.load` / `nl.store` as `nisa.dma_copy` into and out of
a tile allocated for it, the element-wise `nl.*` functions and `nl.copy` that return a tile as the `nisa`
instruction that writes a `dst`, and the static range iterators as Python's `range` (what NKI 0.7 made them). Each
rewrite needs only what the line says; a line that still uses the legacy API afterwards is listed for a
person, with the reason. `verify` runs both versions on the task's fresh seeds through the simulator's
profiler: the migrated kernel counts only when both are correct on the same seeds, and both latencies
are reported.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import libcst as cst
from libcst.metadata import PositionProvider

from .migration_offer import MigrationOffer
from .profiling import Profiler, ProfileResult, SimulatorProfiler, TaskRef, measured_on
from .tasks.check import fresh_seeds

LEGACY_ROOT = "neuronxcc.nki"
ACTIVATIONS = ("exp", "tanh", "sigmoid", "relu", "gelu", "silu", "log", "sqrt", "rsqrt", "sin", "cos", "abs",
               "square", "reciprocal", "erf")  # nl.f(x) -> nisa.activation(dst, op=nl.f, data=x)
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")  # nl.f(a, b)
RANGES = ("affine_range", "sequential_range", "static_range")
REDUCTIONS = {"max": "maximum", "min": "minimum", "sum": "add", "mean": "add"}  # nl.f -> tensor_reduce's op
# the legacy arithmetic operators on tiles (and their augmented forms), as the nl functions they called
OPERATORS: dict[type, str] = {cst.Add: "add", cst.Subtract: "subtract", cst.Multiply: "multiply", cst.Divide: "divide",
                              cst.AddAssign: "add", cst.SubtractAssign: "subtract", cst.MultiplyAssign: "multiply",
                              cst.DivideAssign: "divide"}
COMMUTATIVE = frozenset({"add", "multiply"})
# a legacy affine_select predicate's comparison, as the cmp_op NKI 0.8 applies to (left - right, 0)
COMPARISONS: dict[type, str] = {cst.GreaterThanEqual: "greater_equal", cst.GreaterThan: "greater",
                                cst.LessThanEqual: "less_equal", cst.LessThan: "less", cst.Equal: "equal",
                                cst.NotEqual: "not_equal"}
ALLOCATIONS = ("ndarray", "zeros", "ones", "full")  # what they assign is a tile the rewrites may read
# legacy nisa instructions that return their tile: positional parameters in the legacy order, and which input the
# result is shaped and typed after, with its shape when it is not that input's (nc_transpose and nc_matmul are shaped
# by their own rule): a row reduction leaves one value per partition, bn_stats six statistics, bn_aggr a mean and a
# variance
LEGACY_ISA_PARAMETERS = {"nc_transpose": ("data",), "nc_matmul": ("stationary", "moving"),
                         "activation": ("op", "data"), "tensor_tensor": ("data1", "data2", "op"),
                         "tensor_scalar": ("data", "op0", "operand0"), "tensor_copy": ("src",),
                         "tensor_tensor_scan": ("data0", "data1", "initial", "op0", "op1"),
                         "tensor_reduce": ("op", "data", "axis"), "reciprocal": ("data",),
                         "tensor_scalar_reduce": (), "bn_stats": ("data",), "bn_aggr": ("data",),
                         "memset": ("shape", "value", "dtype")}
LEGACY_ISA_SHAPED_BY: dict[str, tuple[str, str | None]] = {
    "activation": ("data", None), "tensor_tensor": ("data1", None), "tensor_scalar": ("data", None),
    "tensor_copy": ("src", None), "tensor_tensor_scan": ("data0", None), "reciprocal": ("data", None),
    "tensor_scalar_reduce": ("data", None), "tensor_reduce": ("data", "({}.shape[0], 1)"),
    "bn_stats": ("data", "({}.shape[0], 6)"), "bn_aggr": ("data", "({}.shape[0], 2)")}
# the axes an instruction reads across to compute one element (a mask along any other axis of a fresh dst may go)
ELEMENT_WISE, ACROSS_FREE, ACROSS_PARTITIONS = frozenset(), frozenset({"free"}), frozenset({"partition"})
EVERYWHERE = ACROSS_FREE | ACROSS_PARTITIONS
NL_MIXES = {**dict.fromkeys((*ACTIVATIONS, *BINARY, "copy", "negative"), ELEMENT_WISE),
            **dict.fromkeys(REDUCTIONS, ACROSS_FREE)}
ISA_MIXES = {**dict.fromkeys(("activation", "tensor_tensor", "tensor_scalar", "tensor_copy", "reciprocal"),
                             ELEMENT_WISE),
             **dict.fromkeys(("tensor_reduce", "tensor_scalar_reduce", "bn_stats", "bn_aggr", "tensor_tensor_scan"),
                             ACROSS_FREE),
             "nc_matmul": ACROSS_PARTITIONS}
FREE_AXIS = frozenset({"1", "-1", "(1,)", "[1]", "(-1,)", "[-1]"})  # a 2-D tile's free axis, as an axis= argument
# nl.* calls the nki package keeps as they are (allocation, sizes, loops); an element-wise nl.f(...) call computing a
# tile is legacy: in the nki package nl.f is only the operator name an instruction takes
MODERN_LANGUAGE = frozenset({"ndarray", "zeros", "ones", "full", "shared_hbm", "hbm", "sbuf", "psum", "private_hbm",
                             "par_dim", "tile_size", "shared_identity_matrix", "program_id", "num_programs",
                             "fori_loop", "while_loop", "no_reorder", "NkiTensor", "ds"})


@dataclass
class Migration:
    """The migrated source, and the lines still written against the legacy API (1-based, with why)."""

    source: str
    needs_person: list[tuple[int, str]] = field(default_factory=list)
    elsewhere: list[tuple[int, str]] = field(default_factory=list)  # lines of functions the kernel never calls

    @property
    def complete(self) -> bool:
        return not self.needs_person


def _dotted(node: cst.BaseExpression) -> str | None:
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        return ".".join([node.value, *reversed(parts)])
    return None


def _modern_module(name: str) -> str:
    return "nki" + name[len(LEGACY_ROOT):] if name.startswith(LEGACY_ROOT) else name


def _modern_alias(alias: cst.ImportAlias) -> cst.ImportAlias:
    """`neuronxcc.nki.language as nl` -> `nki.language as nl`; `neuronxcc.nki as nki` -> `nki`."""
    name = _dotted(alias.name) or ""
    if not name.startswith(LEGACY_ROOT):
        return alias
    modern = _modern_module(name)
    asname = alias.asname.name if alias.asname else None
    if isinstance(asname, cst.Name) and asname.value == modern:
        return alias.with_changes(name=cst.parse_expression(modern), asname=None)
    return alias.with_changes(name=cst.parse_expression(modern))


def _times(a: str, b: str) -> str:
    """The product of two index terms as code, `1` and `0` folded away."""
    if "0" in (a, b):
        return "0"
    if a == "1" or b == "1":
        return b if a == "1" else a
    wrap = [f"({t})" if any(c in t for c in "+- ") else t for t in (a, b)]
    return f"{wrap[0]} * {wrap[1]}"


def _root(node: cst.BaseExpression) -> str | None:
    """The name a (possibly sliced) tile expression starts from: `acc` for `acc[0:128, :]` and `acc.ap(...)`."""
    while isinstance(node, cst.Subscript) or (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                                              and node.func.attr.value == "ap"):
        node = node.value if isinstance(node, cst.Subscript) else node.func.value  # type: ignore[attr-defined]
    return node.value if isinstance(node, cst.Name) else None


def _tuple(items: Iterable[str]) -> str:
    """Python code for a tuple of these items."""
    listed = list(items)
    return f"({listed[0]},)" if len(listed) == 1 else f"({', '.join(listed)})"


def _axes(axis: str | None) -> tuple[int, ...] | None:
    """An axis= argument written as a number or a list or tuple of numbers, as a sorted tuple; None for anything
    else (a name, an expression)."""
    try:
        value = ast.literal_eval(axis) if axis is not None else None
    except (ValueError, SyntaxError):
        return None
    values = (value,) if isinstance(value, int) else tuple(value) if isinstance(value, (list, tuple)) else ()
    return tuple(sorted(values)) if values and all(isinstance(v, int) and v >= 0 for v in values) else None


def _base(dst: str) -> str:
    """The tile's name in a destination's code (`t` of `t[0:n, :]` and of `t.ap(...)`), to name temporaries after."""
    return re.split(r"\[|\.ap\(", dst, maxsplit=1)[0]


def _unannotated(statement: cst.BaseSmallStatement) -> cst.BaseSmallStatement:
    """`qk: nt.tensor[m, n] = nisa.nc_matmul(...)` as a plain assignment: the annotation typed the tile the legacy
    call returned, and the rewrite allocates that tile itself."""
    if isinstance(statement, cst.AnnAssign) and statement.value is not None:
        return cst.Assign(targets=[cst.AssignTarget(statement.target)], value=statement.value)
    return statement


class Grid(NamedTuple):
    """A legacy index grid: `nl.arange(size)` placed along `axis` of a `rank`-dimensional index space."""

    axis: int
    size: str
    rank: int


class Span(NamedTuple):
    """An index `start + grid`: which of the grid's axis, from where, how many, and the grid's name."""

    axis: int
    start: str
    size: str
    grid: str


class Limit(NamedTuple):
    """A mask `start + grid < bound`: on the grid's axis only the first `count` of the grid's values are valid."""

    axis: int
    count: str
    grid: str


class _Rewrite(cst.CSTTransformer):
    """The mechanical rewrites; `nl` and `nisa` are the names the kernel gave the two modules."""

    def __init__(self, nl: str, nisa: str, constants: frozenset[str] = frozenset(),
                 kept: frozenset[tuple[str, str]] = frozenset()):
        super().__init__()
        self.nl, self.nisa = nl, nisa
        self.kept = kept  # index definitions a line left for a person still reads: (top-level function, name)
        self.function = ""  # the top-level function being rewritten
        self.dropped: set[tuple[str, str]] = set()
        self.constants = constants  # names bound to a number: scalar operands
        self.tiles: set[str] = set()  # names known to hold an on-chip tile
        self.psum: set[str] = set()  # tiles in PSUM, which no DMA reads: a store copies them to SBUF first
        self.blocks: dict[str, int] = {}  # tiles whose block dimensions became nested Python lists: how many
        self.columns: set[str] = set()  # tiles a reduction along the free axis made: one value per partition
        self.scopes: list[tuple[set[str], set[str], dict[str, int], set[str]]] = []  # the enclosing functions'
        # Beta 2 moved masks into slices: index grids (`i_p = nl.arange(n)[:, None]`), affine indices on them
        # (`row = base + i_p`) and bounds on those (`valid = row < rows`) become the slices' starts and lengths
        self.grids: dict[str, Grid] = {}
        self.spans: dict[str, Span] = {}
        self.limits: dict[str, Limit] = {}  # by the mask's name
        self.views: dict[str, list[str]] = {}  # a grid access's code (slices or access pattern) -> its counts

    # --- scopes -------------------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:  # noqa: N802
        """What a function learns about its names stays in it: a tutorial file's kernels reuse names (mamba v3's
        block tensor scanC_accum is a plain tile in v2)."""
        if not self.scopes:
            self.function = node.name.value
        self.scopes.append((set(self.tiles), set(self.psum), dict(self.blocks), set(self.columns)))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:  # noqa: N802
        self.tiles, self.psum, self.blocks, self.columns = self.scopes.pop()
        if not self.scopes:
            self.function = ""
        return updated

    # --- imports ------------------------------------------------------------------------------------------
    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:  # noqa: N802
        return updated.with_changes(names=[_modern_alias(alias) for alias in updated.names])

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom  # noqa: N802
                         ) -> cst.ImportFrom | cst.Import:
        module = _dotted(updated.module) if updated.module is not None else None
        if module == "neuronxcc" and not isinstance(updated.names, cst.ImportStar):
            aliases = [a.with_changes(name=cst.Name("nki")) for a in updated.names if _dotted(a.name) == "nki"]
            if len(aliases) == len(updated.names):
                return cst.Import(names=[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in aliases])
        if module and module.startswith(LEGACY_ROOT):
            return updated.with_changes(module=cst.parse_expression(_modern_module(module)))
        return updated

    # --- statements -----------------------------------------------------------------------------------------
    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,  # noqa: N802
                                  updated: cst.SimpleStatementLine
                                  ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.SimpleStatementLine]:
        if len(updated.body) != 1:
            return updated
        lines = self._statement(_unannotated(updated.body[0]))
        if lines is None:
            return updated
        statements = [cst.parse_statement(line) for line in lines]
        if statements:  # the comments above the line stay above its rewrite
            statements[0] = statements[0].with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel(statements)  # type: ignore[arg-type]

    def _statement(self, statement: cst.BaseSmallStatement) -> list[str] | None:
        """The statement's rewrite as lines, or None to leave it as it is: its tiles read through index grids as
        slices or access patterns first, then the instruction in NKI 0.8's form."""
        through = self._through_grids(statement)
        lines = self._rewritten(through)
        if lines is not None or through is statement:
            return lines
        target = through.targets[0].target if isinstance(through, cst.Assign) else None
        if isinstance(target, cst.Call) or isinstance(getattr(through, "target", None), cst.Call):
            return None  # a write through an access pattern only an instruction's dst= can express
        if isinstance(target, cst.Name) and self._code(through.value) in self.views:  # type: ignore[attr-defined]
            counts = self.views[self._code(through.value)]  # type: ignore[attr-defined]
            self.tiles.add(target.value)
            if len(counts) == 2 and counts[1] == "1":
                self.columns.add(target.value)  # `mean = mean_var[i_p, 0]`: one value per partition
        return [self._code(through)]

    def _through_grids(self, statement: cst.BaseSmallStatement) -> cst.BaseSmallStatement:
        """The statement with each tile it indexes through grids (`t[i_p, j * 6 + i_f]`) read as the slices, or
        else the access pattern, of NKI 0.8; the statement's mask over a grid those accesses use becomes their
        bound (as Beta 2 moved masks into access patterns) and goes, unless an access left as it is still reads
        that grid."""
        call = getattr(statement, "value", None)
        masks = [a for a in call.args if a.keyword is not None and a.keyword.value == "mask"] if isinstance(
            call, cst.Call) else []
        limit = self._limit(masks[0].value) if masks else None
        accesses = _GridAccesses(self, {limit.grid: limit.count} if limit is not None else {})
        through = statement.visit(accesses)
        if limit is None or limit.grid not in accesses.read:
            return through  # type: ignore[return-value]
        if self._unbounded(through):  # the mask also bounds a tile read whole: a person, or the instruction's rule
            return statement.visit(_GridAccesses(self, {}))  # type: ignore[return-value]
        unmasked = through.with_changes(value=through.value.with_changes(  # type: ignore[attr-defined]
            args=[a for a in through.value.args if a.keyword is None or a.keyword.value != "mask"]))  # type: ignore[attr-defined]
        still_read = {name for name in _names_read(unmasked) if name == limit.grid or (
            name in self.spans and self.spans[name].grid == limit.grid)}
        return through if still_read else unmasked  # type: ignore[return-value]

    def _unbounded(self, statement: cst.BaseSmallStatement) -> bool:
        """Whether a statement whose grid accesses a mask bounds also writes or reads a tile no grid access bounds
        (`t[...] = nl.exp(a[i_p, i_f], mask=m)`): bounding the grid accesses alone would leave their shapes apart."""
        operands: list[cst.BaseExpression] = []

        class Collect(cst.CSTVisitor):
            def visit_Arg(self, node: cst.Arg) -> None:  # noqa: N802
                if node.keyword is None or node.keyword.value != "mask":
                    operands.append(node.value)

        statement.visit(Collect())
        targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [
            statement.target] if isinstance(statement, cst.AugAssign) else []
        written = [target for target in targets if not isinstance(target, cst.Name)]  # a name gets a fresh tile
        return any(self._is_tile(node) and self._code(node) not in self.views and _root(node) not in self.columns
                   for node in [*written, *operands])

    def _grid_access(self, node: cst.Subscript, limits: dict[str, str]) -> tuple[str, set[str]] | None:
        """`t[i_p, j * 6 + i_f]` over index grids as `t[0:p, j * 6:j * 6 + 6]` when each position reads one grid
        along its own axis (or a constant where no grid is), else as `t.ap(pattern=[[step, count], ...], offset=o)`
        with one [step, count] per grid axis, partitions first; `limits` bound some grids' counts (a mask). The
        view's counts are kept in `views`; with the grids it reads, or None when the indices are not affine in
        the grids."""
        name = node.value.value if isinstance(node.value, cst.Name) else None
        if name not in self.tiles or not all(isinstance(e.slice, cst.Index) for e in node.slice):
            return None
        positions = [self._affine(e.slice.value) for e in node.slice]  # type: ignore[union-attr]
        if any(p is None for p in positions) or not any(p[0] for p in positions):  # type: ignore[index]
            return None
        used = {grid for terms, _ in positions for grid in terms}  # type: ignore[misc]
        axes = {self.grids[grid].axis: grid for grid in used}
        ranks = {self.grids[grid].rank for grid in used}
        if len(axes) != len(used) or len(ranks) != 1:
            return None  # two grids along one axis, or grids of different ranks
        counts = [limits.get(axes[k], self.grids[axes[k]].size) if k in axes else "1" for k in range(ranks.pop())]
        sliced = self._grid_slices(positions, axes, counts)  # type: ignore[arg-type]
        if sliced is not None:
            code = f"{name}[{sliced}]"
        else:
            code = self._grid_pattern(name, positions, axes, counts)  # type: ignore[arg-type]
            if code is None:
                return None
        self.views[code] = counts
        return code, used

    def _grid_slices(self, positions: list[tuple[dict[str, str], str]], axes: dict[int, str],
                     counts: list[str]) -> str | None:
        """The slices of a grid access whose position j reads the grid along axis j (coefficient 1), or a constant
        where no grid lies along axis j; None for any other access."""
        if len(positions) != len(counts):
            return None
        parts = []
        for j, (terms, start) in enumerate(positions):
            if terms != ({axes[j]: "1"} if j in axes else {}):
                return None
            count = counts[j]
            parts.append(f"0:{count}" if start == "0" else f"{start}:{start} + {count}")
        return ", ".join(parts)

    def _grid_pattern(self, name: str, positions: list[tuple[dict[str, str], str]], axes: dict[int, str],
                      counts: list[str]) -> str | None:
        """The access pattern of a grid access over the tile's flat elements: a grid's step adds up its
        coefficient times each position's stride; the partitions are read by the first position's grid alone."""
        first, _ = positions[0]
        if 0 not in axes or first != {axes[0]: "1"} or any(axes[0] in terms for terms, _ in positions[1:]):
            return None
        strides = [" * ".join(f"{name}.shape[{m}]" for m in range(j + 1, len(positions))) or "1"
                   for j in range(len(positions))]
        read = list(zip(positions, strides, strict=True))
        steps = [" + ".join(_times(terms[axes[k]], stride) for (terms, _), stride in read
                            if k in axes and axes[k] in terms) or "1" for k in range(len(counts))]
        offsets = (_times(start, stride) for (_, start), stride in read)
        offset = " + ".join(term for term in offsets if term != "0") or "0"
        pattern = ", ".join(f"[{step}, {count}]" for step, count in zip(steps, counts, strict=True))
        return f"{name}.ap(pattern=[{pattern}], offset={offset})"

    def _rewritten(self, statement: cst.BaseSmallStatement) -> list[str] | None:
        """The statement's rewrite as lines, or None to leave it as it is."""
        if (isinstance(statement, cst.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0].target, cst.Name) and self._index_definition(
                    statement.targets[0].target.value, statement.value)):
            return self._dropped([statement.targets[0].target.value])
        if isinstance(statement, cst.Assign) and len(statement.targets) == 1 and self._mgrid(
                statement.targets[0].target, statement.value):
            return self._dropped([e.value.value for e in statement.targets[0].target.elements])  # type: ignore[attr-defined]
        value = self._as_call(statement.value) if isinstance(statement, (cst.Assign, cst.AugAssign)) else None
        if isinstance(statement, cst.Assign) and len(statement.targets) == 1 and isinstance(value, cst.Call):
            statement = statement.with_changes(value=value)
            target = statement.targets[0].target
            if isinstance(target, cst.Name) and self._function(statement.value) in ALLOCATIONS:
                keywords = {a.keyword.value: self._code(a.value) for a in statement.value.args if a.keyword}
                if keywords.get("buffer") not in {f"{self.nl}.{hbm}" for hbm in ("hbm", "shared_hbm", "private_hbm")}:
                    self.tiles.add(target.value)  # an HBM tensor is read by DMA only, through its slices
                if keywords.get("buffer") == f"{self.nl}.psum":
                    self.psum.add(target.value)
                return self._unblocked(target.value, statement.value)
            if isinstance(target, cst.Name) and self._function(statement.value) == "shared_constant":
                return self._identity(target.value, statement.value)
            if isinstance(target, cst.Name):
                lines = self._assigned(target.value, statement.value)
                if lines is not None:
                    self.tiles.add(target.value)
                return lines
            if isinstance(target, (cst.Subscript, cst.Call)) and self._is_tile(target):  # part of it, or a view
                return self._written_into(target, statement.value)
        if (isinstance(statement, cst.AugAssign) and isinstance(statement.operator, cst.AddAssign)
                and isinstance(statement.value, cst.Call) and self._is_tile(statement.target)
                and (self._isa(statement.value) == "nc_matmul" or self._function(statement.value) == "matmul")):
            return self._into(self._code(statement.target), statement.value, allocate=False, accumulate=True)
        function = OPERATORS.get(type(statement.operator)) if isinstance(statement, cst.AugAssign) else None
        if function and self._is_tile(statement.target):  # type: ignore[union-attr]
            combined = cst.Call(func=cst.parse_expression(f"{self.nl}.{function}"),
                                args=[cst.Arg(statement.target), cst.Arg(value)])  # type: ignore[union-attr, arg-type]
            return self._into(self._code(statement.target), combined, allocate=False)  # type: ignore[union-attr]
        if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
            return self._stored(statement.value)
        return None

    def _tile_valued(self, node: cst.BaseExpression) -> bool:
        """A tile, part of one, or an nl / nisa call computing one."""
        return self._is_tile(node) or (isinstance(node, cst.Call) and (
            self._function(node) is not None or self._isa(node) is not None))

    def _as_call(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """The legacy tile operators and methods as the nl calls they stood for: `a * g + b` over tiles as
        `nl.add(nl.multiply(a, g), b)` (a number left of + or * moves right), `t.broadcast_to(s)` as
        `nl.broadcast_to(t, shape=s)`; anything else as it is."""
        method = node.func.attr.value if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) else None
        if method == "broadcast_to" and self._is_tile(node.func.value) and len(node.args) == 1:  # type: ignore[union-attr]
            return cst.Call(func=cst.parse_expression(f"{self.nl}.broadcast_to"),
                            args=[cst.Arg(node.func.value), node.args[0].with_changes(keyword=cst.Name("shape"),
                                                                                      equal=cst.AssignEqual())])
        if isinstance(node, cst.Call) and self._tile_valued(node):  # nl.rsqrt(var + epsilon)
            return node.with_changes(args=[a.with_changes(value=self._as_call(a.value)) for a in node.args])
        function = OPERATORS.get(type(node.operator)) if isinstance(node, cst.BinaryOperation) else None
        if function is None:
            return node
        left, right = self._as_call(node.left), self._as_call(node.right)  # type: ignore[attr-defined]
        if not self._tile_valued(left):
            if function not in COMMUTATIVE or not self._tile_valued(right):
                return node
            left, right = right, left
        return cst.Call(func=cst.parse_expression(f"{self.nl}.{function}"), args=[cst.Arg(left), cst.Arg(right)])

    def _unblocked(self, name: str, allocation: cst.Call) -> list[str] | None:
        """`t = nl.ndarray((n, m, nl.par_dim(p), f), ...)` as nested Python lists (n of m) of tiles `(p, f)`, as the
        guide to removing block dimensions does; `t[i, j, ...]` then reads `t[i][j][...]`."""
        shape = allocation.args[0].value if allocation.args and allocation.args[0].keyword is None else None
        if not isinstance(shape, cst.Tuple):
            return None
        elements = [element.value for element in shape.elements]
        position = next((i for i, e in enumerate(elements) if isinstance(e, cst.Call)
                         and self._function(e) == "par_dim"), 0)
        if position == 0:
            return None
        partition = elements[position]
        tile_shape = ", ".join(self._code(e) for e in [partition.args[0].value, *elements[position + 1:]])  # type: ignore[attr-defined]
        rest = "".join(f", {self._code(a.with_changes(comma=cst.MaybeSentinel.DEFAULT))}" for a in allocation.args[1:])
        self.blocks[name] = position
        nested = f"{self._code(allocation.func)}(({tile_shape}){rest})"
        for count in reversed(elements[:position]):
            nested = f"[{nested} for _ in range({self._code(count)})]"
        return [f"{name} = {nested}"]

    def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.Subscript:  # noqa: N802
        depth = self.blocks.get(updated.value.value, 0) if isinstance(updated.value, cst.Name) else 0
        if depth == 0 or len(updated.slice) < 2:
            return updated
        lists, within = updated.slice[:depth], updated.slice[depth:]
        read = updated.value
        for index in lists:
            read = cst.Subscript(value=read, slice=[index.with_changes(comma=cst.MaybeSentinel.DEFAULT)])
        return cst.Subscript(value=read, slice=within) if within else read  # type: ignore[return-value]

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:  # noqa: N802
        """`t.dtype` of a block tensor that became nested lists reads one of its tiles' (they share it)."""
        depth = self.blocks.get(updated.value.value, 0) if isinstance(updated.value, cst.Name) else 0
        if depth == 0 or updated.attr.value != "dtype":
            return updated
        return cst.parse_expression(f"{updated.value.value}{'[0]' * depth}.dtype")  # type: ignore[attr-defined]

    def _dropped(self, names: list[str]) -> list[str] | None:
        """An index definition goes (its uses became slices), unless a use was left in place that still reads it."""
        scoped = {(self.function, name) for name in names}
        self.dropped.update(scoped)
        return None if self.kept & scoped else []

    def _index_definition(self, name: str, value: cst.BaseExpression) -> bool:
        """Record `name` when it is an index grid, an affine index on one, or a bound on such an index."""
        if (isinstance(value, cst.Subscript) and isinstance(value.value, cst.Call)
                and self._function(value.value) == "arange" and len(value.value.args) == 1):
            placed = [i for i, element in enumerate(value.slice) if isinstance(element.slice, cst.Slice)]
            if len(placed) != 1 or not all(isinstance(element.slice, cst.Index) and _dotted(element.slice.value) ==
                                           "None" for i, element in enumerate(value.slice) if i != placed[0]):
                return False  # `nl.arange(n)[:, None, None]` places its values along one axis of three
            self.grids[name] = Grid(placed[0], self._code(value.value.args[0].value), len(value.slice))
            return True
        span = self._span(value)
        if span is not None:
            self.spans[name] = span
            return True
        limit = self._limit(value)
        if limit is not None:
            self.limits[name] = limit
            return True
        return False

    def _mgrid(self, target: cst.BaseAssignTargetExpression, value: cst.BaseExpression) -> bool:
        """`i_p, i_f = nl.mgrid[0:p, 0:f]`: one index grid per axis (two or more), the first over the partitions."""
        if not (isinstance(target, cst.Tuple) and isinstance(value, cst.Subscript)
                and _dotted(value.value) == f"{self.nl}.mgrid" and len(target.elements) == len(value.slice) >= 2):
            return False
        bounds = [element.slice for element in value.slice]
        names = [element.value for element in target.elements]
        if not all(isinstance(b, cst.Slice) and b.upper is not None and b.step is None
                   and (b.lower is None or self._code(b.lower) == "0") for b in bounds):
            return False
        if not all(isinstance(name, cst.Name) for name in names):
            return False
        for axis, (name, bound) in enumerate(zip(names, bounds, strict=True)):
            self.grids[name.value] = Grid(axis, self._code(bound.upper), len(names))  # type: ignore[attr-defined, union-attr]
        return True

    def _span(self, node: cst.BaseExpression) -> Span | None:
        """An index over a grid: the grid, `start + grid`, or a name bound to one."""
        if isinstance(node, cst.Name):
            if node.value in self.spans:
                return self.spans[node.value]
            if node.value in self.grids:
                grid = self.grids[node.value]
                return Span(grid.axis, "0", grid.size, node.value)
            return None
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for grid, start in ((node.right, node.left), (node.left, node.right)):
                if isinstance(grid, cst.Name) and grid.value in self.grids and self._span(start) is None:
                    axis, size, _ = self.grids[grid.value]
                    return Span(axis, f"({self._code(start.with_changes(lpar=[], rpar=[]))})", size, grid.value)
        return None

    def _limit(self, node: cst.BaseExpression) -> Limit | None:
        """A mask `index < bound` over a span: min(size, bound - start) of its grid's values are valid."""
        if isinstance(node, cst.Name):
            return self.limits.get(node.value)
        if not (isinstance(node, cst.Comparison) and len(node.comparisons) == 1
                and isinstance(node.comparisons[0].operator, cst.LessThan)):
            return None
        span = self._span(node.left)
        if span is None:
            return None
        bound = self._code(node.comparisons[0].comparator)
        return Limit(span.axis, f"min({span.size}, {bound if span.start == '0' else f'{bound} - {span.start}'})",
                     span.grid)

    def _sliced(self, access: cst.BaseExpression, mask: cst.BaseExpression | None) -> tuple[str, str, str] | None:
        """`x[row, col]` over grids (and its mask) as (`x[r0:r0 + n0, c0:c0 + n1]`, the same part of a tile,
        the tile's shape)."""
        if not (isinstance(access, cst.Subscript) and len(access.slice) == 2):
            return None
        spans = [self._span(element.slice.value) if isinstance(element.slice, cst.Index) else None
                 for element in access.slice]
        limit = self._limit(mask) if mask is not None else None
        if any(span is None for span in spans) or [span[0] for span in spans] != [0, 1] or (  # type: ignore[index]
                mask is not None and limit is None):
            return None
        counts = [limit[1] if limit is not None and limit[0] == axis else span[2]  # type: ignore[index]
                  for axis, span in enumerate(spans)]
        parts = [f"{span[1]}:{span[1]} + {count}" for span, count in zip(spans, counts, strict=True)]  # type: ignore[index]
        tile = ", ".join(f"0:{count}" for count in counts)
        shape = ", ".join(span[2] for span in spans)  # type: ignore[index]
        return f"{self._code(access.value)}[{', '.join(parts)}]", tile, f"({shape})"

    def _droppable(self, mask: cst.BaseExpression | None, fresh: bool, mixes: frozenset[str]) -> bool:
        """Whether an instruction's mask may simply go: its dst is a tile of its own (the lanes the mask switches off
        stay undefined in the legacy kernel, so no correct kernel reads them) and the instruction computes each
        element from the same lane of its inputs along the mask's axis (`mixes` names the axes it reads across: a
        row reduction the free one, a matmul the partitions). Any other mask is a bound on a grid access
        (`_through_grids`) or stays for a person: dropped, it changes what a reduction adds up."""
        if mask is None or _dotted(mask) == "None":
            return True  # `mask=None` is no mask
        limit = self._limit(mask)
        return fresh and limit is not None and ("partition" if limit.axis == 0 else "free") not in mixes

    def _bounded(self, dst: str, operands: list[cst.BaseExpression], mask: cst.BaseExpression
                 ) -> tuple[str, list[cst.BaseExpression]] | None:
        """An element-wise instruction's mask over whole tiles (`t[...] = nl.multiply(t, g, mask=rows)`) as the part
        of each it bounds, `t[0:n]` along the partitions or `t[:, 0:n]` along the free axis (a column operand stays
        whole there): the lanes it switched off keep their values; None when a tile is read in part already."""
        limit = self._limit(mask)

        def whole(code: str) -> str | None:
            name = code.removesuffix("[...]")
            return name if name in self.tiles and name not in self.blocks else None

        base = whole(dst)
        if limit is None or limit.axis > 1 or base is None:
            return None
        part = f"0:{limit.count}" if limit.axis == 0 else f":, 0:{limit.count}"
        bounded: list[cst.BaseExpression] = []
        for operand in operands:
            name = whole(self._code(operand)) if self._is_tile(operand) else None
            if self._is_tile(operand) and name is None:
                return None
            keep = name is None or (limit.axis == 1 and name in self.columns)
            bounded.append(operand if keep else cst.parse_expression(f"{name}[{part}]"))
        return f"{base}[{part}]", bounded

    def _part(self, tile: str, part: str) -> str:
        """`tile[part]`, the part of a tile a masked DMA moves; a tile read through grids is that part already (the
        same mask bounded it)."""
        return tile if tile in self.views else f"{tile}[{part}]"

    def _code(self, node: cst.CSTNode) -> str:
        return cst.Module(body=[]).code_for_node(node)

    def _function(self, call: cst.Call) -> str | None:
        """"load" for `nl.load(...)`, None for anything else."""
        dotted = _dotted(call.func)
        prefix = f"{self.nl}."
        return dotted[len(prefix):] if dotted and dotted.startswith(prefix) else None

    def _isa(self, call: cst.Call) -> str | None:
        """"nc_matmul" for `nisa.nc_matmul(...)`, None for anything else."""
        dotted = _dotted(call.func)
        prefix = f"{self.nisa}."
        return dotted[len(prefix):] if dotted and dotted.startswith(prefix) else None

    def _assigned(self, name: str, call: cst.Call) -> list[str] | None:
        """`name = nl.load(src)` / `nl.exp(x)` / `nisa.nc_transpose(x)` as an allocation and the instruction."""
        return self._into(name, call, allocate=True)

    def _flattened(self, name: str, call: cst.Call) -> tuple[list[str], cst.Call] | None:
        """An `nl.*` / `nisa.*` call nested as an argument first becomes a tile of its own (`name_1`, ...,
        innermost first); the call then reads those names."""
        before: list[str] = []
        args = list(call.args)
        for position, arg in enumerate(args):
            nested = arg.value
            if isinstance(nested, cst.Call) and (self._function(nested) is not None or self._isa(nested) is not None):
                inner = f"{name}_{position + 1}"
                lines = self._assigned(inner, nested)
                if lines is None:
                    return None
                before += lines
                self.tiles.add(inner)
                args[position] = arg.with_changes(value=cst.Name(inner))
        return before, call.with_changes(args=args)

    def _into(self, dst: str, call: cst.Call, allocate: bool, accumulate: bool = False) -> list[str] | None:
        """The call as the instruction writing `dst`, after its nested calls, with `dst` allocated first when
        `allocate` (else `dst` is a tile, or part of one, the kernel already has)."""
        flat = self._flattened(_base(dst), call)
        if flat is None:
            return None
        before, call = flat
        made = self._instruction(dst, call, accumulate, fresh=allocate and not accumulate)
        if made is None:
            return None
        allocation, instructions = made
        statements = [instructions] if isinstance(instructions, str) else instructions
        if allocate and f"buffer={self.nl}.psum" in allocation:
            self.psum.add(dst)
        return before + ([f"{dst} = {allocation}"] if allocate else []) + statements

    def _written_into(self, target: cst.BaseExpression, call: cst.Call) -> list[str] | None:
        """`tile[...] = nl.copy(src)` / `nl.add(a, b)`: the instruction writes that part of the tile; a tensor-engine
        result (`nl.copy(nisa.nc_transpose(x))`) goes through a PSUM tile of its own first."""
        dst = self._code(target)
        args = [a for a in call.args if a.keyword is None]
        if self._function(call) == "copy" and len(args) == 1 and isinstance(args[0].value, cst.Call) and (
                self._function(args[0].value) is not None or self._isa(args[0].value) is not None):
            temporary = f"{_base(dst)}_1"
            lines = self._assigned(temporary, args[0].value)
            if lines is None:
                return None
            self.tiles.add(temporary)
            return [*lines, f"{self.nisa}.tensor_copy(dst={dst}, src={temporary})"]
        return self._into(dst, call, allocate=False)

    def _allocation(self, like: str, dtype: str | None = None, shape: str | None = None, buffer: str = "sbuf") -> str:
        nl = self.nl
        return f"{nl}.ndarray({shape or f'{like}.shape'}, dtype={dtype or f'{like}.dtype'}, buffer={nl}.{buffer})"

    def _instruction(self, dst: str, call: cst.Call, accumulate: bool = False, fresh: bool = False
                     ) -> tuple[str, str | list[str]] | None:
        """One call whose tile arguments are tiles, as (what to allocate `dst` as, the instruction writing it, or the
        statements that do)."""
        if self._isa(call) is not None:
            return self._isa_instruction(dst, call, accumulate, fresh)
        function = self._function(call)
        args = [a for a in call.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        nl, nisa = self.nl, self.nisa
        mixes = NL_MIXES.get(function or "", EVERYWHERE)
        if "mask" in keywords and function != "load" and self._droppable(keywords["mask"], fresh, mixes):
            del keywords["mask"]
        bounded = self._bounded(dst, [a.value for a in args], keywords["mask"]) if (
            "mask" in keywords and mixes is ELEMENT_WISE) else None
        if bounded is not None:
            dst, values = bounded
            args = [a.with_changes(value=value) for a, value in zip(args, values, strict=True)]
            del keywords["mask"]
        if function == "copy" and len(args) == 1 and set(keywords) <= {"dtype"} and self._is_tile(args[0].value):
            src = self._code(args[0].value)
            dtype = self._code(keywords["dtype"]) if "dtype" in keywords else None
            return self._allocation(src, dtype), f"{nisa}.tensor_copy(dst={dst}, src={src})"
        reduction = {k: self._code(v) for k, v in keywords.items()}
        axis, keepdims = reduction.pop("axis", None), reduction.pop("keepdims", "False")
        if function in REDUCTIONS and len(args) == 1 and self._is_tile(args[0].value) and not reduction and (
                keepdims in ("True", "False")):
            data = self._code(args[0].value)
            if axis in FREE_AXIS:
                self.columns.add(dst)
                return self._reduced(dst, data, function)
            axes = _axes(axis)
            if data in self.views and axes and 0 not in axes and max(axes) < len(self.views[data]):
                return self._reduced_view(dst, data, function, axes, keepdims == "True")
        if function == "load" and len(args) == 1 and set(keywords) <= {"mask"}:
            sliced = self._sliced(args[0].value, keywords.get("mask"))
            if sliced is not None:
                src, part, shape = sliced
                return (self._allocation(self._code(args[0].value.value), shape=shape),  # type: ignore[attr-defined]
                        f"{nisa}.dma_copy(dst={self._part(dst, part)}, src={src})")
        if function == "load" and len(args) == 1 and not keywords:
            src = self._code(args[0].value)
            return self._allocation(src), f"{nisa}.dma_copy(dst={dst}, src={src})"
        if function == "matmul":
            return self._matmul(dst, call, accumulate)
        if function == "transpose" and len(args) == 1 and not keywords and self._is_tile(args[0].value):
            data = self._code(args[0].value)
            return self._allocation(data, shape=f"({data}.shape[1], {data}.shape[0])"), self._transposed(dst, data)
        if function == "broadcast_to" and len(args) == 1 and set(keywords) == {"shape"} and self._is_tile(
                args[0].value):
            return self._broadcast(dst, self._code(args[0].value), keywords["shape"])
        dtype = self._code(keywords.pop("dtype")) if "dtype" in keywords else None
        if function is None or keywords or not args or not self._is_tile(args[0].value):
            return None
        data = self._code(args[0].value)
        if isinstance(args[0].value, cst.Name) and args[0].value.value in self.columns:
            self.columns.add(dst)  # element-wise on a column keeps one value per partition
        allocation = self._allocation(data, dtype)
        if function == "negative" and len(args) == 1:
            return allocation, f"{nisa}.tensor_scalar(dst={dst}, data={data}, op0={nl}.multiply, operand0=-1.0)"
        if function in ACTIVATIONS and len(args) == 1:
            return allocation, f"{nisa}.activation(dst={dst}, op={nl}.{function}, data={data})"
        if function in BINARY and len(args) == 2:
            other = args[1].value
            if (isinstance(other, cst.Name) and other.value in self.columns) or self._is_scalar(other):
                # a per-partition column or a number is the scalar operand, as the engines take it
                operand = self._code(other)
                return allocation, f"{nisa}.tensor_scalar(dst={dst}, data={data}, op0={nl}.{function}, " \
                                   f"operand0={operand})"
            if self._is_tile(other):
                return (allocation,
                        f"{nisa}.tensor_tensor(dst={dst}, data1={data}, data2={self._code(other)}, op={nl}.{function})")
        return None

    def _affine(self, node: cst.BaseExpression) -> tuple[dict[str, str], str] | None:
        """An index expression over the grids as ({grid: coefficient}, constant): `i_p * 512 + i_f + k` is
        ({"i_p": "512", "i_f": "1"}, "k"); anything naming no grid and no tile (a loop index, a size) is a constant;
        None when the expression is not affine in the grids."""
        if isinstance(node, cst.Name) and node.value in self.grids:
            return {node.value: "1"}, "0"
        if isinstance(node, cst.Name) and node.value in self.spans:  # `row = base + i_p`
            return {self.spans[node.value].grid: "1"}, self.spans[node.value].start
        named = _names_read(node)
        if not named & (set(self.grids) | set(self.spans) | self.tiles):
            return {}, self._code(node.with_changes(lpar=[], rpar=[])) if isinstance(node, cst.BinaryOperation) \
                else self._code(node)
        if not isinstance(node, cst.BinaryOperation):
            return None
        if isinstance(node.operator, cst.Multiply):
            for inner, factor in ((node.left, node.right), (node.right, node.left)):
                term, scale = self._affine(inner), self._affine(factor)
                if term is not None and scale is not None and not scale[0]:
                    return ({grid: _times(coefficient, scale[1]) for grid, coefficient in term[0].items()},
                            _times(term[1], scale[1]))
            return None
        if not isinstance(node.operator, (cst.Add, cst.Subtract)):
            return None
        left, right = self._affine(node.left), self._affine(node.right)
        if left is None or right is None or set(left[0]) & set(right[0]):
            return None
        sign = "-" if isinstance(node.operator, cst.Subtract) else ""
        terms = left[0] | {grid: f"{sign}({c})" if sign else c for grid, c in right[0].items()}
        if right[1] == "0":
            return terms, left[1]
        if left[1] == "0":
            return terms, f"-({right[1]})" if sign else right[1]
        return terms, f"({left[1]}) {sign or '+'} ({right[1]})"

    def _by_axis(self, terms: dict[str, str]) -> dict[int, tuple[str, str]] | None:
        """Affine terms as {axis: (coefficient, grid size)}; None when two grids share an axis."""
        axes = {self.grids[grid].axis: (coefficient, self.grids[grid].size) for grid, coefficient in terms.items()}
        return axes if len(axes) == len(terms) else None

    def _patterned(self, dst: str, instruction: str, call: cst.Call) -> tuple[str, str] | None:
        """Legacy `iota(expr, dtype)` / `affine_select(pred, on_true_tile, on_false_value)` over index grids in NKI
        0.8's form: the expression's free-axis step and count as `pattern=[[step, num]]`, its partition coefficient
        as `channel_multiplier`, its constant as `offset`; affine_select compares `left - right` with 0."""
        positional = [a.value for a in call.args if a.keyword is None]
        given = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        names = ("expr", "dtype") if instruction == "iota" else ("pred", "on_true_tile", "on_false_value")
        given |= dict(zip(names, positional, strict=False))
        if set(given) != set(names):
            return None
        compare = "equal"
        expression = given[names[0]]
        if instruction == "affine_select":
            if not (isinstance(expression, cst.Comparison) and len(expression.comparisons) == 1):
                return None
            compare = COMPARISONS.get(type(expression.comparisons[0].operator), "")
            expression = cst.BinaryOperation(left=expression.left, operator=cst.Subtract(),
                                             right=expression.comparisons[0].comparator)
        affine = self._affine(expression)
        terms = self._by_axis(affine[0]) if affine is not None else None
        if terms is None or not compare or not set(terms) <= {0, 1}:
            return None
        offset = affine[1]  # type: ignore[index]
        step, count = terms.get(1, ("0", "1"))
        arguments = (f"pattern=[[{step}, {count}]], offset={offset}, "
                     f"channel_multiplier={terms.get(0, ('0', '1'))[0]}")
        if instruction == "iota":
            rows = terms.get(0, ("0", "1"))[1]
            return (f"{self.nl}.ndarray(({rows}, {count}), dtype={self._code(given['dtype'])}, buffer={self.nl}.sbuf)",
                    f"{self.nisa}.iota(dst={dst}, {arguments})")
        on_true, on_false = self._code(given["on_true_tile"]), self._code(given["on_false_value"])
        return (self._allocation(on_true),
                f"{self.nisa}.affine_select(dst={dst}, {arguments}, on_true_tile={on_true}, "
                f"on_false_value={on_false}, cmp_op={self.nl}.{compare})")

    def _identity(self, name: str, call: cst.Call) -> list[str] | None:
        """`nl.shared_constant(np.identity(n), dtype=d)` as `nl.shared_identity_matrix(n=n, dtype=d)`, which the docs
        prefer for an identity (and NKI 0.8 keeps); any other constant is left for a person."""
        constant = call.args[0].value if call.args and call.args[0].keyword is None else None
        dtypes = [self._code(a.value) for a in call.args[1:] if a.keyword is not None and a.keyword.value == "dtype"]
        if not (isinstance(constant, cst.Call) and (_dotted(constant.func) or "").split(".")[-1] in ("identity", "eye")
                and len(constant.args) >= 1 and constant.args[0].keyword is None and len(call.args) == 1 + len(dtypes)):
            return None
        dtype = f", dtype={dtypes[0]}" if dtypes else ""
        return [f"{name} = {self.nl}.shared_identity_matrix(n={self._code(constant.args[0].value)}{dtype})"]

    def _transposed(self, dst: str, data: str) -> list[str]:
        """`data` transposed into the SBUF tile `dst` as the legacy API lowers nl.transpose: the Tensor engine's
        transpose into PSUM, copied out."""
        staged = f"{_base(dst)}_psum"
        shape = f"({data}.shape[1], {data}.shape[0])"
        return [f"{staged} = {self._allocation(data, shape=shape, buffer='psum')}",
                f"{self.nisa}.nc_transpose(dst={staged}, data={data})",
                f"{self.nisa}.tensor_copy(dst={dst}, src={staged})"]

    def _matmul(self, dst: str, call: cst.Call, accumulate: bool) -> tuple[str, list[str]] | None:
        """`nl.matmul(x, y, transpose_x=...)` as nc_matmul into a float32 PSUM tile: x given transposed is the
        stationary operand as it is; otherwise it is transposed first, as the legacy API did."""
        given = {("x", "y")[i]: a.value for i, a in enumerate(call.args) if a.keyword is None and i < 2}
        given |= {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        transpose_x = self._code(given.pop("transpose_x", cst.Name("False")))
        if set(given) != {"x", "y"} or transpose_x not in ("True", "False") or not all(
                self._is_tile(v) for v in given.values()):
            return None
        x, moving = self._code(given["x"]), self._code(given["y"])
        before: list[str] = []
        stationary = x
        if transpose_x == "False":
            stationary = f"{_base(dst)}_x"
            before = [f"{stationary} = {self._allocation(x, shape=f'({x}.shape[1], {x}.shape[0])')}",
                      *self._transposed(stationary, x)]
        rows = f"{x}.shape[{1 if transpose_x == 'True' else 0}]"
        return (self._allocation(x, dtype=f"{self.nl}.float32", buffer="psum", shape=f"({rows}, {moving}.shape[1])"),
                [*before, f"{self.nisa}.nc_matmul(dst={dst}, stationary={stationary}, moving={moving}"
                          f"{', accumulate=True' if accumulate else ''})"])

    def _is_scalar(self, node: cst.BaseExpression) -> bool:
        """A number written in the kernel, a size, or a name bound to one."""
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            return self._is_scalar(node.expression)
        if isinstance(node, cst.BinaryOperation):
            return self._is_scalar(node.left) and self._is_scalar(node.right)
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute):
            return node.value.attr.value == "shape"  # x.shape[1]
        constant = isinstance(node, cst.Name) and node.value in self.constants
        return constant or isinstance(node, (cst.Integer, cst.Float))

    def _broadcast(self, dst: str, src: str, shape: cst.BaseExpression) -> tuple[str, list[str]] | None:
        """`nl.broadcast_to(row, shape=(p, f))` of a one-partition row as the legacy API lowers it: a matmul of a
        ones column with the row into PSUM, copied out, as many columns at a time as a matmul moves."""
        if not (isinstance(shape, cst.Tuple) and len(shape.elements) == 2):
            return None
        nl, nisa = self.nl, self.nisa
        rows, columns = (self._code(element.value) for element in shape.elements)
        base = _base(dst)
        ones, product, start, end = (f"{base}_{part}" for part in ("ones", "broadcast", "start", "end"))
        step = f"{nl}.tile_size.gemm_moving_fmax"
        chunk = textwrap.dedent(f"""\
            for {start} in range(0, {columns}, {step}):
                {end} = min({start} + {step}, {columns})
                {product} = {self._allocation(src, f'{nl}.float32', f'({rows}, {end} - {start})', 'psum')}
                {nisa}.nc_matmul(dst={product}, stationary={ones}, moving={src}[:, {start}:{end}])
                {nisa}.tensor_copy(dst={dst}[:, {start}:{end}], src={product})
            """)
        return (self._allocation(src, shape=f"({rows}, {columns})"),
                [f"{ones} = {self._allocation(src, shape=f'(1, {rows})')}", f"{nisa}.memset(dst={ones}, value=1.0)",
                 chunk])

    def _reduced(self, dst: str, data: str, function: str) -> tuple[str, list[str]]:
        """`nl.max / sum / mean(data, axis=1, keepdims=True)` as tensor_reduce along the free axis into a column;
        a mean is the sum scaled by one over the row's length."""
        nl, nisa = self.nl, self.nisa
        reduce = f"{nisa}.tensor_reduce(dst={dst}, op={nl}.{REDUCTIONS[function]}, data={data}, axis=1, keepdims=True)"
        scale = f"{nisa}.tensor_scalar(dst={dst}, data={dst}, op0={nl}.multiply, operand0=1.0 / {data}.shape[1])"
        return (self._allocation(data, shape=f"({data}.shape[0], 1)"),
                [reduce, *([scale] if function == "mean" else [])])

    def _reduced_view(self, dst: str, data: str, function: str, axes: tuple[int, ...], keepdims: bool
                      ) -> tuple[str, list[str]]:
        """`nl.sum(t[i0, 2 * i1 + i2, ...], axis=[2, 4])` over a grid access (whose counts are known) as tensor_reduce
        of that view along those free axes, into a tile shaped as the legacy result; a mean is scaled by one over
        the number of elements reduced."""
        counts = self.views[data]
        shape = [("1" if i in axes else count) for i, count in enumerate(counts) if keepdims or i not in axes]
        reduce = (f"{self.nisa}.tensor_reduce(dst={dst}, op={self.nl}.{REDUCTIONS[function]}, data={data}, "
                  f"axis={_tuple(map(str, axes))}, keepdims={keepdims})")
        size = " * ".join(f"({counts[axis]})" for axis in axes)
        scale = f"{self.nisa}.tensor_scalar(dst={dst}, data={dst}, op0={self.nl}.multiply, operand0=1.0 / ({size}))"
        return (f"{self.nl}.ndarray({_tuple(shape)}, dtype={_base(data)}.dtype, buffer={self.nl}.sbuf)",
                [reduce, *([scale] if function == "mean" else [])])

    def _matmul_columns(self, dst: str, given: dict[str, cst.BaseExpression]) -> str:
        """A matmul's mask along the moving free axis, into a dst and from a moving tile read whole, as the columns it
        bounds: `acc[:, 0:n]` and `moving[:, 0:n]` (the accumulator's other columns keep what they held, as the
        masked legacy matmul left them); the dst unchanged, and the mask kept, for any other mask."""
        limit = self._limit(given["mask"])
        moving = given.get("moving")
        whole = isinstance(moving, cst.Name) and self._is_tile(moving) and "[" not in dst
        if limit is None or limit.axis != 1 or not whole:
            return dst
        del given["mask"]
        given["moving"] = cst.parse_expression(f"{moving.value}[:, 0:{limit.count}]")
        return f"{dst}[:, 0:{limit.count}]"

    def _isa_instruction(self, dst: str, call: cst.Call, accumulate: bool, fresh: bool
                         ) -> tuple[str, str] | None:
        """A legacy `nisa.*` call that returns its tile, as the same instruction writing `dst`: positional
        arguments named as the legacy signature names them; the result lives where the legacy one did (a
        transpose or matmul in PSUM, as float32 for a matmul; anything else in SBUF, shaped as LEGACY_ISA_SHAPED_BY
        says); a dtype= becomes the dst's, as Beta 2 moved it."""
        instruction = self._isa(call)
        if instruction in ("iota", "affine_select"):
            return self._patterned(dst, instruction, call)
        parameters = LEGACY_ISA_PARAMETERS.get(instruction or "")
        positional = [a for a in call.args if a.keyword is None]
        if parameters is None or len(positional) > len(parameters):
            return None
        given = {name: arg.value for name, arg in zip(parameters, positional, strict=False)}
        given |= {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        mixes = ISA_MIXES.get(instruction or "", EVERYWHERE)
        if instruction == "activation" and any(name.startswith("reduce") for name in given):
            mixes = ACROSS_FREE  # an activation that also reduces its rows
        if "mask" in given and self._droppable(given["mask"], fresh, mixes):
            del given["mask"]
        bounded = self._bounded(dst, list(given.values()), given["mask"]) if (
            "mask" in given and mixes is ELEMENT_WISE) else None
        if bounded is not None:
            dst, values = bounded
            given = {name: value for name, value in zip(given, values, strict=True) if name != "mask"}
        if "mask" in given and instruction == "nc_matmul":
            dst = self._matmul_columns(dst, given)
        if "mask" in given or (accumulate and instruction != "nc_matmul"):
            return None  # a mask moves into the operands' slices: a person decides how
        if instruction == "tensor_reduce" and self._code(given.get("axis", cst.Name("None"))) not in FREE_AXIS:
            return None  # one value per partition is the only result shape read off the line
        dtype = self._code(given.pop("dtype")) if "dtype" in given else None  # Beta 2: the dst's dtype
        filled = self._code(given.pop("shape")) if instruction == "memset" and "shape" in given else None
        text = {name: self._code(value) for name, value in given.items()}
        arguments = ", ".join(f"{name}={value}" for name, value in text.items())
        line = f"{self.nisa}.{instruction}(dst={dst}, {arguments}{', accumulate=True' if accumulate else ''})"
        if instruction == "memset":  # NKI 0.8: memset(dst, value), the tile's shape and type are the dst's
            if filled is None or dtype is None:
                return None
            return f"{self.nl}.ndarray({filled}, dtype={dtype}, buffer={self.nl}.sbuf)", line
        if instruction == "nc_transpose":
            data = text["data"]
            return self._allocation(data, dtype, f"({data}.shape[1], {data}.shape[0])", "psum"), line
        if instruction == "nc_matmul":
            stationary, moving = text["stationary"], text["moving"]
            return self._allocation(stationary, dtype=f"{self.nl}.float32", buffer="psum",
                                    shape=f"({stationary}.shape[1], {moving}.shape[1])"), line
        input_name, shape = LEGACY_ISA_SHAPED_BY[instruction]
        like = text.get(input_name)
        if like is None:
            return None
        return self._allocation(like, dtype, shape.format(like) if shape else None), line

    def _is_tile(self, node: cst.BaseExpression) -> bool:
        """A name known to hold a tile, or a slice of one (or of one in a list of blocks)."""
        return _root(node) in self.tiles

    def _stored(self, call: cst.Call) -> list[str] | None:
        """`nl.store(dst, value=tile)` as `nisa.dma_copy(dst=dst, src=tile)`; a value computed in place
        (`value=nl.copy(acc)`) becomes a tile of its own first."""
        if self._function(call) != "store":
            return None
        given = {a.keyword.value if a.keyword else ("dst", "value")[i]: a.value for i, a in enumerate(call.args)}
        sliced = self._sliced(given["dst"], given.get("mask")) if "dst" in given else None
        if sliced is not None:
            given.pop("mask", None)
        if set(given) != {"dst", "value"}:
            return None
        value, before = given["value"], []
        if isinstance(value, cst.Call):
            stored = f"{_base(self._code(given['dst']))}_stored"
            lines = self._assigned(stored, value)
            if lines is None:
                return None
            self.tiles.add(stored)
            value, before = cst.Name(stored), lines
        if not self._is_tile(value):
            return None
        if _root(value) in self.psum:  # the legacy store copied it out of PSUM (as the destination's type) itself
            staged, destination = f"{_root(value)}_sbuf", _root(given["dst"])
            dtype = f"{destination}.dtype" if destination else None
            before += [f"{staged} = {self._allocation(self._code(value), dtype)}",
                       f"{self.nisa}.tensor_copy(dst={staged}, src={self._code(value)})"]
            value = cst.Name(staged)
        if sliced is not None:
            return [*before, f"{self.nisa}.dma_copy(dst={sliced[0]}, src={self._part(self._code(value), sliced[1])})"]
        return [*before, f"{self.nisa}.dma_copy(dst={self._code(given['dst'])}, src={self._code(value)})"]

    # --- loops --------------------------------------------------------------------------------------------------
    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:  # noqa: N802
        if self._function(updated) in RANGES:
            return updated.with_changes(func=cst.Name("range"),
                                        args=[a for a in updated.args if a.keyword is None])
        return updated


class _GridAccesses(cst.CSTTransformer):
    """Each tile subscript over index grids in a statement, as `_Rewrite._grid_access` reads it; `read` collects
    the grids they use."""

    def __init__(self, rewrite: _Rewrite, limits: dict[str, str]):
        super().__init__()
        self.rewrite, self.limits = rewrite, limits
        self.read: set[str] = set()

    def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:  # noqa: N802
        access = self.rewrite._grid_access(updated, self.limits)
        if access is None:
            return updated
        self.read |= access[1]
        return cst.parse_expression(access[0])


class _Leftovers(cst.CSTVisitor):
    """Lines still using the legacy API: an `nl.*` the nki package does not have, or a `nisa.*` whose result
    is used (legacy instructions return their tile; the nki package's write a `dst`)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, nl: str, nisa: str):
        super().__init__()
        self.nl, self.nisa = nl, nisa
        self.found: list[tuple[int, str]] = []

    def visit_Call(self, node: cst.Call) -> None:  # noqa: N802
        dotted = _dotted(node.func)
        if dotted and dotted.startswith(f"{self.nisa}.") and not any(
                a.keyword is not None and a.keyword.value == "dst" for a in node.args):
            line = self.get_metadata(PositionProvider, node).start.line
            self.found.append((line, f"{dotted} returns its result in the legacy API: give it a dst= tile"))
        if dotted and dotted.startswith(f"{self.nl}.") and dotted[len(self.nl) + 1:] not in MODERN_LANGUAGE:
            line = self.get_metadata(PositionProvider, node).start.line
            self.found.append((line, f"{dotted} has no mechanical nki-package form here"))
        if dotted and dotted.startswith((f"{self.nl}.", f"{self.nisa}.")) and any(
                a.keyword is not None and a.keyword.value == "mask" for a in node.args):
            line = self.get_metadata(PositionProvider, node).start.line
            self.found.append((line, "mask= is gone from the nki package: bound the slices the instruction reads and "
                                     "writes to the lanes it keeps (dropped, it would change what the instruction "
                                     "reads or overwrite values the kernel keeps)"))
        if dotted and dotted[len(self.nl) + 1:] in ALLOCATIONS and node.args and _block_dimension(node.args[0].value):
            line = self.get_metadata(PositionProvider, node).start.line
            self.found.append((line, "a block dimension (nl.par_dim after the first axis), removed in the nki "
                                     "package: index a Python list of tiles instead"))


def _block_dimension(shape: cst.BaseExpression) -> bool:
    """Whether an allocation's shape puts `nl.par_dim(...)` after its first axis."""
    return isinstance(shape, cst.Tuple) and any(
        isinstance(e.value, cst.Call) and (_dotted(e.value.func) or "").endswith("par_dim") for e in shape.elements[1:])


class _Functions(cst.CSTVisitor):
    """Each module-level function's lines and the names its body calls."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, range] = {}
        self.calls: dict[str, set[str]] = {}

    def visit_Module(self, node: cst.Module) -> None:  # noqa: N802
        for statement in node.body:
            if isinstance(statement, cst.FunctionDef):
                position = self.get_metadata(PositionProvider, statement)
                self.lines[statement.name.value] = range(position.start.line, position.end.line + 1)
                self.calls[statement.name.value] = _names_read(statement)

    def reached(self, kernel: str) -> set[str]:
        """The kernel and every module function it calls, directly or through another."""
        seen, todo = set(), [kernel]
        while todo:
            name = todo.pop()
            if name in self.lines and name not in seen:
                seen.add(name)
                todo += self.calls[name]
        return seen


def _module_names(tree: cst.Module) -> tuple[str, str]:
    """The local names of the language and isa modules (`nl`, `nisa` unless the kernel chose others)."""
    nl, nisa = "nl", "nisa"
    for node in tree.body:
        for statement in node.body if isinstance(node, cst.SimpleStatementLine) else ():
            if isinstance(statement, cst.Import):
                for alias in statement.names:
                    name = _dotted(alias.name) or ""
                    asname = alias.asname.name if alias.asname else None
                    local = asname.value if isinstance(asname, cst.Name) else None
                    if name.endswith(".language") and local:
                        nl = local
                    elif name.endswith(".isa") and local:
                        nisa = local
    return nl, nisa


class _TensorUses(cst.CSTVisitor):
    """Names a function reads as a tensor: indexed, an attribute read (`.shape`, `.reshape`) or handed to a call."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def visit_Subscript(self, node: cst.Subscript) -> None:  # noqa: N802
        if isinstance(node.value, cst.Name):
            self.names.add(node.value.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:  # noqa: N802
        if isinstance(node.value, cst.Name):
            self.names.add(node.value.value)

    def visit_Arg(self, node: cst.Arg) -> None:  # noqa: N802
        if isinstance(node.value, cst.Name):
            self.names.add(node.value.value)


class _Scalars(cst.CSTVisitor):
    """Names bound to a number anywhere in the module: `EPS = 1e-6`, `rows, cols = x.shape`, `scale = 1.0 /
    math.sqrt(cols)`; an expression of numbers, sizes, arithmetic and calls outside the kernel modules (no tile can
    come of it); a function's parameter it only computes with, never reads as a tensor (layernorm's `epsilon`)."""

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:  # noqa: N802
        uses = _TensorUses()
        node.body.visit(uses)
        self.names |= {p.name.value for p in node.params.params if p.name.value not in uses.names}

    def __init__(self, nl: str, nisa: str):
        super().__init__()
        self.kernel_modules = (nl, nisa)
        self.names: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:  # noqa: N802
        target = node.targets[0].target if len(node.targets) == 1 else None
        if isinstance(target, cst.Name) and self._numeric(node.value):
            self.names.add(target.value)
        if isinstance(target, cst.Tuple) and isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape":
            self.names |= {e.value.value for e in target.elements if isinstance(e.value, cst.Name)}

    def _numeric(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, (cst.Integer, cst.Float)):
            return True
        if isinstance(node, cst.Name):
            return node.value in self.names
        if isinstance(node, cst.UnaryOperation):
            return self._numeric(node.expression)
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute):
            return node.value.attr.value == "shape"  # x.shape[0]
        if isinstance(node, cst.BinaryOperation):
            return self._numeric(node.left) and self._numeric(node.right)
        if isinstance(node, cst.Call):
            module = (_dotted(node.func) or "").split(".")[0]
            return bool(module) and module not in self.kernel_modules and all(self._numeric(a.value) for a in node.args)
        return False


def _scalars(tree: cst.Module, nl: str, nisa: str) -> frozenset[str]:
    found = _Scalars(nl, nisa)
    tree.visit(found)
    return frozenset(found.names)


class _ShortNames(cst.CSTTransformer):
    """`nki.isa.f` / `nki.language.f` (the package's own path, as the fused mamba tutorial writes them) as `nisa.f` /
    `nl.f`, so every rewrite and check sees one spelling."""

    def __init__(self, nl: str, nisa: str):
        super().__init__()
        self.short = {"nki.isa": nisa, "nki.language": nl, f"{LEGACY_ROOT}.isa": nisa, f"{LEGACY_ROOT}.language": nl}

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute  # noqa: N802
                        ) -> cst.Attribute | cst.Name:
        short = self.short.get(_dotted(updated) or "")
        return cst.Name(short) if short else updated

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:  # noqa: N802
        return original  # the imports keep their module paths

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> cst.ImportFrom:  # noqa: N802
        return original


def _names_read(tree: cst.CSTNode) -> set[str]:
    """Every name the code mentions (not the words of its strings and comments)."""
    names: set[str] = set()

    class Collect(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:  # noqa: N802
            names.add(node.value)

    tree.visit(Collect())
    return names


def _names_read_in_functions(tree: cst.Module) -> set[tuple[str, str]]:
    """(top-level function, name) for every name each function mentions ("" for the module's own lines)."""
    read = {("", name) for statement in tree.body if not isinstance(statement, cst.FunctionDef)
            for name in _names_read(statement)}
    return read | {(statement.name.value, name) for statement in tree.body if isinstance(statement, cst.FunctionDef)
                   for name in _names_read(statement)}


def _with_import(code: str, line: str) -> str:
    """`code` with the import `line` added before its first import of the nki package."""
    lines = code.splitlines(keepends=True)
    first = next((i for i, text in enumerate(lines) if text.startswith(("import nki", "from nki"))), 0)
    return "".join([*lines[:first], line, *lines[first:]])


def migrate_source(source: str, kernel_name: str | None = None) -> Migration:
    """The legacy kernel `source` with every mechanical rewrite applied, and the lines left for a person: with
    `kernel_name`, those of that kernel, the functions it calls and the module's own lines (a tutorial file holds
    several kernels; the other kernels' lines are `elsewhere`)."""
    tree = cst.parse_module(source)
    nl, nisa = _module_names(tree)
    tree = tree.visit(_ShortNames(nl, nisa))
    scalars = _scalars(tree, nl, nisa)
    first = _Rewrite(nl, nisa, scalars)
    code = tree.visit(first).code
    still_read = frozenset(first.dropped & _names_read_in_functions(cst.parse_module(code)))
    if still_read:
        code = tree.visit(_Rewrite(nl, nisa, scalars, still_read)).code
    for module, local in (("language", nl), ("isa", nisa)):
        if f"{local}." in code and f"import nki.{module} as {local}\n" not in code:
            code = _with_import(code, f"import nki.{module} as {local}\n")
    wrapper = cst.metadata.MetadataWrapper(cst.parse_module(code))
    leftovers = _Leftovers(nl, nisa)
    wrapper.visit(leftovers)
    found = sorted(set(leftovers.found))
    functions = _Functions()
    wrapper.visit(functions)
    if kernel_name is None or kernel_name not in functions.lines:
        return Migration(code, found)
    others = [functions.lines[name] for name in set(functions.lines) - functions.reached(kernel_name)]
    elsewhere = [item for item in found if any(item[0] in lines for lines in others)]
    return Migration(code, [item for item in found if item not in elsewhere], elsewhere)


@dataclass
class Verified:
    """Both versions profiled on the same fresh seeds: agreeing means both are correct within the task's
    tolerance on every seed."""

    original: ProfileResult
    migrated: ProfileResult

    @property
    def agree(self) -> bool:
        return self.original.correct is True and self.migrated.correct is True


def verify(original: str, migrated: str, task: TaskRef, hardware: str = "trn2", seeds: Sequence[int] | None = None,
           profiler: Profiler | None = None, kernel_name: str | None = None) -> Verified:
    """Profile the legacy kernel and its migration on the same fresh seeds (simulated `hardware`)."""
    chosen = list(seeds) if seeds is not None else fresh_seeds(5)
    runner = profiler or SimulatorProfiler()
    return Verified(*(runner.profile(source, task, hardware, seeds=chosen, kernel_label=label, kernel_name=kernel_name)
                      for source, label in ((original, "original.py"), (migrated, "migrated.py"))))


# --- `accelopt migrate`: exit codes as the other commands use them --------------------------------------------------
EXIT_MIGRATED = 0  # complete, and both versions correct on the same fresh seeds
EXIT_COULD_NOT_RUN = 1  # one of the two versions failed to run
EXIT_DISAGREES = 3  # it ran, but a version is wrong on some seed or lines are left for a person


def exit_code(migration: Migration, verified: Verified) -> int:
    """0 only for a complete migration both of whose versions are correct on every seed."""
    if verified.original.error or verified.migrated.error:
        return EXIT_COULD_NOT_RUN
    return EXIT_MIGRATED if verified.agree and migration.complete else EXIT_DISAGREES


def _version_line(label: str, result: ProfileResult) -> str:
    if result.error:
        return f"{label:<9} failed to run: {result.error}"
    verdict = "correct" if result.correct else f"WRONG RESULTS ({result.check_message})"
    latency = f"{result.latency_ms:.4g} ms" if result.latency_ms is not None else "no latency"
    return f"{label:<9} {latency} ({measured_on(result)}), {verdict}"


def render_migration(kernel_path: str, out_path: str, migration: Migration, verified: Verified) -> str:
    """What a person reads after `accelopt migrate`: where the kernel went, both latencies and where they come
    from, the verdict on the seeds both ran on, and each line left for a person as `file:line: reason`."""
    seeds = ", ".join(map(str, verified.original.seeds)) or "none"
    lines = [f"migrated  {kernel_path} -> {out_path}",
             _version_line("original", verified.original),
             _version_line("migrated", verified.migrated),
             f"seeds     {seeds} (the same fresh seeds for both)"]
    if verified.agree and verified.original.latency_ms and verified.migrated.latency_ms:
        ratio = verified.original.latency_ms / verified.migrated.latency_ms
        lines.append(f"speed     migrated runs {ratio:.2f}x the original's speed")
    verdict = "both correct on every seed" if verified.agree else "the versions do not both pass"
    left = len(migration.needs_person)
    lines.append(f"result    {verdict}; " + ("migration complete" if migration.complete else
                                             f"{left} line{'s' * (left != 1)} left for a person:"))
    lines += [f"{out_path}:{line}: {reason}" for line, reason in migration.needs_person]
    if migration.elsewhere:
        lines.append(f"other     {len(migration.elsewhere)} more legacy lines in functions the kernel does not call")
    return "\n".join(lines)


def migration_dict(kernel_path: str, out_path: str, migration: Migration, verified: Verified) -> dict[str, Any]:
    """The same as one JSON object, with both profiles as `accelopt profile --json` gives them."""
    return {"kernel": kernel_path, "out": out_path, "complete": migration.complete, "agree": verified.agree,
            "needs_person": [{"file": out_path, "line": line, "reason": reason}
                             for line, reason in migration.needs_person],
            "elsewhere": [{"file": out_path, "line": line, "reason": reason} for line, reason in migration.elsewhere],
            "original": verified.original.to_dict(), "migrated": verified.migrated.to_dict(),
            "exit_code": exit_code(migration, verified)}


def offer_migration(source: str, task: TaskRef, profiler: Profiler, hardware: str = "trn2",
                    kernel_name: str | None = None) -> MigrationOffer:
    """Migrate `source` and run both versions on the same fresh seeds: what an editor offers (in a worker, never
    on the editor's event loop: the two runs take seconds)."""
    migration = migrate_source(source, kernel_name)
    verified = verify(source, migration.source, task, hardware, profiler=profiler, kernel_name=kernel_name)
    return MigrationOffer(source, migration.source, migration.complete, verified.agree,
                          tuple(migration.needs_person), verified.original.latency_ms, verified.migrated.latency_ms,
                          measured_on(verified.migrated))
