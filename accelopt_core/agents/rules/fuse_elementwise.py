"""fuse_elementwise: collapse chains of element-wise instructions into fewer engine instructions.

Every element-wise instruction pays a fixed overhead and a pass over its tile (fact sheet A.5, B.8),
and the Scalar engine computes `func(in * scale + bias)` for the price of `func` alone, so
(perf guide Opt #6) `exp(-x)`, `exp(x * c)` and `exp(x - row_max)` are one `nisa.activation`,
`x / (1 + exp(-x))` is `nl.silu(x)`, two tensor-scalar steps are one `nisa.tensor_scalar`, a
tensor-scalar step feeding a tensor-tensor op is one `nisa.scalar_tensor_tensor`, and a row sum of
an activation rides on the activation (`nisa.activation_reduce`).

The rule reads the kernel as expression trees, looking through intermediates that are assigned
once, used once, in the same block and not disturbed in between, so chains written over several
statements fuse too (their now-dead statements are removed). Operands are classified statically:
a scalar (Python number), a column ([P, 1] tile: a keepdims reduction, an `s:s+1` slice), or a
full tile; a fusion is proposed only when every operand has the class the instruction requires.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst

from ...nki.instructions import source_engines
from .analysis import KernelModel, ModelRule, model_of
from .base import Plan, RuleError
from .cst_util import (
    alias_of,
    assigned_name,
    binding_count,
    block_statements,
    call_name,
    code_of,
    compiled_code,
    dotted,
    edit_statements,
    ensure_import,
    flat,
    is_pure,
    is_true,
    keyword,
    line_of,
    locate,
    name_nodes,
    names_in,
    names_written,
    parse,
    replace_nodes,
    sites,
    small,
    static_value,
)

_BINARY = frozenset({"add", "subtract", "multiply", "divide", "maximum", "minimum"})
_COMMUTATIVE = frozenset({"add", "multiply", "maximum", "minimum"})
_UNARY = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "gelu", "relu", "square", "sin",
                    "cos", "arctan", "erf", "softplus", "mish", "sign", "abs", "negative", "reciprocal"})
# Functions of the activation table (fact sheet B.7) that nisa.activation takes as `op`.
_ACTIVATIONS = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "gelu", "relu", "square",
                          "sin", "arctan", "erf", "softplus", "mish", "sign", "abs"})
_PY_OPS: dict[type, str] = {cst.Add: "add", cst.Subtract: "subtract", cst.Multiply: "multiply",
                            cst.Divide: "divide"}
_COLUMN_REDUCTIONS = frozenset({"max", "min", "sum", "mean", "prod", "all"})
_TILE_MAKERS = frozenset({"load", "load_transpose2d", "matmul", "transpose", "broadcast_to", "where"})
_ALLOCATORS = frozenset({"ndarray", "zeros", "ones", "full"})

SCALAR, COLUMN, TILE, OTHER, INDEX = "scalar", "column", "tile", "other", "index"


def _combine(kinds: Sequence[str]) -> str:
    """The class of an element-wise result from the classes of its operands."""
    if INDEX in kinds:
        return INDEX
    if TILE in kinds:
        return TILE
    if any(k not in (SCALAR, COLUMN) for k in kinds):
        return OTHER
    if COLUMN in kinds:
        return COLUMN
    return SCALAR


def _quoted(code: str, limit: int = 60) -> str:
    """Kernel code on one line for a message, cut with an ellipsis past `limit` characters."""
    flat = " ".join(code.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass
class _Node:
    """One element-wise operation (`op`) or a leaf (op None) of an expression tree. `src` is the
    expression at the place it is used (a Name when looked through an intermediate, `via`)."""

    op: str | None
    args: list[_Node]
    src: cst.BaseExpression
    kind: str
    mask: str | None = None
    dtype: str | None = None
    via: str | None = None
    value: float | None = None

    @property
    def text(self) -> str:
        return code_of(self.src)

    @property
    def units(self) -> int:
        """Engine passes over the tile: a tensor-tensor op reads two tiles (2N cycles, B.8)."""
        if self.op in _BINARY and all(a.kind not in (SCALAR, COLUMN) for a in self.args):
            return 2
        return 1


@dataclass
class _Fusion:
    """A rewrite found in one statement: `root` (an expression of `stmt`) becomes `text`."""

    pattern: str
    stmt: cst.BaseStatement
    root: cst.BaseExpression | None
    text: str
    internals: list[_Node]
    saved: float  # engine passes saved (estimate)
    description: str
    dead: list[cst.BaseStatement] = field(default_factory=list)  # statements that become dead
    extra: list[str] = field(default_factory=list)  # statements inserted before `stmt`
    remove: list[cst.BaseStatement] = field(default_factory=list)  # other statements deleted

    @property
    def consumed(self) -> list[str]:
        return sorted({n.via for n in self.internals if n.via})

    def params(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "statement": flat(code_of(self.stmt)), "replacement": flat(self.text),
                "consumed": ",".join(self.consumed)}


def _same(a: _Node, b: _Node) -> bool:
    return a.via == b.via and flat(a.text) == flat(b.text)


def _const(n: _Node, value: float) -> bool:
    return n.op is None and n.value is not None and abs(n.value - value) < 1e-12


def _operand(n: _Node) -> bool:
    """A scalar or a [P, 1] column: what tensor_scalar / activation take as scale or operand."""
    return n.kind in (SCALAR, COLUMN)


def _data(n: _Node) -> bool:
    """Something that may be a full tile (not a number, a column or an HBM tensor)."""
    return n.kind in (TILE, OTHER)


def _pairs(args: Sequence[_Node]) -> Iterator[tuple[_Node, _Node, bool]]:
    """(first, second, swapped) for both orders of a binary op's operands."""
    yield args[0], args[1], False
    yield args[1], args[0], True


class KernelAnalysis:
    """The kernel's names, their classes (scalar, [P, 1] column, tile, index) and element-wise
    expression trees; shared by planning and applying (and by engine_balance)."""

    def __init__(self, model: KernelModel):
        module = self.module = model.module
        self.fn = model.fn
        self.nl = alias_of(module, "neuronxcc.nki.language") or "nl"
        self.nisa = alias_of(module, "neuronxcc.nki.isa") or "nisa"
        self.np = alias_of(module, "numpy") or "np"
        self.pos = model.pos
        self.uses: dict[str, int] = {}
        for name in name_nodes(self.fn.body):
            self.uses[name.value] = self.uses.get(name.value, 0) + 1
        self.constants = model.constants
        self.model = model
        self.kinds = self._name_kinds()
        self.psum = self._psum_names()

    def _psum_names(self) -> set[str]:
        """Names bound to PSUM tiles: PSUM allocations and Tensor-engine results."""
        found: set[str] = set()
        for site in sites(self.fn):
            node = small(site.stmt)
            name = assigned_name(site.stmt)
            if name is None or not isinstance(node, cst.Assign):
                continue
            if self.in_psum(node.value):
                found.add(name)
        return found

    def in_psum(self, expr: cst.BaseExpression) -> bool:
        """Whether an operand is (a piece of) a PSUM tile, as far as the source says."""
        while isinstance(expr, cst.Subscript):
            expr = expr.value
        if isinstance(expr, cst.Name):
            return expr.value in getattr(self, "psum", set())
        if isinstance(expr, cst.Call):
            name = call_name(expr) or ""
            head, _, fn = name.rpartition(".")
            if (head, fn) in ((self.nisa, "nc_matmul"), (self.nisa, "nc_transpose"), (self.nl, "matmul"),
                              (self.nl, "transpose")):
                return True
            buffer = keyword(expr, "buffer")
            return buffer is not None and (dotted(buffer.value) or "").endswith(".psum")
        return False

    # ------------------------------------------------------------------ classes of names
    def _name_kinds(self) -> dict[str, str]:
        kinds: dict[str, str] = {p.name.value: "hbm" for p in self.fn.params.params}
        for name, value in self.constants.items():
            if name and static_value(value, self.constants) is not None:
                kinds[name] = SCALAR
        for site in sites(self.fn):
            stmt = site.stmt
            if isinstance(stmt, cst.For):
                for name in names_in(stmt.target):
                    kinds[name] = SCALAR
                continue
            node = small(stmt)
            if not isinstance(node, cst.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0].target
            if isinstance(target, cst.Name):
                kind = self.kind_of(node.value, kinds)
                previous = kinds.get(target.value)
                kinds[target.value] = kind if previous in (None, kind) else OTHER
            elif isinstance(target, cst.Tuple):
                shape = isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"
                # `i_p, i_f = nl.mgrid[...]`: each name is an index grid (its arithmetic is no instruction)
                grid = not shape and self.kind_of(node.value, kinds) == INDEX
                for name in names_in(target):
                    kinds[name] = SCALAR if shape else INDEX if grid else OTHER
        return kinds

    def kind_of(self, expr: cst.BaseExpression, kinds: dict[str, str] | None = None) -> str:
        kinds = self.kinds if kinds is None else kinds
        if isinstance(expr, cst.Integer | cst.Float):
            return SCALAR
        if isinstance(expr, cst.Name):
            return kinds.get(expr.value, OTHER)
        if isinstance(expr, cst.Attribute):
            name = dotted(expr) or ""
            return SCALAR if ".tile_size." in name or expr.attr.value == "shape" else OTHER
        if isinstance(expr, cst.Subscript):
            if dotted(expr.value) == f"{self.nl}.mgrid":
                return INDEX
            base = self.kind_of(expr.value, kinds)
            if base == TILE and _column_slice(expr):
                return COLUMN
            return base if base in (TILE, COLUMN, SCALAR, INDEX) else OTHER
        if isinstance(expr, cst.UnaryOperation):
            return self.kind_of(expr.expression, kinds)
        if isinstance(expr, cst.BinaryOperation):
            return _combine([self.kind_of(expr.left, kinds), self.kind_of(expr.right, kinds)])
        if isinstance(expr, cst.Call):
            return self._call_kind(expr, kinds)
        return OTHER

    def _call_kind(self, call: cst.Call, kinds: dict[str, str]) -> str:
        name = call_name(call) or ""
        head, _, fn = name.rpartition(".")
        positional = [a.value for a in call.args if a.keyword is None]
        keepdims = keyword(call, "keepdims")
        keeps = is_true(keepdims.value if keepdims is not None else None)
        if head == self.nl:
            if fn in ("arange", "mgrid", "ds", "program_id", "num_programs"):
                return INDEX if fn != "num_programs" else SCALAR
            if fn in _TILE_MAKERS:
                return TILE
            if fn in _ALLOCATORS:
                shape = positional[0] if positional else (keyword(call, "shape").value  # type: ignore[union-attr]
                                                          if keyword(call, "shape") is not None else None)
                if isinstance(shape, cst.Tuple) and len(shape.elements) >= 2 and flat(
                        code_of(shape.elements[-1].value)) == "1":
                    return COLUMN  # [P, 1], also with block dimensions in front: (8, nl.par_dim(128), 1)
                return TILE
            if fn in _COLUMN_REDUCTIONS:
                return COLUMN if keeps else OTHER
            if fn in _UNARY | _BINARY or fn == "copy":
                return _combine([self.kind_of(a, kinds) for a in positional]) if positional else OTHER
            return OTHER
        if head == self.nisa:
            if fn == "tensor_reduce":
                return COLUMN if keeps else OTHER
            if fn in ("activation", "activation_reduce", "tensor_scalar", "tensor_copy", "scalar_tensor_tensor"):
                data = keyword(call, "data") or keyword(call, "src")
                index = 1 if fn.startswith("activation") else 0
                expr = data.value if data is not None else positional[index] if len(positional) > index else None
                return self.kind_of(expr, kinds) if expr is not None else OTHER
            if fn in ("nc_matmul", "nc_transpose", "tensor_tensor", "memset", "iota"):
                return TILE
            return OTHER
        if name in ("min", "max", "int", "float", "len", "abs") or name.startswith("math."):
            return SCALAR
        return OTHER

    # ------------------------------------------------------------------ expression trees
    def inlinable(self, block: Sequence[cst.BaseStatement], index: int) -> dict[str, tuple[cst.BaseStatement,
                                                                                         cst.BaseExpression]]:
        """Intermediates defined earlier in `block` that the statement at `index` may look through:
        bound once, used once, pure, and nothing they read is written before `index`."""
        found: dict[str, tuple[cst.BaseStatement, cst.BaseExpression]] = {}
        for j in range(index):
            name = assigned_name(block[j])
            if name is None or self.uses.get(name) != 2 or binding_count(self.fn, name) != 1:
                continue
            value = small(block[j]).value  # type: ignore[union-attr]
            if not is_pure(value):
                continue
            written: set[str] = set()
            for stmt in block[j + 1:index]:
                written |= names_written(stmt)
            if written & names_in(value):
                continue
            found[name] = (block[j], value)
        found.update(self._block_intermediates(block, index))
        return found

    def _block_intermediates(self, block: Sequence[cst.BaseStatement], index: int
                             ) -> dict[str, tuple[cst.BaseStatement, cst.BaseExpression]]:
        """Block-tensor intermediates of compiler-style code the statement at `index` may look
        through, keyed by the subscript it is read at (`v7[i0, i1, ...]`): an on-chip tensor written
        once, by a pure statement earlier in the block, and read once, at exactly the region written,
        by a later statement up to this one (the chain is followed through several of them), with
        nothing it reads written before this statement."""
        model = self.model
        reader = small(block[index])
        found: dict[str, tuple[cst.BaseStatement, cst.BaseExpression]] = {}
        if reader is None:
            return found
        for j in range(index):
            node = small(block[j])
            if not isinstance(node, cst.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0].target
            if not isinstance(target, cst.Subscript) or not isinstance(target.value, cst.Name):
                continue
            name = target.value.value
            tensor = model.tensors.get(name)
            if tensor is None or tensor.buffer == "hbm" or tensor.decl is None or not is_pure(node.value):
                continue
            uses = [(op, ref) for op, ref in model.refs(name) if op is not tensor.decl]
            if len(uses) != 2 or uses[0][0].stmt is not block[j] or uses[1][0].stmt not in block[j + 1:index + 1]:
                continue
            (_, write), (_, read) = uses
            if write.kind != "write" or read.kind != "read" or write.text != read.text:
                continue
            written: set[str] = set()
            for stmt in block[j + 1:index]:
                written |= names_written(stmt)
            if written & names_in(node.value):
                continue
            found[_subscript_key(read.node)] = (block[j], node.value)
        return found

    def tree(self, expr: cst.BaseExpression, inline: dict[str, Any], active: frozenset[str] = frozenset()) -> _Node:
        key = expr.value if isinstance(expr, cst.Name) else _subscript_key(expr) if isinstance(
            expr, cst.Subscript) else None
        if key is not None and key in inline and key not in active:
            inner = self.tree(inline[key][1], inline, active | {key})
            if inner.op is not None:
                via = expr.value if isinstance(expr, cst.Name) else key
                return replace(inner, src=expr, via=via)
        decomposed = self._decompose(expr) or self._decompose_isa(expr)
        if decomposed is None:
            value = static_value(expr, self.constants)
            if value is None:
                value = literal_number(expr)
            kind = SCALAR if value is not None else self.kind_of(expr)
            return _Node(None, [], expr, kind, value=value)
        op, args, mask, dtype = decomposed
        children = [self.tree(a, inline, active) for a in args]
        return _Node(op, children, expr, _combine([c.kind for c in children]), mask, dtype)

    def _decompose(self, expr: cst.BaseExpression) -> tuple[str, list[cst.BaseExpression], str | None,
                                                             str | None] | None:
        """(op, operands, mask text, dtype text) for an element-wise operation, else None."""
        if isinstance(expr, cst.Call):
            name = call_name(expr) or ""
            head, _, fn = name.rpartition(".")
            if head != self.nl or fn not in _UNARY | _BINARY:
                return None
            positional: list[cst.BaseExpression] = []
            mask = dtype = None
            for arg in expr.args:
                if arg.star:
                    return None
                key = arg.keyword.value if arg.keyword is not None else None
                if key is None or key in ("x", "y"):
                    positional.append(arg.value)
                elif key == "mask":
                    mask = _mask_text(arg.value)
                elif key == "dtype":
                    dtype = code_of(arg.value)
                else:
                    return None
            if len(positional) != (2 if fn in _BINARY else 1):
                return None
            return fn, positional, mask, dtype
        if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _PY_OPS:
            if self.kind_of(expr.left) == SCALAR and self.kind_of(expr.right) == SCALAR:
                return None
            return _PY_OPS[type(expr.operator)], [expr.left, expr.right], None, None
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            if self.kind_of(expr.expression) == SCALAR:
                return None
            return "negative", [expr.expression], None, None
        return None

    def _decompose_isa(self, expr: cst.BaseExpression) -> tuple[str, list[cst.BaseExpression], str | None,
                                                                 str | None] | None:
        """The same for the ISA's element-wise instructions (compiler-style code): activation with
        scale and bias, tensor_scalar with one or two ops (reverse flags honoured), reciprocal,
        tensor_tensor and scalar_tensor_tensor. The inner step of a two-step instruction becomes
        an instruction of its own (written out), so the trees look the same as for `nl.*` code."""
        if not isinstance(expr, cst.Call) or self.model.canonical(expr) is None:
            return None
        fn = (self.model.canonical(expr) or "").split(".", 1)
        if len(fn) != 2 or fn[0] != "nisa" or any(a.star for a in expr.args):
            return None
        args = _isa_args(expr, fn[1])
        if args is None or set(args) - _ISA_KEYWORDS.get(fn[1], set()):
            return None
        mask = _mask_text(args.get("mask"))
        dtype = code_of(args["dtype"]) if "dtype" in args else None
        nisa = self.nisa
        if fn[1] == "reciprocal" and "data" in args:
            return "reciprocal", [args["data"]], mask, dtype
        if fn[1] == "tensor_tensor" and {"data1", "data2", "op"} <= set(args):
            op = _alu_name(args["op"])
            return (op, [args["data1"], args["data2"]], mask, dtype) if op in _BINARY else None
        if fn[1] in ("tensor_scalar", "scalar_tensor_tensor") and {"data", "op0", "operand0"} <= set(args):
            op0 = _alu_name(args["op0"])
            first = [args["data"], args["operand0"]]
            if is_true(args.get("reverse0")):
                first.reverse()
            second_op = args.get("op1")
            if op0 not in _BINARY or (fn[1] == "scalar_tensor_tensor" and second_op is None):
                return None
            if second_op is None or (isinstance(second_op, cst.Name) and second_op.value == "None"):
                return op0, first, mask, dtype
            op1 = _alu_name(second_op)
            if op1 not in _BINARY or "operand1" not in args:
                return None
            reverse0 = ", reverse0=True" if is_true(args.get("reverse0")) else ""
            inner = cst.parse_expression(f"{nisa}.tensor_scalar(data={code_of(args['data'])}, op0={self.np}.{op0}, "
                                         f"operand0={code_of(args['operand0'])}{reverse0})")
            second = [args["operand1"], inner] if is_true(args.get("reverse1")) else [inner, args["operand1"]]
            return op1, second, mask, dtype
        if fn[1] == "activation" and {"op", "data"} <= set(args):
            func = (dotted(args["op"]) or "").rsplit(".", 1)[-1]
            bias = args.get("bias")
            if bias is not None and ((isinstance(bias, cst.Name) and bias.value == "None") or self._zero_column(bias)):
                bias = None
            scale = args.get("scale")
            if scale is not None and literal_number(scale) == 1.0:
                scale = None
            if func in ("copy", "identity"):
                if bias is not None:
                    scaled = args["data"] if scale is None else cst.parse_expression(
                        f"{nisa}.activation(op={self.nl}.copy, data={code_of(args['data'])}, scale={code_of(scale)})")
                    return "add", [scaled, bias], mask, dtype
                return ("multiply", [args["data"], scale], mask, dtype) if scale is not None else None
            if func not in _ACTIVATIONS:
                return None
            if bias is None and scale is None:
                return func, [args["data"]], mask, dtype
            parts = [f"op={self.nl}.copy", f"data={code_of(args['data'])}"]
            parts += [f"bias={code_of(bias)}"] if bias is not None else []
            parts += [f"scale={code_of(scale)}"] if scale is not None else []
            return func, [cst.parse_expression(f"{nisa}.activation({', '.join(parts)})")], mask, dtype
        return None

    def _zero_column(self, expr: cst.BaseExpression) -> bool:
        """A [P, 1] tile every element of which a memset set to 0 (compiler code's zero bias)."""
        while isinstance(expr, cst.Subscript):
            expr = expr.value
        if not isinstance(expr, cst.Name):
            return False
        writes = [op for op, ref in self.model.refs(expr.value) if ref.kind in ("write", "accumulate")]
        if len(writes) != 1 or writes[0].call != "nisa.memset":
            return False
        value = keyword(writes[0].value, "value") if isinstance(writes[0].value, cst.Call) else None
        return value is not None and literal_number(value.value) == 0.0

    # ------------------------------------------------------------------ candidates
    def fusions(self) -> list[_Fusion]:
        out: list[_Fusion] = []
        for owner in [self.fn, *(s.stmt for s in sites(self.fn) if isinstance(s.stmt, cst.BaseCompoundStatement))]:
            block = block_statements(owner)
            for index, stmt in enumerate(block):
                if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
                    continue
                inline = self.inlinable(block, index)
                out += [f for f in self._expression_fusions(stmt, inline) if self._merges_instructions(f)]
                reduce = self._reduce_fusion(block, index, inline)
                if reduce is not None:
                    out.append(reduce)
        return out

    def _merges_instructions(self, fusion: _Fusion) -> bool:
        """The fusion replaces at least two instructions of the source, or rewrites an expression
        into a cheaper instruction: one ISA instruction's own parts (the scale and bias of an
        activation, both ops of a tensor_scalar) written out again are not a fusion."""
        count = sum(1 for n in fusion.internals if n.op is not None and (n.via or n.src in self.pos))
        return count >= 2 or fusion.root is None or self._decompose_isa(fusion.root) is None

    def _expression_fusions(self, stmt: cst.SimpleStatementLine, inline: dict[str, Any]) -> list[_Fusion]:
        found: list[_Fusion] = []
        matcher = _Matcher(self)

        def visit(node: cst.CSTNode) -> None:
            if isinstance(node, cst.SubscriptElement) or (
                    isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == "mask"):
                return  # index arithmetic and masks are not tile computations
            if isinstance(node, cst.BaseExpression) and (self._decompose(node) or self._decompose_isa(node)):
                fusion = matcher.match(stmt, node, self.tree(node, inline))
                if fusion is not None:
                    found.append(fusion)
                    return
            for child in node.children:
                visit(child)

        visit(stmt.body[0])
        return found

    def _reduce_fusion(self, block: Sequence[cst.BaseStatement], index: int,
                       inline: dict[str, Any]) -> _Fusion | None:
        """`r = nl.sum(e, axis=1, keepdims=True)` after `e = <activation>` (or of an activation in
        place, and `nl.mean(nl.square(x))`): one activation_reduce on the Scalar engine."""
        stmt = block[index]
        node = small(stmt)
        result = assigned_name(stmt)
        if result is None or not isinstance(node, cst.Assign) or binding_count(self.fn, result) != 1:
            return None
        call = node.value
        name = call_name(call) or ""
        if name not in (f"{self.nl}.sum", f"{self.nl}.mean") or not isinstance(call, cst.Call):
            return None
        positional = [a for a in call.args if a.keyword is None]
        keys = {a.keyword.value for a in call.args if a.keyword is not None}
        axis = keyword(call, "axis")
        keepdims = keyword(call, "keepdims")
        if len(positional) != 1 or keys - {"axis", "keepdims"} or axis is None or keepdims is None:
            return None
        if flat(code_of(axis.value)) not in ("1", "-1", "[1]", "(1,)") or flat(code_of(keepdims.value)) != "True":
            return None
        source = positional[0].value
        mean = name.endswith(".mean")
        # the activation: the argument itself, or the statement defining the argument
        act_stmt: cst.BaseStatement | None = None
        act_expr: cst.BaseExpression = source
        if isinstance(source, cst.Name) and not mean:
            for j in range(index - 1, -1, -1):
                if assigned_name(block[j]) == source.value:
                    act_stmt = block[j]
                    break
            if act_stmt is None or binding_count(self.fn, source.value) != 1:
                return None
            act_expr = small(act_stmt).value  # type: ignore[union-attr]
            written: set[str] = set()
            for between in block[block.index(act_stmt) + 1:index]:
                written |= names_written(between)
            if written & (names_in(act_expr) | {source.value}) or self.uses.get(result, 0) < 2:
                return None
        elif isinstance(source, cst.Name) and source.value in inline:
            act_stmt = inline[source.value][0]
            act_expr = inline[source.value][1]
        parts = self._activation_parts(act_expr)
        if parts is None:
            return None
        func, data, extra = parts
        if mean and func != f"{self.nl}.square":
            return None
        if not isinstance(data, cst.Name | cst.Subscript) or not is_pure(data):
            return None
        data_text = code_of(data)
        dtype = next((v for k, v in extra if k == "dtype"), f"{data_text}.dtype")
        if mean:
            if any(k == "scale" for k, _ in extra):
                return None
            extra = [*extra, ("scale", f"{data_text}.shape[1] ** -0.5")]
        args = ", ".join([f"op={func}", f"data={data_text}", f"reduce_op={self.nl}.add", f"reduce_res={result}",
                          *(f"{k}={v}" for k, v in extra)])
        alloc = f"{result} = {self.nl}.ndarray(({data_text}.shape[0], 1), dtype={dtype}, buffer={self.nl}.sbuf)"
        if act_stmt is not None and isinstance(source, cst.Name) and source.value not in inline:
            # keep the activation's output (it is used elsewhere) and drop the separate reduction
            text = f"{self.nisa}.activation_reduce({args})"
            newly = (call_name(act_expr) or "").startswith(f"{self.nl}.") and isinstance(act_expr, cst.Call) and \
                not isinstance(act_expr.args[0].value, cst.Name | cst.Subscript)
            folded = [f"{k} {v}" for k, v in extra if k in ("bias", "scale")]
            also = f" with the {' and '.join(folded)} folded in" if folded and newly else ""
            fusion = _Fusion("activation_reduce", act_stmt, small(act_stmt).value, text, [],  # type: ignore[union-attr]
                             1.0, f"fold the row {('mean' if mean else 'sum')} `{result}` of `{source.value}` into "
                             f"its activation{also} (nisa.activation_reduce: the Scalar engine sums while it writes)",
                             extra=[alloc], remove=[stmt])
            return fusion
        # the reduction consumes the activation directly: its element-wise output is not needed
        dead = f"{result}_act"
        text = f"{self.nisa}.activation_reduce({args})"
        internals = []
        if act_stmt is not None:
            internals = [replace(self.tree(act_expr, {}), via=source.value if isinstance(source, cst.Name) else None)]
        what = "mean of squares" if mean else "sum"
        return _Fusion("activation_reduce", stmt, None, f"{dead} = {text}", internals, 1.0,
                       f"compute the row {what} `{result}` inside the activation (nisa.activation_reduce) "
                       "instead of a separate Vector-engine reduction", dead=[act_stmt] if act_stmt else [],
                       extra=[alloc])

    def _activation_parts(self, expr: cst.BaseExpression) -> tuple[str, cst.BaseExpression,
                                                                     list[tuple[str, str]]] | None:
        """(op text, data, [(keyword, text)...]) of `nl.f(x)` or `nisa.activation(...)`, else None."""
        if not isinstance(expr, cst.Call):
            return None
        name = call_name(expr) or ""
        head, _, fn = name.rpartition(".")
        if head == self.nl and fn in _ACTIVATIONS:
            positional = [a.value for a in expr.args if a.keyword is None]
            keys = {a.keyword.value: code_of(a.value) for a in expr.args if a.keyword is not None}
            if len(positional) != 1 or set(keys) - {"dtype"}:
                return None
            if isinstance(positional[0], cst.Name | cst.Subscript):
                return name, positional[0], list(keys.items())
            affine = _Matcher(self)._affine(self.tree(positional[0], {}))  # f(x * a + b): scale and bias too
            if affine is None or any(n.mask is not None or n.dtype is not None for n in affine[3]):
                return None
            x, scale, bias, _ = affine
            extra = [(k, v) for k, v in (("bias", bias), ("scale", scale)) if v is not None]
            return name, x.src, [*extra, *keys.items()]
        if head == self.nisa and fn == "activation":
            values: dict[str, cst.BaseExpression] = {}
            order = ["op", "data", "bias", "scale"]
            for i, arg in enumerate(expr.args):
                key = arg.keyword.value if arg.keyword is not None else (order[i] if i < len(order) else None)
                if key is None or arg.star:
                    return None
                values[key] = arg.value
            if set(values) - {"op", "data", "bias", "scale", "dtype"} or "op" not in values or "data" not in values:
                return None
            extra = [(k, code_of(v)) for k, v in values.items() if k not in ("op", "data")]
            return code_of(values["op"]), values["data"], extra
        return None


_ISA_POSITIONAL = {
    "activation": ("op", "data", "bias", "scale"),
    "tensor_scalar": ("data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1"),
    "scalar_tensor_tensor": ("data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1"),
    "reciprocal": ("data",),
    "tensor_tensor": ("data1", "data2", "op"),
}
_ISA_KEYWORDS = {name: {*order, "mask", "dtype", "engine"} for name, order in _ISA_POSITIONAL.items()}


def _isa_args(call: cst.Call, fn: str) -> dict[str, cst.BaseExpression] | None:
    """The arguments of an ISA call by parameter name (positional ones placed by the signature)."""
    order = _ISA_POSITIONAL.get(fn)
    if order is None:
        return None
    out: dict[str, cst.BaseExpression] = {}
    for i, arg in enumerate(call.args):
        key = arg.keyword.value if arg.keyword is not None else (order[i] if i < len(order) else None)
        if key is None or key in out:
            return None
        out[key] = arg.value
    return out


def _alu_name(expr: cst.BaseExpression) -> str:
    """`multiply` for `nl.multiply`, `np.multiply`, `numpy.multiply`."""
    return (dotted(expr) or "").rsplit(".", 1)[-1]


def _mask_text(expr: cst.BaseExpression | None) -> str | None:
    """The mask as text, None for no mask (absent or `mask=None`)."""
    if expr is None or (isinstance(expr, cst.Name) and expr.value == "None"):
        return None
    return code_of(expr)


def _subscript_key(expr: cst.BaseExpression) -> str | None:
    """`v7[i0,i1,...]` without spaces: how a block-tensor intermediate is recognised where it is read."""
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name):
        return flat(code_of(expr))
    return None


def literal_number(expr: cst.BaseExpression) -> float | None:
    """The number a literal operand is, also as compiler output writes it:
    `np.dtype(np.float32).type(1e-05)`, `np.float32(0.5)`, `-1.0`."""
    if isinstance(expr, cst.Integer | cst.Float):
        return float(expr.evaluated_value)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = literal_number(expr.expression)
        return -inner if inner is not None else None
    if isinstance(expr, cst.Call) and len(expr.args) == 1 and expr.args[0].keyword is None:
        func = expr.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(
            func, cst.Name) else ""
        if name == "type" or name in ("float32", "float16", "bfloat16", "float", "float64", "int32", "uint16"):
            return literal_number(expr.args[0].value)
    return None


def _column_slice(sub: cst.Subscript) -> bool:
    """`t[..., s:s+1]` or `t[..., 0:1]`: a [P, 1] piece of a tile."""
    last = sub.slice[-1].slice
    if len(sub.slice) < 2 or not isinstance(last, cst.Slice) or last.upper is None:
        return False
    lower = flat(code_of(last.lower)) if last.lower is not None else "0"
    upper = flat(code_of(last.upper))
    return upper in (f"{lower}+1", f"1+{lower}") or (lower == "0" and upper == "1")


class _Matcher:
    """The fusion patterns, tried at one expression, best first."""

    def __init__(self, analysis: KernelAnalysis):
        self.a = analysis
        self.nl, self.nisa, self.np = analysis.nl, analysis.nisa, analysis.np

    def match(self, stmt: cst.SimpleStatementLine, src: cst.BaseExpression, root: _Node) -> _Fusion | None:
        for pattern in (self._silu, self._sigmoid, self._rsqrt, self._square, self._activation,
                        self._scalar_tensor_tensor, self._tensor_scalar, self._reciprocal_divide):
            found = pattern(root)
            if found is None:
                continue
            name, text, internals, description = found
            if not self._consistent(root, internals):
                continue
            saved = sum(n.units for n in internals) - 1.0
            if name == "scalar_tensor_tensor":
                saved = 1.0  # a tensor_scalar pass disappears; the tensor-tensor pass stays
            if name == "reciprocal_divide":
                saved = 0.0
            return _Fusion(name, stmt, src, text, internals, saved, description)
        return None

    @staticmethod
    def _consistent(root: _Node, internals: list[_Node]) -> bool:
        """Inner operations carry no dtype of their own and the same mask as the root."""
        def same_mask(a: str | None, b: str | None) -> bool:
            return (a is None and b is None) or (a is not None and b is not None and flat(a) == flat(b))

        def same_type(n: _Node) -> bool:  # no rounding to another type on the way
            return n is root or n.dtype is None or (root.dtype is not None and flat(n.dtype) == flat(root.dtype))

        return all(same_mask(n.mask, root.mask) and same_type(n) for n in internals)

    def _tail(self, root: _Node) -> str:
        parts = []
        if root.mask is not None:
            parts.append(f", mask={root.mask}")
        if root.dtype is not None:
            parts.append(f", dtype={root.dtype}")
        return "".join(parts)

    # --- building blocks
    @staticmethod
    def _negated(n: _Node) -> tuple[_Node, list[_Node]] | None:
        if n.op == "negative" and _data(n.args[0]):
            return n.args[0], [n]
        if n.op == "multiply":
            for x, c, _ in _pairs(n.args):
                if _const(c, -1.0) and _data(x):
                    return x, [n]
        if n.op == "subtract" and _const(n.args[0], 0.0) and _data(n.args[1]):
            return n.args[1], [n]
        return None

    def _one_plus_exp_neg(self, d: _Node) -> tuple[_Node, list[_Node]] | None:
        """`1 + exp(-x)` in any operand order: (x, nodes)."""
        if d.op != "add":
            return None
        for one, e, _ in _pairs(d.args):
            if _const(one, 1.0) and e.op == "exp":
                neg = self._negated(e.args[0])
                if neg is not None:
                    return neg[0], [d, e, *neg[1]]
        return None

    def _one_over(self, n: _Node) -> tuple[_Node, list[_Node]] | None:
        """`1 / d` or `reciprocal(d)`: (d, nodes)."""
        if n.op == "divide" and _const(n.args[0], 1.0):
            return n.args[1], [n]
        if n.op == "reciprocal":
            return n.args[0], [n]
        return None

    @staticmethod
    def _step(n: _Node) -> tuple[_Node, str, _Node, bool] | None:
        """`x op c` with c a scalar or a column: (x, op, c, reversed)."""
        if n.op == "negative" and _data(n.args[0]):
            return n.args[0], "multiply", _Node(None, [], cst.parse_expression("-1.0"), SCALAR, value=-1.0), False
        if n.op == "reciprocal" and _data(n.args[0]):
            return n.args[0], "divide", _Node(None, [], cst.Float("1.0"), SCALAR, value=1.0), True
        if n.op in _BINARY:
            for x, c, swapped in _pairs(n.args):
                if _data(x) and _operand(c):
                    return x, n.op, c, swapped and n.op not in _COMMUTATIVE
        return None

    # --- patterns: (name, replacement text, internal nodes, description) or None
    def _silu(self, r: _Node) -> tuple[str, str, list[_Node], str] | None:
        if r.op == "divide":
            found = self._one_plus_exp_neg(r.args[1])
            if found and _same(found[0], r.args[0]) and _data(r.args[0]):
                return self._known("silu", found[0], [r, *found[1]], r, "x / (1 + exp(-x))")
        if r.op == "multiply":
            for x, other, _ in _pairs(r.args):
                if other.op == "sigmoid" and _same(other.args[0], x) and _data(x):
                    return self._known("silu", x, [r, other], r, "x * sigmoid(x)")
                inverse = self._one_over(other)
                if inverse is not None:
                    found = self._one_plus_exp_neg(inverse[0])
                    if found and _same(found[0], x) and _data(x):
                        return self._known("silu", x, [r, *inverse[1], *found[1]], r, "x * 1 / (1 + exp(-x))")
        return None

    def _sigmoid(self, r: _Node) -> tuple[str, str, list[_Node], str] | None:
        inverse = self._one_over(r)
        if inverse is not None:
            found = self._one_plus_exp_neg(inverse[0])
            if found and _data(found[0]):
                return self._known("sigmoid", found[0], [*inverse[1], *found[1]], r, "1 / (1 + exp(-x))")
        return None

    def _rsqrt(self, r: _Node) -> tuple[str, str, list[_Node], str] | None:
        inverse = self._one_over(r)
        if inverse is not None and inverse[0].op == "sqrt":
            return self._known("rsqrt", inverse[0].args[0], [*inverse[1], inverse[0]], r, "1 / sqrt(x)")
        return None

    def _square(self, r: _Node) -> tuple[str, str, list[_Node], str] | None:
        if r.op == "multiply" and _same(r.args[0], r.args[1]) and _data(r.args[0]) and r.args[0].op is None:
            return self._known("square", r.args[0], [r], r, "x * x")
        return None

    def _known(self, func: str, x: _Node, internals: list[_Node], root: _Node,
               written: str) -> tuple[str, str, list[_Node], str]:
        """The activation that computes `root`, and what the plan says: it quotes the kernel's own code
        (`mean * mean`), and names the formula in the kernel's names where x is one (mean * mean)."""
        text = f"{self.nl}.{func}({x.text}{self._tail(root)})"
        formula = re.sub(r"\bx\b", x.text, written) if x.text.isidentifier() else written
        code = _quoted(root.text)
        said = f"`{code}`" if code == formula else f"`{code}` ({formula})"
        return func, text, internals, f"replace {said} by the single activation {self.nl}.{func}"

    def _scaled(self, n: _Node) -> tuple[_Node, str | None, list[_Node]] | None:
        """`x * a`, `-x` or `x / c` with a scalar or a column a and a scalar c: (x, scale, nodes)."""
        negated = self._negated(n)
        if negated is not None:
            return negated[0], "-1.0", negated[1]
        if n.op == "multiply":
            for x, a, _ in _pairs(n.args):
                if _data(x) and _operand(a):
                    return x, a.text, [n]
        if n.op == "divide" and _data(n.args[0]) and n.args[1].kind == SCALAR:
            c = n.args[1]
            scale = repr(1.0 / c.value) if c.value else f"1.0 / ({c.text})"
            return n.args[0], scale, [n]
        return None

    def _affine(self, n: _Node) -> tuple[_Node, str | None, str | None, list[_Node]] | None:
        """`x * a + b` and its relatives with b a column: (x, scale, bias, nodes)."""
        if n.op == "add":
            for m, b, _ in _pairs(n.args):
                if b.kind == COLUMN and _data(m):
                    inner = self._scaled(m) or (m, None, [])
                    return inner[0], inner[1], b.text, [n, *inner[2]]
        if n.op == "subtract":
            m, b = n.args
            if b.kind == COLUMN and _data(m):
                inner = self._scaled(m) or (m, None, [])
                return inner[0], inner[1], f"{self.nl}.negative({b.text})", [n, *inner[2]]
            if m.kind == COLUMN and _data(b):
                inner = self._scaled(b) or (b, None, [])
                if inner[1] is None:
                    scale = "-1.0"
                else:
                    value = static_value(cst.parse_expression(inner[1]), self.a.constants)
                    if value is None:
                        return None
                    scale = repr(-value)
                return inner[0], scale, m.text, [n, *inner[2]]
        scaled = self._scaled(n)
        if scaled is not None:
            return scaled[0], scaled[1], None, scaled[2]
        return None

    def _activation(self, r: _Node) -> tuple[str, str, list[_Node], str] | None:
        if r.op not in _ACTIVATIONS:
            return None
        affine = self._affine(r.args[0])
        if affine is None:
            return None
        x, scale, bias, nodes = affine
        parts = [f"op={self.nl}.{r.op}", f"data={x.text}"]
        if bias is not None:
            parts.append(f"bias={bias}")
        if scale is not None:
            parts.append(f"scale={scale}")
        text = f"{self.nisa}.activation({', '.join(parts)}{self._tail(r)})"
        folded = " and ".join(p for p in (f"scale {scale}" if scale else "", f"bias {bias}" if bias else "") if p)
        return ("activation", text, [r, *nodes],
                f"fold the {folded} into the {r.op} (one Scalar-engine activation instead of {len(nodes) + 1} "
                "instructions)")

    def _two_ops(self, data: _Node, *steps: tuple[str, _Node, bool]) -> str:
        """The arguments of tensor_scalar and scalar_tensor_tensor: the data, then each step's op, operand and
        (when the operand comes first) `reverseN=True`."""
        parts = [f"data={data.text}"]
        for index, (op, operand, reverse) in enumerate(steps):
            parts += [f"op{index}={self.np}.{op}", f"operand{index}={operand.text}"]
            parts += [f"reverse{index}=True"] if reverse else []
        return ", ".join(parts)

    def _tensor_scalar(self, r: _Node) -> tuple[str, str, list[_Node], str] | None:
        outer = self._step(r)
        if outer is None:
            return None
        inner_node = outer[0]
        inner = self._step(inner_node)
        if inner is None or inner_node.op is None:
            return None
        x, op0, a, rev0 = inner
        _, op1, b, rev1 = outer
        text = f"{self.nisa}.tensor_scalar({self._two_ops(x, (op0, a, rev0), (op1, b, rev1))}{self._tail(r)})"
        return ("tensor_scalar", text, [r, inner_node],
                f"merge the {op0} by {a.text} and the {op1} by {b.text} into one nisa.tensor_scalar")

    def _scalar_tensor_tensor(self, r: _Node) -> tuple[str, str, list[_Node], str] | None:
        if r.op not in _BINARY:
            return None
        for side, other, swapped in _pairs(r.args) if all(_data(a) for a in r.args) else ():
            step = self._step(side)
            if step is None or side.op is None or other.kind != TILE or not _data(step[0]):
                continue
            x, op0, a, rev0 = step
            rev1 = swapped and r.op not in _COMMUTATIVE
            return self._stt(r, x, op0, a, rev0, r.op, other, rev1, [r, side])
        # (x * y) * c, (x / y) * c, (x * y) / c, (x / y) / c: reassociated as (x op c) op' y
        step = self._step(r)
        if step is not None and r.op in ("multiply", "divide") and not step[3]:
            inner, _, c, _ = step
            if inner.op in ("multiply", "divide") and all(_data(a) for a in inner.args):
                x, y = inner.args
                if y.kind == TILE and _data(x):
                    return self._stt(r, x, r.op, c, False, inner.op, y, False, [r, inner])
        return None

    def _stt(self, r: _Node, x: _Node, op0: str, a: _Node, rev0: bool, op1: str, y: _Node, rev1: bool,
             internals: list[_Node]) -> tuple[str, str, list[_Node], str]:
        text = f"{self.nisa}.scalar_tensor_tensor({self._two_ops(x, (op0, a, rev0), (op1, y, rev1))}{self._tail(r)})"
        return ("scalar_tensor_tensor", text, internals,
                f"do the {op0} by {a.text} inside the {op1} with {y.text} (one nisa.scalar_tensor_tensor "
                "instead of a tensor_scalar and a tensor_tensor)")

    def _reciprocal_divide(self, r: _Node) -> tuple[str, str, list[_Node], str] | None:
        if r.op != "divide" or not _data(r.args[0]):
            return None
        b = r.args[1]
        if b.kind != COLUMN or not isinstance(b.src, cst.Name) or self.a.uses.get(b.src.value) != 2:
            return None
        text = f"{self.nl}.multiply({r.args[0].text}, {self.nl}.reciprocal({b.text}){self._tail(r)})"
        return ("reciprocal_divide", text, [r],
                f"divide by the column {b.text} as a multiply by its reciprocal (a tensor_scalar multiply; "
                "no gain where the divide is already a tensor_scalar, as in the simulator's cost model)")


class FuseElementwise(ModelRule):
    """Fuse chains of element-wise instructions into one engine instruction (activation with scale and bias,
    silu/sigmoid/rsqrt/square, tensor_scalar with two ops, scalar_tensor_tensor, activation_reduce): each
    instruction costs a pass over the tile plus fixed overhead."""

    name = "fuse_elementwise"

    def plans(self, model: KernelModel) -> list[Plan]:
        analysis = KernelAnalysis(model)
        engines = model.line_engines
        latency = model.latency or 0.0
        bottleneck = getattr(model.profile, "bottleneck", None)
        plans: list[Plan] = []
        for fusion in analysis.fusions():
            line = line_of(fusion.stmt, analysis.pos)
            priority = self._priority(analysis, fusion, engines, latency, bottleneck)
            what = f" (looking through {', '.join(_shown(c) for c in fusion.consumed)})" if fusion.consumed else ""
            plans.append(Plan(self.name, line, f"line {line}: {fusion.description}{what}", fusion.params(),
                              priority))
        plans.sort(key=lambda p: -p.priority)
        gaining = [p for p in plans if p.params.get("pattern") != "reciprocal_divide"]
        if len({p.line for p in gaining}) >= 2:
            lines = sorted({p.line for p in gaining})
            total = min(1.0, sum(p.priority for p in gaining))
            plans.insert(0, Plan(self.name, lines[0], f"fuse every element-wise chain of the kernel ({len(gaining)} "
                                 f"fusions found, lines {', '.join(map(str, lines))}), one after another",
                                 {"pattern": "all", "statements": sorted({p.params["statement"] for p in gaining})},
                                 total + 1e-6))
        return plans

    @staticmethod
    def _priority(analysis: KernelAnalysis, fusion: _Fusion, engines: dict[int, dict[str, float]], latency: float,
                  bottleneck: str | None) -> float:
        """Share of kernel time the fusion may save: per engine, the time its lines spend there times
        the share of that engine's passes the rewrite removes (or adds); the bottleneck engine counts
        fully, the others at 30% (a small constant without a profile)."""
        before = [fusion.stmt, *fusion.remove, *(s for s in _defining(analysis, fusion) if s is not fusion.stmt)]
        if fusion.root is not None:
            after: list[cst.CSTNode] = [replace_nodes(fusion.stmt, {id(fusion.root): cst.parse_expression(
                fusion.text)})]
        else:
            after = [cst.parse_statement(fusion.text + "\n")]
        after += [cst.parse_statement(text + "\n") for text in fusion.extra]
        old = _engine_units(analysis, before)
        new = _engine_units(analysis, after)
        if not engines or latency <= 0:
            return 0.01 * max(0.0, sum(old.values()) - sum(new.values()))
        lines = {line_of(s, analysis.pos) for s in before}
        saved = 0.0
        for engine, units in old.items():
            if units <= 0:
                continue
            time = sum(engines.get(line, {}).get(engine, 0.0) for line in lines)
            weight = 1.0 if bottleneck in (None, engine) or bottleneck not in ("vector", "scalar") else 0.3
            saved += weight * time * (units - new.get(engine, 0.0)) / units
        return max(0.0, min(1.0, saved / latency))

    def rewrite(self, source: str, plan: Plan) -> str:
        if plan.params.get("pattern") == "all":
            return self._apply_all(source, plan.params.get("statements") or [])
        module = parse(source)
        analysis = KernelAnalysis(model_of(module))
        wanted = plan.params
        matches = [f for f in analysis.fusions() if f.params() == wanted]
        stmt = locate([f.stmt for f in matches], analysis.pos, plan.line, f"the {wanted.get('pattern')} fusion")
        fusion = next(f for f in matches if f.stmt is stmt)
        return _checked(_written(analysis, fusion))

    @staticmethod
    def _apply_all(source: str, statements: Sequence[str]) -> str:
        """Every fusion, the one saving most first, each found again on the kernel the previous ones
        left (a fusion can expose the next), until none is left; RuleError when a fusion the plan
        was made from is no longer in the source."""
        present = {f.params()["statement"] for f in KernelAnalysis(model_of(source)).fusions()}
        if not set(statements) <= present:
            raise RuleError("the element-wise chains the plan would fuse are no longer in the kernel")
        code = source
        for _ in range(_MAX_FUSIONS):
            analysis = KernelAnalysis(model_of(code))
            found = [f for f in analysis.fusions() if f.pattern != "reciprocal_divide"]
            if not found:
                break
            best = min(found, key=lambda f: (-f.saved, line_of(f.stmt, analysis.pos)))
            code = _written(analysis, best).code
        if code == source:
            raise RuleError("no element-wise chain to fuse any more")
        return _checked(code)


_MAX_FUSIONS = 64  # a bound on the composite rewrite's steps (each removes at least one instruction)


def _shown(consumed: str) -> str:
    """An intermediate as the plan names it: `v7` for a block-tensor region `v7[i0, ...]`."""
    return consumed.split("[", 1)[0]


def _written(analysis: KernelAnalysis, fusion: _Fusion) -> cst.Module:
    """The module with one fusion done, the imports it needs, and no tensor left that nothing reads."""
    module = drop_dead_tensors(_rewrite(analysis, fusion))
    if "scalar_tensor_tensor" in fusion.text or "tensor_scalar" in fusion.text:
        module, _ = ensure_import(module, "numpy", analysis.np)
    if f"{analysis.nisa}." in fusion.text:
        module, _ = ensure_import(module, "neuronxcc.nki.isa", analysis.nisa)
    return module


def _checked(module: cst.Module | str) -> str:
    return compiled_code(module, "fuse_elementwise", "fusion")


def drop_dead_tensors(module: cst.Module) -> cst.Module:
    """`module` without the on-chip tensors nothing reads any more (a zero bias a fusion no longer
    needs, an intermediate left behind): their declaration and the statements that only write
    them go, repeatedly, since removing one can leave another unread."""
    for _ in range(_MAX_FUSIONS):
        model = model_of(module)
        edits: dict[int, list[cst.BaseStatement]] = {}
        for name, tensor in model.tensors.items():
            if tensor.decl is None or tensor.buffer == "hbm":
                continue
            uses = [(op, ref) for op, ref in model.refs(name) if op is not tensor.decl]
            if any(ref.kind in ("read", "accumulate") for _, ref in uses):
                continue
            writers = {id(op.stmt): op for op, _ in uses}
            if any({r.name for r in op.writes} - {name} or not _side_effect_free(op) for op in writers.values()):
                continue
            edits[id(tensor.decl.stmt)] = []
            edits.update({key: [] for key in writers})
        if not edits:
            return module
        module = edit_statements(module, edits)
    return module


def _side_effect_free(op: Any) -> bool:
    """A statement whose only effect is the value it writes (a memset counts: it just fills)."""
    value = op.value
    return op.call == "nisa.memset" or (value is not None and is_pure(value))


def _defining(analysis: KernelAnalysis, fusion: _Fusion) -> list[cst.BaseStatement]:
    """The statements of the intermediates a fusion looks through."""
    consumed = set(fusion.consumed)
    out = list(fusion.dead)
    for site in sites(analysis.fn):
        if (assigned_name(site.stmt) in consumed or _written_subscript(site.stmt) in consumed) and site.stmt not in out:
            out.append(site.stmt)
    for key in consumed:  # a block-tensor intermediate's declaration goes with its only write
        tensor = analysis.model.tensors.get(key.split("[", 1)[0]) if "[" in key else None
        if tensor is not None and tensor.decl is not None and tensor.decl.stmt not in out:
            out.append(tensor.decl.stmt)
    return out


def _written_subscript(stmt: cst.CSTNode) -> str | None:
    """`v7[i0,...]` for a line `v7[i0, ...] = value` (the key of a block-tensor intermediate)."""
    node = small(stmt)
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        return _subscript_key(node.targets[0].target)
    return None


# full-tile passes of the element-wise ISA calls (a tensor-tensor op reads two tiles), on their declared engines
_ISA_PASSES = {fn: (source_engines()[f"nisa.{fn}"], units) for fn, units in (
    ("activation", 1.0), ("activation_reduce", 1.0), ("tensor_scalar", 1.0), ("scalar_tensor_tensor", 2.0),
    ("tensor_tensor", 2.0), ("tensor_reduce", 1.0), ("tensor_copy", 1.0))}


def _engine_units(analysis: KernelAnalysis, stmts: Sequence[cst.CSTNode]) -> dict[str, float]:
    """Engine passes over full tiles of the statements' own instructions, per engine (a
    tensor-tensor op reads two tiles; work on [P, 1] columns is nearly free)."""
    total = {"vector": 0.0, "scalar": 0.0}

    def visit(node: cst.CSTNode) -> None:
        if isinstance(node, cst.BaseExpression):
            decomposed = analysis._decompose(node)
            name = call_name(node) or ""
            head, _, fn = name.rpartition(".")
            if decomposed is not None:
                tree = analysis.tree(node, {})
                engine = "scalar" if tree.op in _ACTIVATIONS else "vector"
                total[engine] += tree.units * (0.05 if tree.kind == COLUMN else 1.0)
            elif head == analysis.nisa and fn in _ISA_PASSES:
                engine, units = _ISA_PASSES[fn]
                total[engine] += units
            elif head == analysis.nl and fn in _COLUMN_REDUCTIONS:
                total["vector"] += 1.0
        for child in node.children:
            visit(child)

    for stmt in stmts:
        visit(stmt)
    return total


def _rewrite(analysis: KernelAnalysis, fusion: _Fusion) -> cst.Module:
    """The module with the fusion written: the root replaced (or the statement rewritten), the
    intermediates it consumed deleted, and any allocation it needs inserted before it."""
    stmt = fusion.stmt
    if fusion.root is not None:
        new_stmt = replace_nodes(stmt, {id(fusion.root): cst.parse_expression(fusion.text)})
    else:
        new_stmt = cst.parse_statement(fusion.text + "\n").with_changes(leading_lines=stmt.leading_lines,
                                                                        trailing_whitespace=stmt.trailing_whitespace)
    extra = [cst.parse_statement(text + "\n") for text in fusion.extra]
    if extra:
        extra[0] = extra[0].with_changes(leading_lines=new_stmt.leading_lines)
        new_stmt = new_stmt.with_changes(leading_lines=[])
    edits: dict[int, list[cst.BaseStatement]] = {id(stmt): [*extra, new_stmt]}
    for dead in _defining(analysis, fusion):
        if dead is not stmt:
            edits[id(dead)] = []
    for removed in fusion.remove:
        edits[id(removed)] = []
    return edit_statements(analysis.module, edits)
