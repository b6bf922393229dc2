"""merge_dma: turn several small DMA transfers into fewer large ones.

Every DMA pays about 1.3 us of setup and small per-partition pieces run below bandwidth (fact sheet
A.6; perf guide Opt #9 aims at 32 KiB or more per transfer). Three source shapes are merged:

- loads of adjacent slices of one tensor in one block (`a = nl.load(x[r, 0:512])`,
  `b = nl.load(x[r, 512:1024])`) become one load of the union and two slices of the tile;
- a loop whose body only loads consecutive free-axis slices into a block tensor
  (`buf[:, j*T:(j+1)*T] = nl.load(x[r, j*T:(j+1)*T])`) becomes one load of the whole range;
- a loop that ends by storing consecutive free-axis slices of an output
  (`nl.store(out[rows, n*T:(n+1)*T], value=v)`) collects the slices in one SBUF block tile and
  stores it once after the loop.

Plans are made only for transfers the profile charges DMA time to and that are under 32 KiB per
DMA engine. Merges along the partition axis change which partitions a piece lives on, which the
engines may not accept on hardware; those plans say so.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst

from .analysis import KernelModel, ModelRule, model_of
from .base import Plan
from .cst_util import (
    ELEMENT_BYTES,
    alias_of,
    binding_count,
    block_statements,
    call_name,
    code_of,
    compiled_code,
    edit_statements,
    flat,
    fresh_name,
    input_shapes,
    keyword,
    line_of,
    locate,
    loop_args,
    loop_var,
    names_in,
    names_written,
    shape_values,
    single_assignments,
    sites,
    small,
    static_value,
    with_statements,
)

_BLOCK_BUDGET = 64 * 1024  # at most this many bytes per partition for a store block tile
_LOOPS = ("affine_range", "sequential_range", "static_range", "range")


@dataclass
class _Merge:
    """One merge: `kind` is loads, load_loop or store_loop; `anchor` the statement planned at."""

    kind: str
    anchor: cst.BaseStatement
    edits: dict[int, list[str | cst.BaseStatement]]  # id(statement) -> replacement statements (or texts)
    dma_stmts: list[cst.BaseStatement]
    piece: list[cst.BaseExpression]  # extents of one original transfer (partition first)
    partition_axis: bool
    description: str
    block: tuple[str, str] | None = None  # (loop count, slice size) texts of a store block tile

    def params(self) -> dict[str, Any]:
        return {"kind": self.kind, "anchor": flat(code_of(self.anchor))}


class MergeDma(ModelRule):
    """Merge small DMA transfers (adjacent slices of one tensor, per-iteration loads or stores of consecutive
    slices) into one larger transfer: each DMA pays ~1.3 us of setup and small pieces run below bandwidth."""

    name = "merge_dma"

    def plans(self, model: KernelModel) -> list[Plan]:
        module, fn, pos, profile = model.module, model.fn, model.pos, model.profile
        line_engines, latency, trips = model.line_engines, model.latency or 0.0, model.profile_trips
        shapes = input_shapes(profile)
        env = shape_values(fn, shapes["timed"]) if "timed" in shapes else single_assignments(fn)
        plans: list[Plan] = []
        for merge in _merges(module, fn):
            lines = [line_of(s, pos) for s in merge.dma_stmts]
            time = sum(line_engines.get(line, {}).get("dma", 0.0) for line in lines)
            if profile is not None and time <= 0.0:
                continue  # the profile shows no DMA time on these transfers
            size = _transfer_bytes(merge.piece, env)
            if size is None:
                average = float(((getattr(profile, "profile", None) or {}) if profile else {}).get(
                    "dma_transfer_average_bytes") or 0)
                size = int(average) if average else None
            if size is not None and size >= model.hardware.dma.transfer_target_bytes:  # already large enough
                continue
            if merge.block is not None and not _block_fits(merge.block, env, trips.get(line_of(merge.anchor, pos))):
                continue
            line = line_of(merge.anchor, pos)
            share = time / latency if latency else 0.01
            priority = max(0.0, min(1.0, 0.3 * share))  # setup amortised; bandwidth unchanged
            note = (" Legality unproven on hardware: the merged tile puts a piece on other partitions than the "
                    "instructions that read it." if merge.partition_axis else "")
            shown = f" (about {size} B per DMA engine now)" if size else ""
            plans.append(Plan(self.name, line, f"line {line}: {merge.description}{shown}.{note}", merge.params(),
                              priority * (0.5 if merge.partition_axis else 1.0)))
        plans.sort(key=lambda p: -p.priority)
        return plans

    def rewrite(self, source: str, plan: Plan) -> str:
        model = model_of(source)
        module, fn, pos = model.module, model.fn, model.pos
        matches = [m for m in _merges(module, fn) if m.params() == plan.params]
        anchor = locate([m.anchor for m in matches], pos, plan.line, "the transfers to merge")
        merge = next(m for m in matches if m.anchor is anchor)
        edits: dict[int, list[cst.BaseStatement]] = {}
        for key, items in merge.edits.items():
            edits[key] = [cst.parse_statement(t + "\n") if isinstance(t, str) else t for t in items]
        originals = {id(s): s for s in _all_statements(fn)}
        for key, stmts in edits.items():  # keep the comments and blank lines around the first new one
            old = originals.get(key)
            if old is not None and stmts:
                stmts[0] = stmts[0].with_changes(leading_lines=getattr(old, "leading_lines", ()))
                if isinstance(old, cst.SimpleStatementLine) and isinstance(stmts[0], cst.SimpleStatementLine):
                    stmts[0] = stmts[0].with_changes(trailing_whitespace=old.trailing_whitespace)
        return compiled_code(edit_statements(module, edits), "merge_dma", "merge")


def _all_statements(fn: cst.FunctionDef) -> Iterator[cst.BaseStatement]:
    for site in sites(fn):
        yield site.stmt


def _transfer_bytes(piece: Sequence[cst.BaseExpression], env: dict[str, cst.BaseExpression]) -> int | None:
    """Bytes one DMA engine moves for one original transfer: the piece's size over the engines it
    spans (8 partitions each, at most 16)."""
    sizes = [static_value(e, env) for e in piece]
    if not sizes or any(s is None for s in sizes):
        return None
    partitions = int(sizes[0])  # type: ignore[arg-type]
    total = ELEMENT_BYTES
    for s in sizes:
        total *= int(s)  # type: ignore[arg-type]
    engines = min(16, max(1, -(-partitions // 8)))
    return total // engines


def _block_fits(block: tuple[str, str], env: dict[str, cst.BaseExpression], trips: float | None) -> bool:
    """A store block must stay within a modest share of SBUF per partition. The loop count comes
    from the input shapes the profile ran with, else from the profile's trip count of the loop."""
    count = static_value(cst.parse_expression(block[0]), env) or trips
    size = static_value(cst.parse_expression(block[1]), env)
    return count is not None and size is not None and count * size * ELEMENT_BYTES <= _BLOCK_BUDGET


# ---------------------------------------------------------------------------- slices


def _slice_bounds(element: cst.SubscriptElement) -> tuple[str, str] | None:
    """(lower, upper) texts of a `lo:hi` element (lower "0" when omitted), else None."""
    sl = element.slice
    if isinstance(sl, cst.Index) and isinstance(sl.value, cst.Name) and sl.value.value in _SLICE_NAMES:
        return _SLICE_NAMES[sl.value.value]
    if not isinstance(sl, cst.Slice) or sl.upper is None or sl.step is not None:
        return None
    return (code_of(sl.lower) if sl.lower is not None else "0"), code_of(sl.upper)


def _extent(lower: str, upper: str) -> str:
    """Text of `upper - lower`, simplified for `0:n` and `i*T:(i+1)*T`."""
    lo, hi = flat(lower), flat(upper)
    if lo == "0":
        return upper
    if "*" in lo:
        var, _, size = lo.partition("*")
        if hi in (f"({var}+1)*{size}", f"{size}*({var}+1)"):
            return size if size.isidentifier() or size.isdigit() else f"({size})"
    return f"({upper}) - ({lower})"


_SLICE_NAMES: dict[str, tuple[str, str]] = {}  # names bound to slice(lo, hi) in the kernel being read


def _is_integer_index(element: cst.SubscriptElement) -> bool:
    """An index that drops its axis (not a slice, nor a name bound to `slice(lo, hi)`)."""
    sl = element.slice
    if isinstance(sl, cst.Index) and isinstance(sl.value, cst.Name) and sl.value.value in _SLICE_NAMES:
        return False
    return isinstance(sl, cst.Index)


def _tile_axis(sub: cst.Subscript, position: int) -> int:
    """Axis of the loaded tile that subscript element `position` becomes (integer indices drop)."""
    return sum(1 for e in sub.slice[:position] if not _is_integer_index(e))


def _piece(sub: cst.Subscript) -> list[cst.BaseExpression] | None:
    """Extent expressions of the tile a subscript selects (partition axis first)."""
    out: list[cst.BaseExpression] = []
    for element in sub.slice:
        if _is_integer_index(element):
            continue
        bounds = _slice_bounds(element)
        if bounds is None:
            return None
        try:
            out.append(cst.parse_expression(_extent(*bounds)))
        except cst.ParserSyntaxError:
            return None
    return out


def _load_call(expr: cst.BaseExpression, nl: str) -> cst.Subscript | None:
    """The HBM subscript of a plain `nl.load(t[...])` (no mask or dtype), else None."""
    if not isinstance(expr, cst.Call) or call_name(expr) != f"{nl}.load" or len(expr.args) != 1:
        return None
    arg = expr.args[0]
    if arg.keyword is not None or not isinstance(arg.value, cst.Subscript):
        return None
    if not isinstance(arg.value.value, cst.Name):
        return None
    return arg.value


# ---------------------------------------------------------------------------- finding merges


def _merges(module: cst.Module, fn: cst.FunctionDef) -> Iterator[_Merge]:
    nl = alias_of(module, "neuronxcc.nki.language") or "nl"
    _SLICE_NAMES.clear()
    for name, value in single_assignments(fn).items():
        if isinstance(value, cst.Call) and call_name(value) == "slice" and len(value.args) == 2:
            _SLICE_NAMES[name] = (code_of(value.args[0].value), code_of(value.args[1].value))
    owners: list[cst.CSTNode] = [fn, *(s.stmt for s in sites(fn) if isinstance(s.stmt, cst.BaseCompoundStatement))]
    for owner in owners:
        block = block_statements(owner)
        yield from _adjacent_loads(fn, block, nl)
        for stmt in block:
            if isinstance(stmt, cst.For):
                found = _load_loop(fn, stmt, nl)
                if found is not None:
                    yield found
                found = _store_loop(fn, stmt, nl)
                if found is not None:
                    yield found


def _adjacent_loads(fn: cst.FunctionDef, block: Sequence[cst.BaseStatement], nl: str) -> Iterator[_Merge]:
    """Pairs `a = nl.load(t[.., lo:mid, ..])`, `b = nl.load(t[.., mid:hi, ..])` in one block."""
    loads: list[tuple[int, str, cst.Subscript]] = []
    for index, stmt in enumerate(block):
        node = small(stmt)
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            sub = _load_call(node.value, nl)
            if sub is not None and binding_count(fn, node.targets[0].target.value) == 1:
                loads.append((index, node.targets[0].target.value, sub))
    used: set[int] = set()
    for i, (ia, name_a, sub_a) in enumerate(loads):
        for ib, name_b, sub_b in loads[i + 1:]:
            if ia in used or ib in used or flat(code_of(sub_a.value)) != flat(code_of(sub_b.value)):
                continue
            position = _adjacent_position(sub_a, sub_b)
            if position is None:
                continue
            between: set[str] = set()
            for stmt in block[ia + 1:ib]:
                between |= names_written(stmt)
            if between & (names_in(sub_b) | {name_a}):
                continue
            lo, mid = _slice_bounds(sub_a.slice[position])  # type: ignore[misc]
            _, hi = _slice_bounds(sub_b.slice[position])  # type: ignore[misc]
            axis = _tile_axis(sub_a, position)
            merged = fresh_name(fn, f"{name_a}_{name_b}")
            union = _replace_element(sub_a, position, f"{lo}:{hi}")
            ndim = sum(1 for e in sub_a.slice if not _is_integer_index(e))
            first = _select(ndim, axis, "0", mid if flat(lo) == "0" else _extent(lo, mid))
            second = _select(ndim, axis, mid if flat(lo) == "0" else f"({mid}) - ({lo})",
                             hi if flat(lo) == "0" else f"({hi}) - ({lo})")
            edits = {id(block[ia]): [f"{merged} = {nl}.load({union})", f"{name_a} = {merged}[{first}]"],
                     id(block[ib]): [f"{name_b} = {merged}[{second}]"]}
            piece = _piece(sub_a)
            if piece is None:
                continue
            used |= {ia, ib}
            yield _Merge("loads", block[ia], edits, [block[ia], block[ib]], piece, axis == 0,
                         f"load {code_of(sub_a)} and {code_of(sub_b)} with one DMA of their union and slice the "
                         "tile")


def _adjacent_position(a: cst.Subscript, b: cst.Subscript) -> int | None:
    """The one subscript position where `a` ends exactly where `b` begins (all others equal)."""
    if len(a.slice) != len(b.slice):
        return None
    found = None
    for i, (ea, eb) in enumerate(zip(a.slice, b.slice, strict=True)):
        if flat(code_of(ea.slice)) == flat(code_of(eb.slice)):
            continue
        ba, bb = _slice_bounds(ea), _slice_bounds(eb)
        if found is not None or ba is None or bb is None or flat(ba[1]) != flat(bb[0]):
            return None
        found = i
    return found


def _replace_element(sub: cst.Subscript, position: int, text: str) -> str:
    parts = [code_of(e.slice) for e in sub.slice]
    parts[position] = text
    return f"{code_of(sub.value)}[{', '.join(parts)}]"


def _select(ndim: int, axis: int, lower: str, upper: str) -> str:
    parts = [":"] * ndim
    parts[axis] = f"{lower}:{upper}" if flat(lower) != "0" else f"0:{upper}"
    return ", ".join(parts)


def _step_slice(element: cst.SubscriptElement, var: str) -> str | None:
    """The tile size T when the element is `var * T:(var + 1) * T` (or `T * var:...`), else None."""
    bounds = _slice_bounds(element)
    if bounds is None:
        return None
    lo, hi = flat(bounds[0]), flat(bounds[1])
    for size in (lo.removeprefix(f"{var}*"), lo.removesuffix(f"*{var}")):
        if size != lo and hi in (f"({var}+1)*{size}", f"{size}*({var}+1)"):
            return size
    return None


def _loop_count(loop: cst.For) -> str | None:
    """N of `for v in nl.affine_range(N)` (single argument, or range(0, N))."""
    args = loop_args(loop)
    kind = (call_name(loop.iter) or "").rsplit(".", 1)[-1]
    if kind not in _LOOPS or any(a.keyword is not None for a in args):
        return None
    if len(args) == 1:
        return code_of(args[0].value)
    if len(args) == 2 and flat(code_of(args[0].value)) == "0":
        return code_of(args[1].value)
    return None


def _loop_slices(sub: cst.Subscript, var: str) -> tuple[int, str] | None:
    """(position, T) when the loop variable appears in exactly one element, as a T-step slice on
    a free axis (not the tile's partition axis)."""
    hits = [i for i, e in enumerate(sub.slice) if var in names_in(e)]
    if len(hits) != 1:
        return None
    size = _step_slice(sub.slice[hits[0]], var)
    if size is None or _tile_axis(sub, hits[0]) == 0:
        return None
    return hits[0], size


def _load_loop(fn: cst.FunctionDef, loop: cst.For, nl: str) -> _Merge | None:
    """`for j in R(N): buf[.., j*T:(j+1)*T] = nl.load(x[.., j*T:(j+1)*T])` -> one load."""
    var, count = loop_var(loop), _loop_count(loop)
    body = block_statements(loop)
    if var is None or count is None or len(body) != 1 or loop.orelse is not None:
        return None
    node = small(body[0])
    if not isinstance(node, cst.Assign) or len(node.targets) != 1:
        return None
    dest = node.targets[0].target
    src = _load_call(node.value, nl)
    if not isinstance(dest, cst.Subscript) or src is None:
        return None
    at_dest, at_src = _loop_slices(dest, var), _loop_slices(src, var)
    if at_dest is None or at_src is None or flat(at_dest[1]) != flat(at_src[1]):
        return None
    size = at_dest[1]
    whole = f"0:({count}) * {size}"
    text = f"{_replace_element(dest, at_dest[0], whole)} = {nl}.load({_replace_element(src, at_src[0], whole)})"
    piece = _piece(src)
    if piece is None:
        return None
    return _Merge("load_loop", loop, {id(loop): [text]}, [body[0]], piece, False,
                  f"replace the loop of {count} loads of {code_of(src.value)} by one load of the whole range")


def _store_loop(fn: cst.FunctionDef, loop: cst.For, nl: str) -> _Merge | None:
    """A loop ending in `nl.store(out[.., n*T:(n+1)*T], value=v)`: collect in SBUF, store once."""
    var, count = loop_var(loop), _loop_count(loop)
    body = block_statements(loop)
    if var is None or count is None or not body or loop.orelse is not None:
        return None
    last = small(body[-1])
    if not isinstance(last, cst.Expr) or call_name(last.value) != f"{nl}.store":
        return None
    call = last.value
    assert isinstance(call, cst.Call)
    positional = [a for a in call.args if a.keyword is None]
    target = positional[0].value if positional else (keyword(call, "dst") or cst.Arg(cst.Name("_"))).value
    value = keyword(call, "value") or (positional[1] if len(positional) > 1 else None)
    if not isinstance(target, cst.Subscript) or not isinstance(target.value, cst.Name) or value is None:
        return None
    if any(a.keyword is not None and a.keyword.value not in ("value", "dst") for a in call.args):
        return None  # masked or otherwise qualified stores stay as they are
    found = _loop_slices(target, var)
    if found is None:
        return None
    position, size = found
    written = set()
    for stmt in body:
        written |= names_written(stmt)
    others = [e for i, e in enumerate(target.slice) if i != position]
    if any(names_in(e) & (written | {var}) for e in others):
        return None
    piece = _piece(target)
    sliced = [e for e in target.slice if not _is_integer_index(e)]
    if piece is None or len(sliced) != 2:
        return None
    partitions = _extent(*_slice_bounds(sliced[0]))  # type: ignore[misc]
    out = target.value.value
    block = fresh_name(fn, f"{out}_block")
    whole = f"0:({count}) * {size}"
    alloc = f"{block} = {nl}.ndarray(({partitions}, ({count}) * {size}), dtype={out}.dtype, buffer={nl}.sbuf)"
    store = f"{nl}.store({_replace_element(target, position, whole)}, value={block})"
    inner = f"{block}[:, {code_of(target.slice[position].slice)}] = {code_of(value.value)}"
    # the loop keeps its header and body; only its last statement changes
    last_stmt = cst.parse_statement(inner + "\n").with_changes(leading_lines=body[-1].leading_lines)
    new_loop = with_statements(loop, [*body[:-1], last_stmt]).with_changes(leading_lines=[])
    edits: dict[int, list[str | cst.BaseStatement]] = {id(loop): [alloc, new_loop, store]}
    return _Merge("store_loop", loop, edits, [body[-1]], piece, False,
                  f"collect the {count} stores into {out} in one SBUF block and store it with one DMA after the "
                  "loop", block=(count, size))

