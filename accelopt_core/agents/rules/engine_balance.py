"""balance_engines: move work off the busiest of the Vector, Scalar and GpSimd engines.

The three engines run concurrently and each reads and writes SBUF (fact sheet A.5), and several
instructions can run on more than one of them: a copy (`tensor_copy`), a multiply by a scalar or a
[P, 1] column (an activation `copy` with `scale` on the Scalar engine), add/subtract/multiply of
two tiles (`tensor_tensor` on GpSimd), tensor_scalar (Vector, GpSimd, and from NC-v3 the Scalar
engine, B.7). When the profile says one engine is the bottleneck while another idles, such
instructions move to the idle one (perf guide Opt #3: the attention kernel puts the scaling on the
Scalar engine); the same holds when the Tensor engine or DMA is the bottleneck but one of the three is
nearly as busy, since then they wait on each other. Candidates come from the lines the profile charges
to the busy engine, largest first; each plan moves one instruction.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import libcst as cst

from accelopt_core.hardware import load_hardware

from .analysis import KernelModel, ModelRule, model_of
from .base import Plan, RuleError
from .cst_util import (
    accesses,
    call_name,
    code_of,
    compiled_code,
    edit_statements,
    ensure_import,
    flat,
    keyword,
    latency_ms,
    line_engine_times,
    line_of,
    locate,
    parse,
    replace_nodes,
    sites,
)
from .fuse_elementwise import COLUMN, SCALAR, KernelAnalysis

_ENGINES = ("vector", "scalar", "gpsimd")
# A target engine counts as idle when it is busy less than this share of the bottleneck's time.
_IDLE_SHARE = 0.6
# A compute engine behind a Tensor or DMA bottleneck is worth unloading when at least this busy (share).
_RUNNER_UP_SHARE = 0.75
# Ops GpSimd runs for floating-point data (fact sheet B.7: add and multiply; the simulator refuses others).
_GPSIMD_OPS = frozenset({"add", "multiply"})


@dataclass
class _Move:
    """One instruction (the expression `node` of `stmt`) rewritten to run on `target`."""

    stmt: cst.SimpleStatementLine
    node: cst.BaseExpression
    occurrence: int  # which of the identical expressions of the statement (source order)
    source: str  # the engine it runs on now
    target: str
    text: str
    share: float  # share of the statement's work on `source` that moves
    description: str

    def params(self) -> dict[str, Any]:
        return {"statement": flat(code_of(self.stmt)), "expr": flat(code_of(self.node)),
                "occurrence": self.occurrence, "target": self.target}


class BalanceEngines(ModelRule):
    """Move instructions that can run on several engines (copies, multiplies by a scalar or column, tensor_scalar,
    add/multiply of tiles) from the bottleneck among Vector/Scalar/GpSimd to an idle one, so the engines overlap
    instead of queueing on one."""

    name = "balance_engines"

    def plans(self, model: KernelModel) -> list[Plan]:
        analysis, profile = KernelAnalysis(model), model.profile
        hardware = getattr(profile, "hardware", "trn1") or "trn1"
        plans = self._decoupling(analysis, profile, hardware)
        busy = _busy(profile)
        bottleneck = _busiest_compute_engine(profile, busy)
        idle = [e for e in _ENGINES if bottleneck and e != bottleneck
                and busy.get(e, 0.0) < _IDLE_SHARE * busy[bottleneck] and not _share_a_port(hardware, e, bottleneck)]
        if bottleneck is None or not idle:
            return plans
        lines = model.line_engines
        latency = model.latency or 0.0
        for move in _moves(analysis, bottleneck, idle, hardware):
            line = line_of(move.stmt, analysis.pos)
            moved = lines.get(line, {}).get(bottleneck, 0.0) * move.share
            if moved <= 0.0:
                continue
            gap = (busy[bottleneck] - busy.get(move.target, 0.0)) * 1e3 / 2  # ms the two engines can even out
            priority = min(moved, gap) / latency if latency else 0.0
            plans.append(Plan(self.name, line, f"line {line}: {move.description} ({bottleneck} is the busiest, "
                              f"{move.target} is {100 * busy.get(move.target, 0.0) / busy[bottleneck]:.0f}% as busy)",
                              {**move.params(), "hardware": hardware}, max(0.0, min(1.0, priority))))
        plans.sort(key=lambda p: -p.priority)
        return plans

    def _decoupling(self, analysis: KernelAnalysis, profile: Any, hardware: str) -> list[Plan]:
        """Move the read-out of matmul results off the engine that also prepares the Tensor engine's
        operands: each engine runs its instructions in order, so on one engine the next tile's
        operand preparation waits behind this tile's read-out, which waits for the matmuls, and the
        Tensor engine idles in between (the kernel takes longer than its busiest engine)."""
        line_times = line_engine_times(profile)
        # a read-out the compiler places (nl.copy) already runs where it finishes first: only those the
        # profile shows on the engine they leave are moves
        drains = [m for m in _psum_drains(analysis, hardware)
                  if line_times.get(line_of(m.stmt, analysis.pos), {}).get(m.source, 0.0) > 0.0]
        if not drains or not _feeds_tensor_engine(analysis, drains[0].source):
            return []
        busy, latency = _busy(profile), latency_ms(profile) or 0.0
        stall = max(0.0, latency - 1e3 * max(busy.values(), default=0.0)) if latency else 0.0
        priority = min(0.5, 0.5 * stall / latency) if latency else 0.01
        lines = sorted({line_of(m.stmt, analysis.pos) for m in drains})
        return [Plan(self.name, lines[0], f"move the read-out of matmul results from PSUM (line(s) "
                     f"{', '.join(map(str, lines))}) from the {drains[0].source} engine, which also prepares the "
                     f"Tensor engine's operands, to the {drains[0].target} engine: the next tile's operands no "
                     f"longer wait behind this tile's read-out in one engine's queue",
                     {"decouple": [flat(code_of(m.stmt)) for m in drains], "target": drains[0].target,
                      "hardware": hardware}, priority)]

    def rewrite(self, source: str, plan: Plan) -> str:
        module = parse(source)
        analysis = KernelAnalysis(model_of(module))
        hardware = str(plan.params.get("hardware", "trn1"))
        if plan.params.get("decouple"):
            moves = [m for m in _psum_drains(analysis, hardware) if flat(code_of(m.stmt)) in plan.params["decouple"]]
            if len(moves) != len(plan.params["decouple"]):
                raise RuleError("the read-outs to move are no longer in the kernel")
        else:
            target = plan.params.get("target")
            wanted = {k: v for k, v in plan.params.items() if k != "hardware"}
            matches = [m for m in _moves(analysis, None, [str(target)], hardware) if m.params() == wanted]
            stmt = locate([m.stmt for m in matches], analysis.pos, plan.line, "the instruction to move")
            moves = [next(m for m in matches if m.stmt is stmt)]
        module = edit_statements(module, {id(m.stmt): [replace_nodes(m.stmt, {id(m.node): cst.parse_expression(
            m.text)})] for m in moves})
        module, _ = ensure_import(module, "neuronxcc.nki.isa", analysis.nisa)
        if any(f"{analysis.np}." in m.text for m in moves):
            module, _ = ensure_import(module, "numpy", analysis.np)
        return compiled_code(module, "balance_engines", "move")


def _psum_drains(analysis: KernelAnalysis, hardware: str) -> list[_Move]:
    """Copies of matmul results out of PSUM into SBUF on the Vector engine, as moves to the Scalar
    engine (GpSimd cannot read PSUM); not the copies that stage a transpose for the next matmul
    (they prepare operands, the other side of the coupling)."""
    operands = _tensor_operands(analysis)
    found = []
    for move in _moves(analysis, "vector", ["scalar"], hardware):
        name = call_name(move.node) or ""
        copy = name in (f"{analysis.nl}.copy", f"{analysis.nisa}.tensor_copy")
        args = [a.value for a in move.node.args if a.keyword is None] if isinstance(move.node, cst.Call) else []
        written = {a.name for a in accesses(move.stmt) if a.kind in ("write", "bind")}
        if copy and args and analysis.in_psum(args[0]) and move.share == 1.0 and not written & operands:
            found.append(move)
    return found


def _tensor_operands(analysis: KernelAnalysis) -> set[str]:
    return {r.name for op in analysis.model.ops if op.engine == "tensor" for r in op.reads}


def _feeds_tensor_engine(analysis: KernelAnalysis, engine: str) -> bool:
    """Whether `engine` also writes something a Tensor-engine instruction reads (`nl.matmul`
    without transpose_x has the compiler's own transposes read out on the Vector engine)."""
    model = analysis.model
    operands = _tensor_operands(analysis)
    if engine == "vector" and any(op.call == "nl.matmul" and "transpose_x=True" not in flat(code_of(op.stmt))
                                  for op in model.ops):
        return True
    return any(op.engine == engine and any(r.name in operands for r in op.writes) for op in model.ops)


def _share_a_port(hardware: str, one: str, other: str) -> bool:
    """On NC-v2 Vector and GpSimd take turns on one SBUF port (fact sheet A.4, `vector_gpsimd_share_sbuf`):
    work moved from one to the other still waits for the port, so neither is idle for the other."""
    return {one, other} == {"vector", "gpsimd"} and load_hardware(hardware).memory.vector_gpsimd_share_sbuf


def _busiest_compute_engine(profile: Any, busy: dict[str, float]) -> str | None:
    """The profile's bottleneck when it is Vector, Scalar or GpSimd; when it is the Tensor engine or
    DMA, the busiest of those three if it is nearly as busy (the two then queue on each other's
    results, and shortening either shortens the kernel); None when none of them matters."""
    bottleneck = getattr(profile, "bottleneck", None) if profile is not None else None
    if bottleneck in _ENGINES:
        return bottleneck if busy.get(bottleneck) else None
    busiest = max(_ENGINES, key=lambda e: busy.get(e, 0.0))
    top = max(busy.values(), default=0.0)
    return busiest if top and busy.get(busiest, 0.0) >= _RUNNER_UP_SHARE * top else None


def _busy(profile: Any) -> dict[str, float]:
    data = (getattr(profile, "profile", None) or {}) if profile is not None else {}
    return {str(k): float(v) for k, v in (data.get("engine_busy_time") or {}).items()}


def _moves(analysis: KernelAnalysis, source: str | None, targets: list[str], hardware: str) -> Iterator[_Move]:
    """Every instruction of the kernel that can move to one of `targets` (from `source`, or from
    anywhere when None)."""
    for site in sites(analysis.fn):
        stmt = site.stmt
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        found = list(_candidates(analysis, stmt.body[0]))
        total = sum(units for _, _, units in found) or 1.0
        seen: dict[str, int] = {}
        for node, engine, units in found:
            key = flat(code_of(node))
            occurrence = seen.get(key, 0)
            seen[key] = occurrence + 1
            if source is not None and engine != source:
                continue
            for target in targets:
                rewrite = _rewrite_for(analysis, node, engine, target, hardware)
                if rewrite is not None:
                    text, what = rewrite
                    one_line = " ".join(code_of(node).split())  # a call over several lines, on one
                    shown = one_line if len(one_line) <= 70 else one_line[:67] + "..."
                    yield _Move(stmt, node, occurrence, engine, target, text, units / total,
                                f"run {what} (`{shown}`) on the {target} engine")


def _candidates(analysis: KernelAnalysis, root: cst.CSTNode) -> Iterator[tuple[cst.BaseExpression, str, float]]:
    """(expression, engine it runs on, engine passes) for each instruction-making expression."""
    if isinstance(root, cst.SubscriptElement) or (
            isinstance(root, cst.Arg) and root.keyword is not None and root.keyword.value == "mask"):
        return
    if isinstance(root, cst.BaseExpression):
        found = _engine_of(analysis, root)
        if found is not None:
            yield root, found[0], found[1]
    for child in root.children:
        yield from _candidates(analysis, child)


def _engine_of(analysis: KernelAnalysis, expr: cst.BaseExpression) -> tuple[str, float] | None:
    """The engine an expression's own instruction runs on and its passes over the tile."""
    decomposed = analysis._decompose(expr)
    if decomposed is not None:
        op, args, _, _ = decomposed
        if op in ("negative", "reciprocal") or op in ("add", "subtract", "multiply", "divide", "maximum",
                                                        "minimum"):
            tiles = [a for a in args if analysis.kind_of(a) not in (SCALAR, COLUMN)]
            return "vector", 2.0 if len(tiles) == 2 else 1.0
        return "scalar", 1.0
    name = call_name(expr) or ""
    head, _, fn = name.rpartition(".")
    if head == analysis.nl and fn == "copy":
        return "vector", 1.0
    if head == analysis.nisa and fn in ("tensor_copy", "tensor_scalar", "tensor_tensor", "activation"):
        engine = keyword(expr, "engine")  # type: ignore[arg-type]
        chosen = (code_of(engine.value).rsplit(".", 1)[-1].replace("_engine", "") if engine is not None else None)
        if fn == "activation":
            return chosen or "scalar", 1.0
        return chosen or "vector", 2.0 if fn == "tensor_tensor" else 1.0
    return None


def _rewrite_for(analysis: KernelAnalysis, expr: cst.BaseExpression, engine: str, target: str,
                 hardware: str) -> tuple[str, str] | None:
    """(replacement text, what moves) for running `expr` on `target`, or None when it cannot."""
    if engine == target:
        return None
    nl, nisa, np = analysis.nl, analysis.nisa, analysis.np
    decomposed = analysis._decompose(expr)
    if decomposed is not None:
        op, args, mask, dtype = decomposed
        tail = (f", mask={mask}" if mask else "") + (f", dtype={dtype}" if dtype else "")
        kinds = [analysis.kind_of(a) for a in args]
        texts = [code_of(a) for a in args]
        psum = any(analysis.in_psum(a) for a in args)
        if op == "negative":
            kinds, texts, op = [kinds[0], SCALAR], [texts[0], "-1.0"], "multiply"
        if len(args) == 1 and op != "multiply":
            return None
        data_first = kinds[1] in (SCALAR, COLUMN)
        scalar_side = 1 if data_first else 0 if kinds[0] in (SCALAR, COLUMN) else None
        if target == "scalar" and scalar_side is not None:
            x, c = texts[1 - scalar_side], texts[scalar_side]
            c_kind = kinds[scalar_side]
            if op == "multiply":
                return f"{nisa}.activation(op={nl}.copy, data={x}, scale={c}{tail})", f"the multiply by {c}"
            if op == "add" and c_kind == COLUMN:
                return f"{nisa}.activation(op={nl}.copy, data={x}, bias={c}{tail})", f"the add of {c}"
            if op == "subtract" and c_kind == COLUMN and data_first:
                return (f"{nisa}.activation(op={nl}.copy, data={x}, bias={nl}.negative({c}){tail})",
                        f"the subtract of {c}")
            if op == "divide" and data_first:
                scale = f"1.0 / ({c})" if c_kind == SCALAR else f"{nl}.reciprocal({c})"
                return f"{nisa}.activation(op={nl}.copy, data={x}, scale={scale}{tail})", f"the divide by {c}"
            return None
        if target == "gpsimd" and op in _GPSIMD_OPS and not psum:
            if scalar_side is None:
                return (f"{nisa}.tensor_tensor({texts[0]}, {texts[1]}, op={np}.{op}, engine={nisa}.gpsimd_engine"
                        f"{tail})", f"the {op} of two tiles")
            x, c = texts[1 - scalar_side], texts[scalar_side]
            reverse = ", reverse0=True" if scalar_side == 0 and op == "subtract" else ""
            return (f"{nisa}.tensor_scalar({x}, {np}.{op}, {c}{reverse}, engine={nisa}.gpsimd_engine{tail})",
                    f"the {op} by {c}")
        return None
    if not isinstance(expr, cst.Call):
        return None
    name = call_name(expr) or ""
    head, _, fn = name.rpartition(".")
    positional = [a for a in expr.args if a.keyword is None]
    data = positional[0].value if positional else (keyword(expr, "data") or keyword(expr, "src") or
                                                   cst.Arg(cst.Name("_"))).value
    psum = analysis.in_psum(data)
    if target == "gpsimd" and psum:
        return None  # GpSimd cannot access PSUM (fact sheet A.4)
    if head == nl and fn == "copy":
        if len(positional) != 1 or any(a.keyword is not None and a.keyword.value not in ("dtype", "mask")
                                       for a in expr.args):
            return None
        extra = "".join(f", {a.keyword.value}={code_of(a.value)}" for a in expr.args if a.keyword is not None)
        return (f"{nisa}.tensor_copy({code_of(positional[0].value)}, engine={nisa}.{target}_engine{extra})",
                "the copy")
    if head == nisa and fn in ("tensor_copy", "tensor_scalar", "tensor_tensor"):
        if fn == "tensor_tensor" and target != "gpsimd" and target != "vector":
            return None
        if fn == "tensor_scalar" and target == "scalar" and not _scalar_engine_tensor_scalar(expr, hardware):
            return None
        if fn == "tensor_tensor" and target == "gpsimd" and _op_name(expr) not in _GPSIMD_OPS:
            return None
        args = [a for a in expr.args if not (a.keyword is not None and a.keyword.value == "engine")]
        parts = ", ".join(_argument_text(a) for a in args)
        return f"{name}({parts}, engine={nisa}.{target}_engine)", f"the {fn}"
    if head == nisa and fn == "activation" and target in ("vector", "gpsimd"):
        op = keyword(expr, "op") or (expr.args[0] if expr.args and expr.args[0].keyword is None else None)
        if op is None or flat(code_of(op.value)) != f"{nl}.copy" or keyword(expr, "bias") is not None:
            return None
        scale = keyword(expr, "scale")
        value = code_of(scale.value) if scale is not None else "1.0"
        data_arg = keyword(expr, "data") or (expr.args[1] if len(expr.args) > 1 else None)
        if data_arg is None:
            return None
        return (f"{nisa}.tensor_scalar({code_of(data_arg.value)}, {np}.multiply, {value}, "
                f"engine={nisa}.{target}_engine)", "the scaled copy")
    return None


def _argument_text(arg: cst.Arg) -> str:
    """One argument of a call as it reads without its comma and the spacing around it: a call written one
    argument per line keeps its newline after the comma, so stripping the comma off the printed argument fails."""
    name = f"{arg.keyword.value}=" if arg.keyword is not None else ""
    return f"{arg.star}{name}{code_of(arg.value)}"


def _op_name(call: cst.Call) -> str:
    op = keyword(call, "op")
    if op is None:
        positional = [a for a in call.args if a.keyword is None]
        op = positional[2] if len(positional) > 2 else None
    return (code_of(op.value).rsplit(".", 1)[-1] if op is not None else "")


def _scalar_engine_tensor_scalar(call: cst.Call, hardware: str) -> bool:
    """The Scalar engine runs tensor_scalar's multiply-then-add, multiply, or add (fact sheet A.5, and
    nki.isa.tensor_scalar: Vector or Scalar Engine on every generation)."""
    positional = [a for a in call.args if a.keyword is None]
    op0 = keyword(call, "op0") or (positional[1] if len(positional) > 1 else None)
    op1 = keyword(call, "op1")
    names = tuple(code_of(o.value).rsplit(".", 1)[-1] for o in (op0, op1) if o is not None)
    if keyword(call, "reverse0") is not None or keyword(call, "reverse1") is not None:
        return False
    return names in (("multiply", "add"), ("multiply",), ("add",))
