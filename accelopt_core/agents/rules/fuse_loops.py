"""fuse_loops: merge two loops over the same range into one, and the loops inside them that walk the
same blocks.

`for k in R: A(k)` followed (maybe after statements that do not touch what A touches) by
`for j in R: B(j)` becomes `for k in R: A(k); B(k)`. One loop instead of two lets the bodies'
instructions interleave, and a tensor the first writes and the second reads lives for one iteration
instead of across the whole first loop: in compiler-style kernels, where each nest writes a block
tensor the next nest reads (`v14[i0, i5, i2]` written by the gate projection, read as
`v14[i7, i12, i9]` by the up projection), fusing the nests and then their inner loops that index the
same block dimension keeps one block alive instead of all of them, and the tensor never leaves SBUF.

Legal when no iteration of one loop needs a result of another iteration of the other. Per variable
written in one body and used in the other, one of: a per-iteration temporary of both (rebound
before use), an accumulator both only `+=` into, or a tensor every access of which, in both loops,
stays in the stripe of one dimension that the loop variable selects: the index there is
`c * var + rest`, with the same `c` and the same terms of the loops around in every access, and the
rest (inner loops, element ranges, constants) spanning less than `c` together (the analysis' affine
index forms). Any other sharing keeps the loops apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from . import cst_util as u
from .analysis import Affine, ForLoop, KernelModel, ModelRule, Ref, Span, Statement, model_of
from .base import Plan, RuleError

_MAX_NESTED = 16  # inner pairs fused after the outer one, at most


@dataclass(frozen=True)
class Pair:
    """Two loops of one block that can be fused, the statements between them (moved in front of
    the first) and the tensors the second reads from the first."""

    first: cst.For
    second: cst.For
    between: tuple[cst.BaseStatement, ...]
    shared: tuple[str, ...]


def _locals(items: Sequence[u.Access]) -> set[str]:
    """Variables rebound before any other use: fresh in every iteration."""
    first: dict[str, str] = {}
    for access in items:
        first.setdefault(access.name, access.kind)
    return {name for name, kind in first.items() if kind == "bind"}


def _stripe(ref: Ref, op: Statement, loop: ForLoop,
            dim: int) -> tuple[int, frozenset[tuple[str, int]], int, int] | None:
    """(coefficient of the loop variable, terms of the loops around, lowest and highest offset of
    the rest) of index element `dim` of `ref`, or None when it is not such a stripe."""
    if ref.index is None or dim >= len(ref.index):
        return None
    element = ref.index[dim]
    if isinstance(element, Span):
        if element.size is None:
            return None
        element = element.start.plus(Affine.of(ranges=((1, element.size),)))
    if not isinstance(element, Affine) or not loop.var or element.coeff(loop.var) == 0:
        return None
    around = {lp.var for lp in loop.chain[:-1] if lp.var}
    inner = {lp.var: lp for lp in op.loops[op.loops.index(loop) + 1:] if lp.var}
    lo = hi = element.const
    outer: dict[str, int] = {}
    for var, k in element.coeffs:
        if var == loop.var:
            continue
        if var in around:
            outer[var] = k
        elif var in inner and inner[var].trips is not None:
            span = k * (int(inner[var].trips) - 1)  # type: ignore[arg-type]
            lo, hi = lo + min(0, span), hi + max(0, span)
        else:
            return None
    low, high = element.spread()
    return element.coeff(loop.var), frozenset(outer.items()), lo + low, hi + high


def striped(model: KernelModel, name: str, loops: Sequence[ForLoop]) -> bool:
    """Whether every access of `name` inside `loops` stays in the stripe its loop's variable selects
    in one common dimension: then iteration i of one loop and iteration j != i of another never
    touch the same element."""
    uses = [(op, ref, loop) for loop in loops for op in model.ops_in(loop) for ref in op.refs if ref.name == name]
    if not uses or any(ref.index is None for _, ref, _ in uses):
        return False
    for dim in range(min(len(ref.index or ()) for _, ref, _ in uses)):
        stripes = [_stripe(ref, op, loop, dim) for op, ref, loop in uses]
        if any(s is None for s in stripes):
            continue
        found = [s for s in stripes if s is not None]
        if len({(c, outer) for c, outer, _, _ in found}) != 1:
            continue
        width = abs(found[0][0])
        if max(hi for *_, hi in found) - min(lo for _, _, lo, _ in found) < width:
            return True
    return False


def fusion_problem(model: KernelModel, first: cst.For, second: cst.For, between: Sequence[cst.BaseStatement],
                   rest: Sequence[cst.BaseStatement]) -> str | None:
    """Why `first` and `second` (with `between` in between, `rest` after) cannot be fused."""
    if first.orelse is not None or second.orelse is not None:
        return "a loop has an else branch"
    var, other = u.loop_var(first), u.loop_var(second)
    if var is None or other is None:
        return "a loop target is not a single name"
    if u.loop_kind(first) is None or u.loop_kind(first) != u.loop_kind(second):
        return "the loops are not two kernel loops of the same kind"
    if u.flat(u.code_of(first.iter)) != u.flat(u.code_of(second.iter)):
        return "the loops do not run over the same range"
    if not u.block_statements(first) or not u.block_statements(second):
        return "a loop body is not an indented block"
    if var != other:
        if var in u.names_in(second.body):
            return f"the second loop already uses `{var}`"
        for stmt in rest:
            if other in u.names_in(stmt) and not (isinstance(stmt, cst.For) and u.loop_var(stmt) == other):
                return f"`{other}` is used after the loops"
    problem = _between_problem(first, between)
    if problem:
        return problem
    body2 = u.rename(second.body, other, var) if var != other else second.body
    items1 = [a for a in u.accesses(first.body) if a.name != var]
    items2 = [a for a in u.accesses(body2) if a.name != var]
    writes1 = {a.name for a in items1 if a.kind != "read"}
    writes2 = {a.name for a in items2 if a.kind != "read"}
    reads1, reads2 = {a.name for a in items1}, {a.name for a in items2}
    locals1, locals2 = _locals(items1), _locals(items2)
    loops = [model.loop(first), model.loop(second)]
    for name in sorted((writes1 & reads2) | (writes2 & reads1)):
        if name in locals1 and name in locals2:
            continue
        if all(a.kind == "accumulate" for a in (*items1, *items2) if a.name == name):
            continue
        if not striped(model, name, loops):
            return f"`{name}` is written by one loop and used by the other at another iteration"
    return None


def _between_problem(first: cst.For, between: Sequence[cst.BaseStatement]) -> str | None:
    """Statements between the loops move in front of the first: they must not touch what it writes,
    nor write what it reads."""
    if not between:
        return None
    moved_reads = set().union(*(u.names_in(s) for s in between))
    moved_writes = set().union(*(u.names_written(s) for s in between))
    if any(not isinstance(s, cst.For | cst.SimpleStatementLine) for s in between):
        return "a statement between the loops is not a loop or a simple statement"
    if moved_reads & u.names_written(first) or moved_writes & u.names_in(first):
        return "a statement between the loops depends on the first loop"
    return None


def pairs(model: KernelModel) -> list[Pair]:
    """Every pair of loops of one block that can be fused: the second right after the first, or after
    statements (other loops too) that can move in front of it."""
    found = []
    owners: list[cst.CSTNode] = [model.fn, *(lp.node for lp in model.loops)]
    owners += [s.stmt for s in u.sites(model.fn) if isinstance(s.stmt, cst.If)]
    for owner in owners:
        body = list(u.block_statements(owner))
        for i, a in enumerate(body):
            if not isinstance(a, cst.For):
                continue
            for j in range(i + 1, len(body)):
                b = body[j]
                if (isinstance(b, cst.For) and u.flat(u.code_of(b.iter)) == u.flat(u.code_of(a.iter))
                        and fusion_problem(model, a, b, body[i + 1:j], body[j + 1:]) is None):
                    found.append(Pair(a, b, tuple(body[i + 1:j]), _shared(model, a, b)))
    return found


@dataclass(frozen=True)
class Duplicate:
    """A loop that recomputes, into tensors of its own, what an earlier loop of the same block computed:
    `tensors` maps each of its tensors to the earlier loop's."""

    first: cst.For
    second: cst.For
    tensors: tuple[tuple[str, str], ...]


def duplicates(model: KernelModel) -> list[Duplicate]:
    """Loops of one block whose body is an earlier sibling's, up to the loop variables and the tensors
    they write (compiler output of two nests that both load and transpose the same operand: once the
    nests are fused, the second copy can read the first's)."""
    found = []
    owners: list[cst.CSTNode] = [model.fn, *(lp.node for lp in model.loops)]
    for owner in owners:
        body = u.code_statements(owner)
        for i, a in enumerate(body):
            for j in range(i + 1, len(body)):
                b = body[j]
                if isinstance(a, cst.For) and isinstance(b, cst.For):
                    mapping = _same_work(model, a, b, body[i + 1:j])
                    if mapping:
                        found.append(Duplicate(a, b, tuple(sorted(mapping.items()))))
    return found


def _loop_vars(loop: cst.For) -> list[str]:
    return [u.loop_var(n) or "" for n in u.walk(loop) if isinstance(n, cst.For)]


def _same_work(model: KernelModel, first: cst.For, second: cst.For,
               between: Sequence[cst.BaseStatement]) -> dict[str, str] | None:
    """{tensor of `second`: tensor of `first`} when `second` computes exactly what `first` did."""
    if u.flat(u.code_of(first.iter)) != u.flat(u.code_of(second.iter)) or any(
            model.reorder_problem(model.loop(loop)) for loop in (first, second)):
        return None  # a loop handing values between iterations starts from what the code before it left
    vars1, vars2 = _loop_vars(first), _loop_vars(second)
    if len(vars1) != len(vars2) or set(vars1) & set(vars2) or "" in vars1 + vars2:
        return None
    written1 = {r.name for op in model.ops_in(model.loop(first)) for r in op.writes}
    written2 = {r.name for op in model.ops_in(model.loop(second)) for r in op.writes}
    if len(written1) != len(written2) or not written2 or written1 & written2:
        return None
    mapping: dict[str, str] = {}
    for w1, w2 in zip(_write_order(model, first), _write_order(model, second), strict=False):
        mapping.setdefault(w2, w1)
    if len(mapping) != len(written2) or set(mapping.values()) != written1:
        return None
    renamed = second
    for old, new in [*zip(vars2, vars1, strict=True), *mapping.items()]:
        renamed = u.rename(renamed, old, new)
    if _work_text(first) != _work_text(renamed):
        return None
    for mine, theirs in mapping.items():
        a, b = model.tensors.get(theirs), model.tensors.get(mine)
        if a is None or b is None or a.decl is None or b.decl is None or a.shape != b.shape or a.buffer != b.buffer:
            return None
        if _declared_type(a.decl.stmt) != _declared_type(b.decl.stmt):
            return None
        if any(not u.contains(first, op.stmt) for op, ref in model.refs(theirs) if ref.kind != "read"
               and op is not a.decl):
            return None  # the first loop's result is changed elsewhere: the copy may differ
    read1 = {r.name for op in model.ops_in(model.loop(first)) for r in op.reads}
    if any(u.names_written(s) & read1 for s in between):
        return None  # an input changes between the two loops
    return mapping


def _work_text(loop: cst.For) -> str:
    """A loop's body as text without comments, blank lines and compiler markers."""

    class _Strip(cst.CSTTransformer):
        def leave_IndentedBlock(  # noqa: N802
                self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
            return updated.with_changes(body=[s for s in updated.body if not u.is_marker(s)])

    return u.flat(u.code_of(loop.body.visit(_Strip())))


def _write_order(model: KernelModel, loop: cst.For) -> list[str]:
    return [r.name for op in model.ops_in(model.loop(loop)) for r in op.writes]


def _declared_type(stmt: cst.BaseStatement) -> str:
    node = u.small(stmt)
    call = node.value if isinstance(node, cst.Assign) else None
    dtype = u.keyword(call, "dtype") if isinstance(call, cst.Call) else None
    return u.flat(u.code_of(dtype.value)) if dtype is not None else ""


def dropped(model: KernelModel, dup: Duplicate) -> cst.Module:
    """The kernel without the second loop and its tensors' declarations, their readers reading the
    first loop's tensors."""
    mapping = dict(dup.tensors)
    edits: dict[int, list[cst.BaseStatement]] = {id(dup.second): []}
    edits.update({id(model.tensors[mine].decl.stmt): [] for mine in mapping})  # type: ignore[union-attr]
    module = u.rewrite(model.module, edits)
    fn = u.kernel_function(module)
    assert fn is not None
    new_fn = fn
    for mine, theirs in mapping.items():
        new_fn = u.rename(new_fn, mine, theirs)
    return u.rewrite(module, {id(fn): [new_fn]})


def _shared(model: KernelModel, first: cst.For, second: cst.For) -> tuple[str, ...]:
    """Tensors the first loop writes and the second reads: what fusing keeps per iteration."""
    written = {r.name for op in model.ops_in(model.loop(first)) for r in op.writes if model.is_tensor(r.name)}
    read = {r.name for op in model.ops_in(model.loop(second)) for r in op.reads}
    return tuple(sorted(written & read))


def fused(first: cst.For, second: cst.For) -> cst.For:
    """One loop: the first body, then the second with its loop variable renamed to the first's."""
    var, other = u.loop_var(first) or "", u.loop_var(second) or ""
    body2 = list(u.block_statements(u.rename(second, other, var) if var != other else second))
    lead = list(second.leading_lines)
    comment = second.body.header.comment if isinstance(second.body, cst.IndentedBlock) else None
    if comment is not None:
        lead.append(cst.EmptyLine(comment=comment))
    if body2:
        body2[0] = body2[0].with_changes(leading_lines=[*lead, *body2[0].leading_lines])
    body1 = list(u.block_statements(first))
    markers = [s for s in body1 if u.is_marker(s)]  # compiler output's `' end loop i0 '` stays last
    body1 = [s for s in body1 if not u.is_marker(s)]
    return first.with_changes(body=first.body.with_changes(body=[*body1, *[s for s in body2 if not u.is_marker(s)],
                                                                 *markers]))


def _fuse(module: cst.Module, pair: Pair) -> cst.Module:
    moved = [s.with_changes(leading_lines=s.leading_lines) for s in pair.between]
    edits = {id(pair.first): [*moved, fused(pair.first, pair.second)], id(pair.second): []}
    edits.update({id(s): [] for s in pair.between})
    return u.rewrite(module, edits)


def _key(pair: Pair) -> tuple[str, str, str]:
    return u.loop_var(pair.first) or "", u.flat(u.code_of(pair.first.iter)), u.loop_var(pair.second) or ""


class FuseLoops(ModelRule):
    """Fuse loops over the same range into one (and the inner loops that walk the same blocks), so the bodies
    interleave and a tensor one writes and the other reads lives one iteration, not the whole loop: less SBUF, no
    spill."""

    name = "fuse_loops"

    def plans(self, model: KernelModel) -> list[Plan]:
        spans = u.loop_spans(model.profile)
        latency = model.latency
        plans = []
        for pair in pairs(model):
            first, second = model.loop(pair.first), model.loop(pair.second)
            nested = _nested(model.module, pair)
            priority = self._priority(model, pair, spans, latency)
            moved = f", after moving the {len(pair.between)} statement(s) between them in front" if pair.between \
                else ""
            keeps = (f"; `{'`, `'.join(pair.shared)}` then live one iteration instead of the whole loop"
                     if pair.shared else "")
            inner = (f", then {nested} step(s) inside it (inner loops that walk the same blocks fuse, a loop that "
                     "recomputes an earlier one's result goes)") if nested else ""
            params = {"var": first.var, "iter": u.flat(u.code_of(pair.first.iter)), "var2": second.var}
            if nested:
                params["nested"] = nested
            plans.append(Plan(
                self.name, first.line,
                f"Fuse `for {first.var}` (line {first.line}) with `for {second.var}` (line {second.line}) over the "
                f"same range{moved}{inner}: their bodies then interleave in one loop{keeps}.",
                params, priority))
        for dup in duplicates(model):
            first, second = model.loop(dup.first), model.loop(dup.second)
            again = ", ".join(f"`{b}` (reads `{a}` instead)" for b, a in dup.tensors)
            plans.append(Plan(
                self.name, second.line,
                f"Drop `for {second.var}` (line {second.line}): it recomputes what `for {first.var}` (line "
                f"{first.line}) computed, into {again}: fewer loads and instructions.",
                {"drop": second.var, "keep": first.var, "iter": u.flat(u.code_of(dup.second.iter))},
                self._work_share(model, dup.second, latency)))
        plans.sort(key=lambda p: -p.priority)
        return plans

    @staticmethod
    def _work_share(model: KernelModel, loop: cst.For, latency: float | None) -> float:
        """The share of the busiest engine's time the loop's statements take (what dropping it saves
        at most)."""
        busy = max(model.busy().values(), default=0.0) * 1e3
        if not latency or not busy:
            return 0.05
        spent: dict[str, float] = {}
        for op in model.ops_in(model.loop(loop)):
            u.add_times(spent, model.cost(op))
        return min(0.5, max(spent.values(), default=0.0) / busy * (busy / latency))

    @staticmethod
    def _priority(model: KernelModel, pair: Pair, spans: dict[int, float], latency: float | None) -> float:
        """The spill the fusion can remove (the shared tensors' bytes above what one iteration needs,
        against the profile's overflow of SBUF), else a small share for the overlap."""
        first, second = model.loop(pair.first), model.loop(pair.second)
        if not latency:
            return 0.01
        shorter = min(spans.get(first.line, 0.0), spans.get(second.line, 0.0))
        base = 0.02 * min(1.0, shorter / latency)
        peak = u.profile_value(model.profile, "sbuf_peak_live_bytes_per_partition")
        usable = u.profile_value(model.profile, "sbuf_usable_bytes_per_partition")
        spilled = sum(u.profile_value(model.profile, k) or 0.0 for k in ("spill_save_bytes", "spill_reload_bytes"))
        if not pair.shared or not peak or not usable or peak <= usable or not spilled:
            return base
        saved = 0.0
        for name in pair.shared:
            live = _live_bytes(model, name, first)
            if live:
                saved += live * (1.0 - 1.0 / max(model.trip(first), 1.0))
        moved = sum(u.profile_value(model.profile, k) or 0.0 for k in ("hbm_read_bytes", "hbm_write_bytes"))
        spill_ms = model.busy().get("dma", 0.0) * spilled / (moved + spilled)  # the spill's share of DMA time
        return min(0.8, base + spill_ms / latency * min(1.0, saved / (peak - usable)))

    def rewrite(self, source: str, plan: Plan) -> str:
        model = model_of(source)
        params = plan.params
        if "drop" in params:
            found = [d for d in duplicates(model) if (u.loop_var(d.second), u.loop_var(d.first), u.flat(
                u.code_of(d.second.iter))) == (params["drop"], params["keep"], params["iter"])]
            if not found:
                raise RuleError(f"`for {params['drop']}` no longer recomputes what `for {params['keep']}` does")
            return dropped(model, found[0]).code
        matches = [p for p in pairs(model) if _key(p) == (params["var"], params["iter"], params["var2"])]
        first = u.locate([p.first for p in matches], model.pos, plan.line, "the pair of loops to fuse")
        pair = next(p for p in matches if p.first is first)
        module = _fuse(model.module, pair)
        if params.get("nested"):
            module = _fuse_inner(module, u.loop_var(pair.first) or "", params["nested"])
        return module.code


def _live_bytes(model: KernelModel, name: str, loop: ForLoop) -> float | None:
    """Bytes per partition of `name` alive through one iteration of the loops around `loop`: the
    block dimensions those loops select count once, the others (and the tile) in full."""
    tensor = model.tensors[name]
    if any(d is None for d in tensor.shape) or not tensor.shape:
        return None
    around = {lp.var for lp in loop.chain[:-1] if lp.var}
    writes = [r for op in model.ops_in(loop) for r in op.writes if r.name == name]
    key = model.block_key(writes[0]) if writes else None
    size = 4.0
    for dim, extent in enumerate(tensor.shape):
        fixed = key is not None and dim < len(key) and key[dim].vars and key[dim].vars <= around
        if dim != tensor.par_axis and not fixed:
            size *= int(extent)  # type: ignore[arg-type]
    return size


def _inner_pairs(model: KernelModel, outer: cst.For) -> list[Pair]:
    """Pairs inside `outer` that share a tensor (loops that walk the same blocks)."""
    return [p for p in pairs(model) if p.shared and u.contains(outer, p.first) and p.first is not outer]


def _nested(module: cst.Module, pair: Pair) -> int:
    """How many inner pairs the fusion of `pair` lets fuse after it (planned on the fused kernel)."""
    try:
        return _count_inner(_fuse(module, pair), u.loop_var(pair.first) or "")
    except RuleError:
        return 0


def _fused_loop(model: KernelModel, var: str) -> cst.For | None:
    return next((lp.node for lp in model.loops if lp.var == var and lp.depth == min(
        (x.depth for x in model.loops if x.var == var), default=0)), None)


def _inner_step(module: cst.Module, var: str) -> cst.Module | None:
    """One step inside the fused loop `var`: a loop that recomputes what an earlier one did goes
    (its readers read the earlier one's tensors), else a pair of inner loops that walk the same blocks
    fuses; None when neither is left."""
    model = model_of(module)
    outer = _fused_loop(model, var)
    if outer is None:
        return None
    dup = next((d for d in duplicates(model) if u.contains(outer, d.first) and d.first is not outer), None)
    if dup is not None:
        return dropped(model, dup)
    inner = _inner_pairs(model, outer)
    return _fuse(model.module, inner[0]) if inner else None


def _count_inner(module: cst.Module, var: str) -> int:
    count = 0
    for _ in range(_MAX_NESTED):
        stepped = _inner_step(module, var)
        if stepped is None:
            break
        module, count = stepped, count + 1
    return count


def _fuse_inner(module: cst.Module, var: str, count: int) -> cst.Module:
    """The inner steps done one after another, as `_count_inner` found them."""
    for _ in range(count):
        stepped = _inner_step(module, var)
        if stepped is None:
            raise RuleError("the inner loops can no longer be fused")
        module = stepped
    return module
