"""Small libcst helpers the rules share: parsing, kernel loops, which names a statement reads and
writes, source positions, static evaluation of tile sizes, and lookups in a profile.

Everything here is syntactic and conservative: when a helper cannot tell (a call it does not know,
a name bound twice), it answers in the way that makes a rule decline rather than rewrite wrongly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import libcst as cst
import numpy as np
from libcst.metadata import CodeRange, MetadataWrapper, ParentNodeProvider, PositionProvider

from .base import RuleError

NodeT = TypeVar("NodeT", bound=cst.CSTNode)

# Loop iterators a kernel may use, by the dotted name of the call.
LOOP_KINDS = {
    "nl.affine_range": "affine",
    "nl.sequential_range": "sequential",
    "nl.static_range": "static",
    "range": "range",
}

# The size the rules' estimates give an element of unknown dtype: float32, the NKIBench kernels' and the widest
# common one.
ELEMENT_BYTES = 4
# Keyword arguments through which an NKI call writes into an existing tensor.
OUTPUT_KEYWORDS = frozenset({"dst", "out", "reduce_res", "dst_tensor"})
# NKI calls whose first positional argument is written.
WRITING_CALLS = frozenset({"nl.store", "nisa.dma_copy", "nl.atomic_rmw"})
# Modules whose functions are known not to mutate their positional inputs.
KNOWN_MODULES = ("nl.", "nisa.", "nki.", "math.", "np.")
KNOWN_BUILTINS = frozenset({"min", "max", "slice", "abs", "int", "float", "len", "range", "tuple", "round"})


# ---------------------------------------------------------------- parsing and printing

def parse(source: str) -> cst.Module:
    """The module, or RuleError when the source does not parse (a rule never guesses)."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise RuleError(f"the kernel does not parse: {exc}") from exc


def code_of(node: cst.CSTNode) -> str:
    """Source text of one node, as libcst prints it."""
    return cst.Module(body=[]).code_for_node(node)


def flat(text: str) -> str:
    """Text without whitespace: compares two snippets regardless of formatting."""
    return "".join(text.split())


def positions(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    """Source ranges of the nodes of `module` itself (no copy, so node identity holds)."""
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


def parents(module: cst.Module) -> Mapping[cst.CSTNode, cst.CSTNode]:
    """The parent of every node of `module` itself (no copy, so node identity holds)."""
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(ParentNodeProvider)


_FOCUS: ContextVar[str | None] = ContextVar("accelopt_kernel_function", default=None)


@contextmanager
def focus(function: str | None) -> Iterator[None]:
    """Inside, the rules see and rewrite only `function` (a file of several kernels, one of which was named
    and profiled: the tutorials keep every version of a kernel in one file). None: every function."""
    token = _FOCUS.set(function)
    try:
        yield
    finally:
        _FOCUS.reset(token)


def focused() -> str | None:
    """The function in focus, or None when the rules see every function."""
    return _FOCUS.get()


def functions(module: cst.Module) -> list[cst.FunctionDef]:
    """Top-level functions the rules work on: the kernel and any helpers next to it, or only the function in
    focus."""
    found = [s for s in module.body if isinstance(s, cst.FunctionDef)]
    named = focused()
    return [f for f in found if f.name.value == named] if named else found


def dotted(expr: cst.BaseExpression) -> str | None:
    """`nl.affine_range` for an Attribute chain of Names, `range` for a Name, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        head = dotted(expr.value)
        return f"{head}.{expr.attr.value}" if head else None
    return None


def call_name(node: cst.CSTNode) -> str | None:
    return dotted(node.func) if isinstance(node, cst.Call) else None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def is_true(expr: cst.BaseExpression | None) -> bool:
    """Whether an argument is the literal `True` (absent is not)."""
    return isinstance(expr, cst.Name) and expr.value == "True"


def root_name(expr: cst.BaseExpression) -> str | None:
    """The variable an access goes through: `a` for `a`, `a[i]`, `a.x[i]`, `a.reshape(s)[i]`."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Subscript | cst.Attribute):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            expr = expr.func.value
        else:
            return None


# ---------------------------------------------------------------- statements and loops

def block_statements(owner: cst.CSTNode) -> Sequence[cst.BaseStatement]:
    """Statements of the indented block of a def / for / if / with / while (empty for one-line suites)."""
    body = getattr(owner, "body", None)
    if isinstance(body, cst.IndentedBlock):
        return body.body
    return ()


def with_statements(owner: cst.CSTNode, statements: Sequence[cst.BaseStatement]) -> cst.CSTNode:
    """`owner` with its block holding `statements` (a `pass` when none are left)."""
    body = owner.body  # type: ignore[attr-defined]
    if not statements:
        statements = [cst.SimpleStatementLine([cst.Pass()])]
    return owner.with_changes(body=body.with_changes(body=list(statements)))


def is_marker(stmt: cst.CSTNode) -> bool:
    """A bare string statement: compiler output ends every loop body with `' end loop i2 '`."""
    node = small(stmt)
    return isinstance(node, cst.Expr) and isinstance(node.value, cst.SimpleString)


def code_statements(owner: cst.CSTNode) -> list[cst.BaseStatement]:
    """The statements of a block that do something (markers left out)."""
    return [s for s in block_statements(owner) if not is_marker(s)]


def small(stmt: cst.CSTNode) -> cst.BaseSmallStatement | None:
    """The only small statement of a simple line (None for compound or `a; b` lines)."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


def assigned_name(stmt: cst.CSTNode) -> str | None:
    """`x` for a line `x = value`, else None."""
    node = small(stmt)
    if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
        return node.targets[0].target.value
    return None


@dataclass(frozen=True)
class Site:
    """A statement of a function with the compound statements around it, outermost first."""

    stmt: cst.BaseStatement
    parents: tuple[cst.CSTNode, ...]

    @property
    def loops(self) -> tuple[cst.For, ...]:
        """The enclosing `for` loops reached through `for` statements only (innermost chain)."""
        chain: list[cst.For] = []
        for parent in reversed(self.parents):
            if not isinstance(parent, cst.For):
                break
            chain.append(parent)
        return tuple(reversed(chain))


def sites(owner: cst.CSTNode, parents: tuple[cst.CSTNode, ...] = ()) -> Iterator[Site]:
    """Every statement under `owner` (a function or a compound statement), in source order."""
    for stmt in block_statements(owner):
        yield Site(stmt, parents)
        if isinstance(stmt, cst.BaseCompoundStatement):
            yield from sites(stmt, (*parents, stmt))
            orelse = getattr(stmt, "orelse", None)
            while orelse is not None:
                yield from sites(orelse, (*parents, stmt))
                orelse = getattr(orelse, "orelse", None)


def loop_var(loop: cst.For) -> str | None:
    return loop.target.value if isinstance(loop.target, cst.Name) else None


def loop_kind(loop: cst.For) -> str | None:
    """affine / sequential / static / range, or None for a loop over something else (any alias of
    the language module: `nl.affine_range`, `nki.language.affine_range`)."""
    name = call_name(loop.iter)
    if not name:
        return None
    if name in LOOP_KINDS:
        return LOOP_KINDS[name]
    tail = name.rsplit(".", 1)[-1]
    return LOOP_KINDS.get(f"nl.{tail}") if "." in name else None


def loop_args(loop: cst.For) -> list[cst.Arg]:
    return list(loop.iter.args) if isinstance(loop.iter, cst.Call) else []


def contains(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    """Whether `inner` (by identity) is `outer` or lies inside it."""
    if outer is inner:
        return True
    return any(contains(child, inner) for child in children(outer))


_CHILDREN: dict[int, tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = {}


def children(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """`node.children`, remembered: libcst computes it with a visitor on every access, and the
    analyses walk the same (immutable) trees many times."""
    entry = _CHILDREN.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    if len(_CHILDREN) > 200_000:  # bounded: entries keep their trees alive
        _CHILDREN.clear()
    kids = tuple(node.children)
    _CHILDREN[id(node)] = (node, kids)
    return kids


# ---------------------------------------------------------------- names read and written

def name_nodes(node: cst.CSTNode) -> list[cst.Name]:
    """Every variable occurrence under `node` (attribute and keyword names excluded)."""
    out: list[cst.Name] = []
    _collect_names(node, out)
    return out


def _collect_names(node: cst.CSTNode, out: list[cst.Name]) -> None:
    if isinstance(node, cst.Name):
        out.append(node)
    elif isinstance(node, cst.Attribute | cst.Arg):
        _collect_names(node.value, out)
    else:
        for child in children(node):
            _collect_names(child, out)


def names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in name_nodes(node)}


def _target_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Tuple | cst.List):
        out: set[str] = set()
        for element in target.elements:
            out |= _target_names(element.value)
        return out
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    root = root_name(target)
    return {root} if root else set()


def _bound_by(node: cst.CSTNode) -> set[str]:
    """Variables one node binds or mutates by itself (not counting its children)."""
    if isinstance(node, cst.Assign):
        return set().union(*(_target_names(t.target) for t in node.targets))
    if isinstance(node, cst.AugAssign | cst.AnnAssign | cst.For | cst.NamedExpr):
        return _target_names(node.target)
    if isinstance(node, cst.WithItem) and node.asname is not None:
        return _target_names(node.asname.name)
    if isinstance(node, cst.Call):
        return call_outputs(node)
    return set()


def call_outputs(call: cst.Call) -> set[str]:
    """Variables a call may write: the destination of a store or dma_copy, `reduce_res=`-style
    outputs, and (unknown functions and methods) every variable passed in or called on."""
    name = call_name(call)
    out: set[str] = set()
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in OUTPUT_KEYWORDS:
            out |= {r for r in [root_name(arg.value)] if r}
    if name in WRITING_CALLS:
        first = next((a for a in call.args if a.keyword is None), None)
        if first is not None and (r := root_name(first.value)):
            out.add(r)
    elif isinstance(call.func, cst.Attribute) and call.func.attr.value in _PURE_METHODS:
        pass  # `t.reshape(s)`, `g.broadcast_to(s)`: a new view or tile, the receiver stays as it was
    elif name is None or not (name.startswith(KNOWN_MODULES) or name in KNOWN_BUILTINS):
        if name is None or "." in name:  # a method call: the receiver may change
            receiver = root_name(call.func)
            if receiver and receiver not in ("nl", "nisa", "nki", "math", "np"):
                out.add(receiver)
        for arg in call.args:
            if (r := root_name(arg.value)) is not None:
                out.add(r)
    return out


def names_written(node: cst.CSTNode) -> set[str]:
    """Every variable bound or mutated under `node` (conservative)."""
    return set(_bindings(node)[0])


# ---------------------------------------------------------------- accesses (reads and writes with their index)

@dataclass(frozen=True)
class Access:
    """One use of a variable. kind: read, bind (`x = ...`, loop target), write (`x[i] = ...`, a call's
    output) or accumulate (`x += ...`, `x[i] += ...`); `index` is the subscript text, without spaces,
    when the access goes through `x[...]` (None for the whole variable)."""

    name: str
    kind: str
    index: str | None
    node: cst.CSTNode


def _index_text(sub: cst.Subscript) -> str:
    return flat(",".join(code_of(element.slice) for element in sub.slice))


def accesses(node: cst.CSTNode) -> list[Access]:
    """Reads and writes of variables under `node`, in source order within each statement."""
    out: list[Access] = []
    _access(node, out)
    return out


def _access_target(target: cst.BaseExpression, kind: str, out: list[Access]) -> None:
    if isinstance(target, cst.Tuple | cst.List):
        for element in target.elements:
            _access_target(element.value, kind, out)
    elif isinstance(target, cst.Name):
        out.append(Access(target.value, "bind" if kind == "write" else kind, None, target))
    elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
        out.append(Access(target.value.value, kind, _index_text(target), target))
        for element in target.slice:
            _access(element, out)
    elif (root := root_name(target)) is not None:
        out.append(Access(root, kind, None, target))


def _access(node: cst.CSTNode, out: list[Access]) -> None:
    if isinstance(node, cst.Assign):
        _access(node.value, out)
        for target in node.targets:
            _access_target(target.target, "write", out)
    elif isinstance(node, cst.AugAssign):
        _access(node.value, out)
        _access_target(node.target, "accumulate", out)
    elif isinstance(node, cst.For):
        _access(node.iter, out)
        _access_target(node.target, "write", out)
        _access(node.body, out)
        if node.orelse is not None:
            _access(node.orelse, out)
    elif isinstance(node, cst.Call):
        outputs = call_outputs(node)
        _access(node.func, out)
        for arg in node.args:
            if root_name(arg.value) in outputs:
                _access_target(arg.value, "write", out)
            else:
                _access(arg.value, out)
    elif isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name):
        out.append(Access(node.value.value, "read", _index_text(node), node))
        for element in node.slice:
            _access(element, out)
    elif isinstance(node, cst.Name):
        out.append(Access(node.value, "read", None, node))
    elif isinstance(node, cst.Attribute | cst.Arg):
        _access(node.value, out)
    else:
        for child in children(node):
            _access(child, out)


def dependents(body: Sequence[cst.CSTNode], seeds: set[str]) -> set[str]:
    """Names bound in `body` (at any depth) whose value may depend on `seeds` (a fixpoint over the
    assignments, loop targets counting as depending on their range)."""
    found = set(seeds)
    changed = True
    while changed:
        changed = False
        for stmt in body:
            for node in _assignments(stmt):
                if isinstance(node, cst.For):
                    targets, used = _target_names(node.target), names_in(node.iter)
                elif isinstance(node, cst.Assign):
                    targets = set().union(*(_target_names(t.target) for t in node.targets))
                    used = names_in(node.value)
                else:
                    targets, used = _target_names(node.target), names_in(node.value) | _target_names(node.target)
                if used & found and not targets <= found:
                    found |= targets
                    changed = True
    return found


def _assignments(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    if isinstance(node, cst.Assign | cst.AugAssign | cst.For):
        yield node
    for child in children(node):
        yield from _assignments(child)


def binding_count(owner: cst.CSTNode, name: str) -> int:
    """How many times `name` is bound or mutated under `owner` (statements, loop targets, outputs,
    parameters)."""
    counts, params = _bindings(owner)
    return counts.get(name, 0) + params.get(name, 0)


_COUNTS: dict[int, tuple[cst.CSTNode, dict[str, int], dict[str, int]]] = {}


def _bindings(owner: cst.CSTNode) -> tuple[dict[str, int], dict[str, int]]:
    """(bindings and mutations by statements, bindings by parameters) per variable under `owner`:
    one walk per tree, remembered, since the analyses ask about the same loops many times."""
    entry = _COUNTS.get(id(owner))
    if entry is not None and entry[0] is owner:
        return entry[1], entry[2]
    counts: dict[str, int] = {}
    params: dict[str, int] = {}
    for node in _walk(owner):
        for name in _bound_by(node):
            counts[name] = counts.get(name, 0) + 1
        if isinstance(node, cst.Param):
            params[node.name.value] = params.get(node.name.value, 0) + 1
    if len(_COUNTS) > 2_000:  # bounded: entries keep their trees alive
        _COUNTS.clear()
    _COUNTS[id(owner)] = (owner, counts, params)
    return counts, params


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in children(node):
        yield from _walk(child)


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every node under it, in source order."""
    return _walk(node)


def is_pure(expr: cst.CSTNode, extra_impure: Sequence[str] = ()) -> bool:
    """No call under `expr` writes anything or allocates: NKI and math functions, builtins and
    the tensor methods `.reshape`, `.astype` and `.broadcast_to` only (a conservative allow-list)."""
    allocators = ("nl.ndarray", "nl.zeros", "nl.ones", "nl.full", "nl.empty", "nl.rand", "nl.random_seed",
                  "nl.dropout", "nl.device_print", "nl.shared_constant", "nisa.dropout", "nisa.memset",
                  *extra_impure)
    for node in _walk(expr):
        if isinstance(node, cst.Lambda | cst.Yield | cst.Await | cst.NamedExpr):
            return False
        if not isinstance(node, cst.Call):
            continue
        name = call_name(node)
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        if call_outputs(node):
            return False
        if method in _PURE_METHODS:  # `t.reshape(s)`, `nl.load(g).broadcast_to(s)`: the receiver is walked too
            continue
        if name is None or name in allocators or name.endswith("_like"):
            return False
        if not (name.startswith(KNOWN_MODULES) or name in KNOWN_BUILTINS):
            return False
    return True


_PURE_METHODS = ("reshape", "astype", "broadcast_to", "type")  # `np.dtype(np.float32).type(1e-05)`: a constant


def rename(node: NodeT, old: str, new: str) -> NodeT:
    """`node` with the variable `old` renamed to `new` everywhere (attribute and keyword names untouched)."""
    return rewrite(node, names={id(n): n.with_changes(value=new) for n in name_nodes(node) if n.value == old})


def fresh_name(owner: cst.CSTNode, base: str) -> str:
    """`base`, or `base_2`, `base_3`... whichever no variable under `owner` uses yet."""
    used = names_in(owner) | {n.value for n in _walk(owner) if isinstance(n, cst.Name)}
    if base not in used:
        return base
    suffix = 2
    while f"{base}_{suffix}" in used:
        suffix += 1
    return f"{base}_{suffix}"


# ---------------------------------------------------------------- editing blocks

def rewrite(root: NodeT, statements: Mapping[int, Sequence[cst.BaseStatement]] | None = None,
            names: Mapping[int, cst.BaseExpression] | None = None) -> NodeT:
    """`root` with some statements replaced by lists of statements (empty: removed; a block left
    empty gets `pass`) and some Name nodes replaced by expressions, both keyed by `id()` of the
    original node, in one pass so that every key still refers to the tree as it was given."""
    statements = statements or {}
    names = names or {}

    def _body(original: Sequence[cst.CSTNode], updated: Sequence[cst.CSTNode]) -> list[Any]:
        out: list[Any] = []
        for before, after in zip(original, updated, strict=True):
            out.extend(statements.get(id(before), [after]))
        return out

    class _Rewrite(cst.CSTTransformer):
        def leave_IndentedBlock(  # noqa: N802
                self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
            body = _body(original.body, updated.body)
            return updated.with_changes(body=body or [cst.SimpleStatementLine([cst.Pass()])])

        def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:  # noqa: N802
            return updated.with_changes(body=_body(original.body, updated.body))

        def leave_Name(self, original: cst.Name, updated: cst.BaseExpression) -> cst.BaseExpression:  # noqa: N802
            return names.get(id(original), updated)

    return root.visit(_Rewrite())  # type: ignore[return-value]


def replace_statement(module: cst.Module, old: cst.BaseStatement, new: Sequence[cst.BaseStatement]) -> cst.Module:
    """`module` with the statement `old` (by identity) replaced by the statements `new`."""
    if not any(site.stmt is old for func in functions(module) for site in sites(func)):
        raise RuleError("the statement to rewrite is no longer in a block of the kernel")
    return rewrite(module, {id(old): list(new)})


def parse_statement(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text)


# ---------------------------------------------------------------- static values

def single_assignments(func: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
    """Variables bound exactly once in `func`, by `name = value`: the environment for `static_value`."""
    env: dict[str, cst.BaseExpression] = {}
    for node in _walk(func.body):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            env.setdefault(node.targets[0].target.value, node.value)
    return {name: value for name, value in env.items() if binding_count(func, name) == 1}


def static_value(expr: cst.BaseExpression, env: Mapping[str, cst.BaseExpression], depth: int = 0) -> float | None:
    """The number `expr` evaluates to from constants, `nl.tile_size` and single assignments, or None."""
    if depth > 20:
        return None
    if isinstance(expr, cst.Integer | cst.Float):
        return float(expr.evaluated_value)
    if isinstance(expr, cst.Name):
        return static_value(env[expr.value], env, depth + 1) if expr.value in env else None
    if isinstance(expr, cst.Attribute):
        name = dotted(expr)
        if name and name.startswith("nl.tile_size."):
            value = tile_size_constant(name.rsplit(".", 1)[1])
            return float(value) if value is not None else None
        return None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        value = static_value(expr.expression, env, depth + 1)
        return -value if value is not None else None
    if isinstance(expr, cst.BinaryOperation):
        left, right = static_value(expr.left, env, depth + 1), static_value(expr.right, env, depth + 1)
        if left is None or right is None:
            return None
        return _binary(expr.operator, left, right)
    if isinstance(expr, cst.Call) and call_name(expr) in ("min", "max", "int") and expr.args:
        values = [static_value(a.value, env, depth + 1) for a in expr.args]
        if any(v is None or a.keyword is not None for v, a in zip(values, expr.args, strict=True)):
            return None
        name = call_name(expr)
        return float(min(values) if name == "min" else max(values) if name == "max" else int(values[0]))  # type: ignore[type-var,arg-type]
    return None


def _binary(op: cst.BaseBinaryOp, left: float, right: float) -> float | None:
    try:
        if isinstance(op, cst.Add):
            return left + right
        if isinstance(op, cst.Subtract):
            return left - right
        if isinstance(op, cst.Multiply):
            return left * right
        if isinstance(op, cst.FloorDivide):
            return float(left // right)
        if isinstance(op, cst.Divide):
            return left / right
        if isinstance(op, cst.Modulo):
            return left % right
    except ZeroDivisionError:
        return None
    return None


def dtype_bytes(expr: cst.BaseExpression | None) -> int | None:
    """Bytes per element of a dtype written as `nl.float32`, `np.float16`, "bfloat16"..., else None."""
    if expr is None:
        return None
    name = dotted(expr)
    if name is None and isinstance(expr, cst.SimpleString):
        name = expr.evaluated_value if isinstance(expr.evaluated_value, str) else None
    if not name:
        return None
    from ...nki import dtypes  # the simulator's table (numpy), loaded when a rule first sizes a tensor

    dtype = getattr(dtypes, name.rsplit(".", 1)[-1], None)
    return dtypes.facts_of(dtype)[1] if isinstance(dtype, np.dtype) else None


def tile_size_constant(name: str) -> int | None:
    """`nl.tile_size.<name>` as the simulator defines it (`pmax` 128, `gemm_moving_fmax` 512, ...), else None:
    the rules evaluate shapes written with these names by the simulator's own table."""
    from ...nki.language import tile_size

    value = vars(tile_size).get(name)
    return value if isinstance(value, int) else None


# ---------------------------------------------------------------- profile lookups

def line_times(profile: Any) -> dict[int, float]:
    """Time (ms) the profile attributes to each kernel line."""
    if profile is None:
        return {}
    return {int(item["line"]): float(item.get("time_ms") or 0.0) for item in getattr(profile, "lines", None) or []}


def loop_trips(profile: Any) -> dict[int, float]:
    """Average trip count of each loop, by the line of its `for` (from the profile's `loops`)."""
    if profile is None:
        return {}
    out: dict[int, float] = {}
    for loop in (getattr(profile, "profile", None) or {}).get("loops") or []:
        if loop.get("executions"):
            out[int(loop["line"])] = float(loop["iterations"]) / float(loop["executions"])
    return out


def loop_spans(profile: Any) -> dict[int, float]:
    """Wall time (ms) from the first to the last instruction of each loop, by the line of its `for`."""
    if profile is None:
        return {}
    return {int(loop["line"]): float(loop.get("span_ms") or 0.0)
            for loop in (getattr(profile, "profile", None) or {}).get("loops") or []}


def latency_ms(profile: Any) -> float | None:
    value = getattr(profile, "latency_ms", None) if profile is not None else None
    return float(value) if value else None


def profile_value(profile: Any, key: str) -> float | None:
    value = (getattr(profile, "profile", None) or {}).get(key) if profile is not None else None
    return float(value) if isinstance(value, int | float) else None


def line_engine_times(profile: Any) -> dict[int, dict[str, float]]:
    """Time (ms) each kernel line spends on each engine (dma, tensor, vector, ...)."""
    if profile is None:
        return {}
    out: dict[int, dict[str, float]] = {}
    for item in getattr(profile, "lines", None) or []:
        engines = item.get("engines") or ({item["engine"]: item.get("time_ms") or 0.0} if item.get("engine") else {})
        out[int(item["line"])] = {str(name): float(t or 0.0) for name, t in engines.items()}
    return out


def engine_busy_ms(profile: Any) -> dict[str, float]:
    """Busy time (ms) of each engine over the whole kernel."""
    busy = (getattr(profile, "profile", None) or {}).get("engine_busy_time") if profile is not None else None
    return {name: 1000.0 * float(t) for name, t in (busy or {}).items()}


def add_times(total: dict[str, float], more: Mapping[str, float], scale: float = 1.0) -> dict[str, float]:
    """`total` (changed in place and returned) plus `scale` times `more`, per engine."""
    for engine, t in more.items():
        total[engine] = total.get(engine, 0.0) + scale * t
    return total


def predicted_gain(profile: Any, saved: Mapping[str, float], added: Mapping[str, float] | None = None) -> float:
    """Estimated ms a rewrite saves when the engines lose `saved` and gain `added` busy time (ms):
    the kernel is taken to run as long as its busiest engine, scaled by how far it is from that
    today. Without engine times, the plain difference."""
    added = added or {}
    busy, latency = engine_busy_ms(profile), latency_ms(profile)
    if not busy or not latency:
        return sum(saved.values()) - sum(added.values())
    before = max(busy.values())
    after = max(busy.get(e, 0.0) - saved.get(e, 0.0) + added.get(e, 0.0) for e in {*busy, *saved, *added})
    return latency * (1.0 - max(after, 0.0) / before) if before > 0 else 0.0


def engine_times_under(node: cst.CSTNode, pos: Mapping[cst.CSTNode, CodeRange],
                       lines: Mapping[int, Mapping[str, float]], scale: float = 1.0) -> dict[str, float]:
    """Profiled time (ms) per engine of the lines `node` spans, times `scale`."""
    out: dict[str, float] = {}
    where = pos.get(node)
    if where is not None:
        for line in range(where.start.line, where.end.line + 1):
            add_times(out, lines.get(line, {}), scale)
    return out


def line_of(node: cst.CSTNode, pos: Mapping[cst.CSTNode, CodeRange]) -> int:
    where = pos.get(node)
    return where.start.line if where is not None else 0


def locate(candidates: Sequence[cst.CSTNode], pos: Mapping[cst.CSTNode, CodeRange], line: int,
           what: str) -> cst.CSTNode:
    """The one candidate (already matched by content): the only one, else the one at `line`."""
    if not candidates:
        raise RuleError(f"{what} is not in the kernel any more")
    if len(candidates) == 1:
        return candidates[0]
    at_line = [c for c in candidates if line_of(c, pos) == line]
    if len(at_line) == 1:
        return at_line[0]
    raise RuleError(f"{what} is ambiguous: {len(candidates)} matches")


# ---------------------------------------------------------------- imports and the kernel function

def import_aliases(module: cst.Module) -> dict[str, str]:
    """Local name -> dotted module path of the module's top-level imports (`nl` -> `neuronxcc.nki.language`)."""
    aliases: dict[str, str] = {}
    for stmt in module.body:
        for node in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(node, cst.Import):
                for alias in node.names:
                    path = dotted(alias.name) or ""
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        aliases[alias.asname.name.value] = path
                    else:
                        aliases[path.split(".")[0]] = path.split(".")[0]
            elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
                base = dotted(node.module) if node.module is not None else ""
                for alias in node.names:
                    name = dotted(alias.name) or ""
                    local = alias.asname.name.value if alias.asname is not None and isinstance(
                        alias.asname.name, cst.Name) else name
                    aliases[local] = f"{base}.{name}" if base else name
    return aliases


def alias_of(module: cst.Module, path: str) -> str | None:
    """The local name `path` is imported as; the last two path parts decide, so `nki.isa` matches
    `neuronxcc.nki.isa` (None when it is not imported)."""
    tail = path.split(".")[-2:]
    for local, full in import_aliases(module).items():
        if full == path or (len(tail) == 2 and full.split(".")[-2:] == tail):
            return local
    return None


def ensure_import(module: cst.Module, path: str, local: str) -> tuple[cst.Module, str]:
    """`module` with `import path as local` after its last top-level import unless `path` is
    imported already, and the name to use for it."""
    existing = alias_of(module, path)
    if existing is not None:
        return module, existing
    text = f"import {path} as {local}\n" if local != path else f"import {path}\n"
    body = list(module.body)
    last = max((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
                and any(isinstance(n, cst.Import | cst.ImportFrom) for n in s.body)), default=-1)
    body.insert(last + 1, parse_statement(text))
    return module.with_changes(body=body), local


def kernel_functions(module: cst.Module) -> list[cst.FunctionDef]:
    """The kernels: the top-level functions with a `...jit`-style decorator, else the first function (with a
    function in focus, that one)."""
    found = functions(module)
    decorated = [fn for fn in found if any(_is_kernel_decorator(deco) for deco in fn.decorators)]
    return decorated or found[:1]


def _is_kernel_decorator(deco: cst.Decorator) -> bool:
    target = deco.decorator.func if isinstance(deco.decorator, cst.Call) else deco.decorator
    return (dotted(target) or "").rsplit(".", 1)[-1] in ("jit", "trace", "baremetal", "benchmark")


def kernel_function(module: cst.Module) -> cst.FunctionDef | None:
    """The kernel (the first of `kernel_functions`), or None in a module without functions."""
    kernels = kernel_functions(module)
    return kernels[0] if kernels else None


# ---------------------------------------------------------------- the tutorials' declared loads

def fold_declared_loads(module: cst.Module) -> cst.Module:
    """`x = nl.ndarray(...)` filled whole later in its block by `x[...] = nl.load(src)`, and written nowhere
    else, becomes `x = nl.load(src)` at the fill (the tutorials write their loads this way; the rules see
    one load). The declaration's lines stay as blank lines, so every line keeps its number and the
    profile's line times still apply."""
    folds: dict[int, list[cst.BaseStatement]] = {}  # id(statement) -> what replaces it (none: the declaration)
    for func in functions(module):
        written = [(site.stmt, names_written(site.stmt)) for site in sites(func)
                   if not isinstance(site.stmt, _COMPOUND)]
        for owner in [func, *(n for n in walk(func) if isinstance(n, _COMPOUND))]:
            statements = block_statements(owner)
            for i, declaration in enumerate(statements):
                found = _declared_load(declaration, statements[i + 1:], written)
                if found is not None:
                    fill, load = found
                    folds[id(declaration)] = []
                    folds[id(fill)] = [fill.with_changes(body=[small(fill).with_changes(  # type: ignore[union-attr]
                        targets=[cst.AssignTarget(cst.Name(assigned_name(declaration) or ""))], value=load)])]
    return edit_statements(module, folds, keep_lines=True) if folds else module


_COMPOUND = (cst.For, cst.While, cst.If, cst.With, cst.FunctionDef, cst.Else)


def _declared_load(declaration: cst.BaseStatement, after: Sequence[cst.BaseStatement],
                   written: Sequence[tuple[cst.CSTNode, set[str]]]) -> tuple[cst.SimpleStatementLine, cst.Call] | None:
    """The statement filling `declaration`'s SBUF tensor whole with one load, and that load, when it is the
    first statement after it in its block to use the tensor and no other statement writes it."""
    name, node = assigned_name(declaration), small(declaration)
    if name is None or not isinstance(node, cst.Assign) or call_name(node.value) != "nl.ndarray":
        return None
    buffer = keyword(node.value, "buffer")  # type: ignore[arg-type]
    if buffer is not None and (dotted(buffer.value) or "").rsplit(".", 1)[-1] != "sbuf":
        return None
    fill = next((s for s in after if name in names_in(s)), None)
    target = small(fill) if fill is not None else None
    if not (isinstance(fill, cst.SimpleStatementLine) and isinstance(target, cst.Assign) and len(target.targets) == 1):
        return None
    place, load = target.targets[0].target, target.value
    if not (isinstance(place, cst.Subscript) and root_name(place) == name and len(place.slice) == 1
            and isinstance(place.slice[0].slice, cst.Index) and isinstance(place.slice[0].slice.value, cst.Ellipsis)
            and isinstance(load, cst.Call) and call_name(load) == "nl.load" and keyword(load, "mask") is None
            and name not in names_in(load)):
        return None
    if any(name in names for stmt, names in written if stmt is not declaration and stmt is not fill):
        return None
    # the fill converts to the declared dtype: the load keeps doing so, unless it is the source's own
    dtype = keyword(node.value, "dtype") or next(  # type: ignore[arg-type]
        (a for i, a in enumerate(node.value.args) if i == 1 and a.keyword is None), None)  # type: ignore[attr-defined]
    source = root_name(load.args[0].value) if load.args else None
    if dtype is not None and keyword(load, "dtype") is None and code_of(dtype.value) != f"{source}.dtype":
        load = with_keyword(load, "dtype", dtype.value)
    return fill, load


def with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """`call` with `name=value` after its last argument, on the same line."""
    args = list(call.args)
    if args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    return call.with_changes(args=[*args, cst.Arg(value, keyword=cst.Name(name), equal=equal)])


def with_allocated_shape(stmt: cst.SimpleStatementLine, name: str,
                         reshape: Callable[[list[cst.Element]], list[cst.Element]]) -> cst.SimpleStatementLine:
    """The allocation `name = nl.ndarray((...), ...)` with the elements of its shape tuple replaced by
    `reshape(elements)`; a RuleError when the shape is not written as a tuple."""
    node = small(stmt)
    assert isinstance(node, cst.Assign) and isinstance(node.value, cst.Call)
    call = node.value
    args = list(call.args)
    index = next(i for i, a in enumerate(args) if a.keyword is None or a.keyword.value == "shape")
    shape = args[index].value
    if not isinstance(shape, cst.Tuple):
        raise RuleError(f"the shape of `{name}` is not written as a tuple")
    args[index] = args[index].with_changes(value=shape.with_changes(elements=reshape(list(shape.elements))))
    return stmt.with_changes(body=[node.with_changes(value=call.with_changes(args=args))])


# ---------------------------------------------------------------- several edits in one pass

def edit_statements(root: Any, edits: Mapping[int, Sequence[cst.BaseStatement]], keep_lines: bool = False) -> Any:
    """`root` with each statement whose id() is a key replaced by the given statements, in one
    pass (node identity does not survive a libcst rewrite, so edits cannot be chained). An empty
    replacement deletes; comment lines above a deleted statement move to the next one kept.
    `keep_lines`: a deleted statement leaves all its lines, blank, so every later line keeps its number."""

    def rebuild(originals: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]) -> list:
        out: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []
        for orig, upd in zip(originals, updated, strict=True):
            new = list(edits[id(orig)]) if id(orig) in edits else [upd]
            if not new:
                leading = getattr(orig, "leading_lines", ())
                if keep_lines:
                    own = code_of(orig.with_changes(leading_lines=[])).count("\n")
                    carried += [*leading, *[cst.EmptyLine(indent=False)] * own]
                else:
                    carried += [line for line in leading if line.comment is not None]
                continue
            if carried:
                new[0] = new[0].with_changes(leading_lines=[*carried, *new[0].leading_lines])
                carried = []
            out += new
        return out

    class _Edit(cst.CSTTransformer):
        def leave_IndentedBlock(  # noqa: N802
                self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
            if not any(id(s) in edits for s in original.body):
                return updated
            return updated.with_changes(body=rebuild(original.body, updated.body)
                                        or [cst.SimpleStatementLine([cst.Pass()])])

        def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:  # noqa: N802
            if not any(id(s) in edits for s in original.body):
                return updated
            return updated.with_changes(body=rebuild(original.body, updated.body))

    return root.visit(_Edit())


def replace_nodes(root: Any, mapping: Mapping[int, cst.CSTNode | cst.RemovalSentinel]) -> Any:
    """`root` with every node whose id() is a key swapped for its value (by identity), in one pass; a
    statement mapped to `cst.RemoveFromParent()` is deleted."""

    class _Swap(cst.CSTTransformer):
        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
            return mapping.get(id(original), updated)

    return root.visit(_Swap())


# ---------------------------------------------------------------- sizes from input shapes

def shape_values(func: cst.FunctionDef, shapes: Sequence[Sequence[int]]) -> dict[str, cst.BaseExpression]:
    """An environment for `static_value` in which the kernel's inputs have the given shapes: the
    top-level `a, b = x.shape` / `n = x.shape[i]` bindings become numbers, the other single
    assignments stay expressions."""
    env = dict(single_assignments(func))
    params = {p.name.value: tuple(shape) for p, shape in zip(func.params.params, shapes, strict=False)}
    for stmt in block_statements(func):
        node = small(stmt)
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0].target, node.value
        shape = _shape_of(value, params)
        if isinstance(target, cst.Tuple) and shape is not None and len(shape) == len(target.elements):
            for element, size in zip(target.elements, shape, strict=True):
                if isinstance(element.value, cst.Name) and binding_count(func, element.value.value) == 1:
                    env[element.value.value] = cst.Integer(str(size))
        elif isinstance(target, cst.Name) and isinstance(value, cst.Subscript) and len(value.slice) == 1:
            base, index = _shape_of(value.value, params), value.slice[0].slice
            if base is not None and isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
                position = int(index.value.value)
                if -len(base) <= position < len(base) and binding_count(func, target.value) == 1:
                    env[target.value] = cst.Integer(str(base[position]))
    return env


def _shape_of(expr: cst.BaseExpression, params: Mapping[str, tuple[int, ...]]) -> tuple[int, ...] | None:
    """The shape tuple of `p.shape` for an input `p` of known shape."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "shape" and isinstance(expr.value, cst.Name):
        return params.get(expr.value.value)
    return None


def input_shapes(profile: Any) -> dict[str, tuple[tuple[int, ...], ...]]:
    """The inputs' shapes the profiled kernel ran with ("timed", and "checked" when it was checked);
    {} without a profile, so rules that must show a value divides a dimension propose nothing."""
    found = getattr(profile, "input_shapes", None) or {}
    return {size: tuple(tuple(int(d) for d in shape) for shape in shapes) for size, shapes in found.items()}


def compiled_code(module: cst.Module | str, rule: str, what: str = "rewrite") -> str:
    """The rewritten kernel's code; a RuleError when Python cannot compile it, so a rule never hands the
    search a file that is not a kernel any more."""
    code = module if isinstance(module, str) else module.code
    try:
        compile(code, f"<{rule}>", "exec")
    except SyntaxError as exc:
        raise RuleError(f"the {what} would not parse: {exc.msg}") from None
    return code
