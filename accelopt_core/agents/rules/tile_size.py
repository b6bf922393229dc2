"""retune_tile_size: try other values for the integer tile sizes of a kernel.

A tile size decides how many bytes each DMA moves and how many instructions the engines issue.
Transfers under 2 KiB per partition leave DMA bandwidth unused and every DMA pays ~1.3 us of setup
(fact sheet A.6: >= 2 KiB per partition, 32 KiB+ per transfer, about 4 KiB per partition
saturates), while bigger tiles take more SBUF and leave fewer iterations to overlap (perf guide
Opt #9: 1024 FP32 elements per partition is the sweet spot). The rule finds the tile-size
constants (`TILE = 512`, `tile_f = min(cols, 512)`, `tile_n = nl.tile_size.gemm_moving_fmax`),
works out from the source how each one is used (partition or free axis, matmul operand, PSUM
tile, the dimensions it divides) and proposes values that respect the limits of the generation's hardware
profile (on trn1: partition <= 128, matmul stationary free <= 128, moving free <= 512) and divide every
dimension they tile at every size of the task, so no element is dropped. One plan per value:
larger first when the profile is DMA-bound, smaller first when SBUF spills.

Kernels often write the tile size as a number (`x[c * 256:(c + 1) * 256]`, `cols // 256`). An
integer literal whose every occurrence in the kernel is tile arithmetic (slice bounds, `nl.ds`,
`nl.arange`, allocation shapes, and at least one loop bound `D // V`) is analysed as a constant:
the same module with the literal hoisted into a placeholder name goes through the same analysis,
and applying the plan rewrites every occurrence of the number.

A block size and its trip count change together: when a constant `T = 4` is used only as the count of loops
(`for b in nl.affine_range(T)`) that step through blocks of the tile size (`x[:, b * B:(b + 1) * B]`), T * B
is the extent the loop covers, so each plan sets B to a value dividing it and T to the extent over B.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst

from ...hardware import HardwareProfile
from .analysis import KernelModel, ModelRule, model_of, module_constants
from .base import Plan, RuleError
from .cst_util import (
    ELEMENT_BYTES,
    alias_of,
    assigned_name,
    binding_count,
    block_statements,
    call_name,
    code_of,
    dotted,
    flat,
    fresh_name,
    input_shapes,
    kernel_function,
    keyword,
    line_of,
    loop_args,
    loop_kind,
    loop_var,
    name_nodes,
    names_in,
    parents,
    parse_statement,
    positions,
    replace_nodes,
    shape_values,
    single_assignments,
    small,
    static_value,
    tile_size_constant,
    walk,
)

# Per-partition DMA payload the ordering aims at (fact sheet A.6: 4 KiB saturates the engines).
_TARGET_BYTES = 4096
_MATMUL_CALLS = ("nc_matmul", "matmul")
_ALLOCATIONS = ("ndarray", "zeros", "ones", "full")


@dataclass
class _Use:
    """What the source says about one tile-size name."""

    partition: bool = False  # tiles the partition axis somewhere
    stationary: bool = False  # free size of a matmul stationary operand / transpose input
    moving: bool = False  # free size of a matmul moving operand or of a PSUM tile
    dims: list[cst.BaseExpression] = field(default_factory=list)  # D in `range(D // T)`
    dma_lines: set[int] = field(default_factory=set)  # lines of loads/stores sliced with it


@dataclass
class _Constant:
    """A tile-size binding: `name = value` or a kernel parameter's default `name=value`, where `literal`
    (the number in it) is what changes."""

    name: str
    binding: cst.CSTNode  # the assignment statement or the parameter
    value: cst.BaseExpression
    literal: cst.BaseExpression  # the Integer node, or the nl.tile_size attribute
    current: int
    occurrences: tuple[cst.Integer, ...] = ()  # a literal tile size: its nodes in the kernel (name is a placeholder)


@dataclass(frozen=True)
class _Trips:
    """A trip count that goes with a block size: `T = 8` counting `for i in range(T)` whose iterations step
    through blocks of B (`x[:, i * B:(i + 1) * B]`), so T * B is the extent covered and B changes only with T."""

    name: str
    literal: cst.Integer
    current: int


def _int_bindings(module: cst.Module, fn: cst.FunctionDef) -> Iterator[tuple[str, cst.Integer]]:
    """Names bound once to a positive integer literal: at module or kernel top level, or as a parameter's
    default the body never rebinds."""
    for param in (*fn.params.params, *fn.params.kwonly_params):
        if isinstance(param.default, cst.Integer) and binding_count(fn, param.name.value) == 1:
            yield param.name.value, param.default
    for owner, stmts in ((module, module.body), (fn, block_statements(fn))):
        for stmt in stmts:
            node, name = small(stmt), assigned_name(stmt)
            if (name is not None and isinstance(node, cst.Assign) and isinstance(node.value, cst.Integer)
                    and binding_count(owner, name) == 1):
                yield name, node.value


def _trip_partner(module: cst.Module, fn: cst.FunctionDef, block: str) -> _Trips | None:
    """The trip-count constant of the loops that walk blocks of `block`, when every use of it is such a
    loop's count (`range(T)` in any loop form)."""
    for name, literal in _int_bindings(module, fn):
        uses = [n for n in name_nodes(fn.body) if n.value == name]
        loops = [n for n in _walk(fn) if isinstance(n, cst.For) and loop_kind(n) is not None
                 and [flat(code_of(a.value)) for a in loop_args(n)] == [name]]
        if name != block and loops and len(uses) == len(loops) and all(_steps_by(loop, block) for loop in loops):
            return _Trips(name, literal, int(literal.value))
    return None


def _steps_by(loop: cst.For, block: str) -> bool:
    """The loop variable multiplies `block` somewhere in the body (`i * B`)."""
    var = loop_var(loop)
    return any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Multiply)
               and {flat(code_of(n.left)), flat(code_of(n.right))} == {var, block} for n in _walk(loop.body))


class RetuneTileSize(ModelRule):
    """Change an integer tile size to another value within the hardware limits that divides the dimensions it tiles:
    larger DMAs when DMA-bound (>= 2 KiB per partition), smaller tiles when SBUF spills."""

    name = "retune_tile_size"

    def plans(self, model: KernelModel) -> list[Plan]:
        module, fn, pos, profile = model.module, model.fn, model.pos, model.profile
        shapes = input_shapes(profile)
        if not shapes:
            return []  # without the sizes it ran at no value can be shown to divide its dimensions
        data = (getattr(profile, "profile", None) or {}) if profile is not None else {}
        latency = model.latency or 0.0
        hardware = model.hardware
        dma_bound = getattr(profile, "bottleneck", None) == "dma" or (
            0 < float(data.get("dma_transfer_average_bytes") or 0) < hardware.dma.transfer_target_bytes)
        spills = float(data.get("spill_save_bytes") or 0) + float(data.get("spill_reload_bytes") or 0) > 0
        peak = float(data.get("sbuf_peak_live_bytes_per_partition") or 0)
        usable = float(data.get("sbuf_usable_bytes_per_partition") or hardware.memory.sbuf_usable_bytes_per_partition)
        line_engines = model.line_engines
        plans: list[Plan] = []
        sizes = [(c, module, fn) for c in _constants(module, fn)] + list(_literal_sizes(module, fn))
        for const, scope, scope_fn in sizes:  # a literal is analysed in its hoisted copy (same lines)
            use = _uses(scope, scope_fn, const.name, pos if scope is module else positions(scope))
            limit = (hardware.memory.sbuf_partitions if use.partition else hardware.tensor.stationary_free_max
                     if use.stationary else hardware.tensor.moving_free_max if use.moving else 1 << 16)
            values = self._values(scope, scope_fn, const, use, shapes, limit)
            trips = None if const.occurrences else _trip_partner(module, fn, const.name)
            if trips is not None:  # the block and its count change together: the loop covers the same extent
                values = [v for v in values if trips.current * const.current % v == 0]
            grow = [v for v in values if v > const.current]
            shrink = [v for v in values if v < const.current]
            if spills:
                ordered, why = sorted(shrink, reverse=True), "smaller tiles for SBUF pressure"
            elif grow and not use.partition:
                ordered, why = sorted(grow, key=lambda v: abs(math.log2(v * ELEMENT_BYTES / _TARGET_BYTES))), \
                    "larger DMA transfers" if dma_bound else "fewer, larger instructions"
            else:
                continue
            dma_time = sum(line_engines.get(line, {}).get("dma", 0.0) for line in use.dma_lines)
            line = line_of(const.occurrences[0] if const.occurrences else const.binding, pos)
            label = (f"the {'partition' if use.partition else 'free'}-axis tile size {const.current} (a literal)"
                     if const.occurrences else const.name)
            params = {"literal": True} if const.occurrences else {"name": const.name}
            if peak:  # the bigger tiles must still fit in SBUF
                ordered = [v for v in ordered if v < const.current or peak * v / const.current <= usable]
            best = max((_dma_gain(const.current, v, hardware) for v in ordered if v > const.current), default=0.05)
            share = (dma_time * best / latency) if latency and dma_bound else 0.01
            for rank, value in enumerate(ordered[:4]):
                priority = max(0.0, min(1.0, share)) * (0.85 ** rank)  # the order above decides
                per_partition = value * ELEMENT_BYTES
                joint, along = {}, ""
                if trips is not None:
                    count = trips.current * const.current // value
                    joint = {"trips": trips.name, "trips_old": trips.current, "trips_new": count}
                    along = f", and its trip count {trips.name} = {count} instead of {trips.current} with it"
                plans.append(Plan(
                    self.name, line,
                    f"line {line}: {label} = {value} instead of {const.current}{along} ({why}; "
                    f"{per_partition} B per partition per FP32 transfer; divides every dimension it tiles)",
                    {**params, "old": const.current, "new": value, **joint}, priority))
        plans.sort(key=lambda p: -p.priority)
        return plans

    @staticmethod
    def _values(module: cst.Module, fn: cst.FunctionDef, const: _Constant, use: _Use,
                shapes: dict[str, tuple[tuple[int, ...], ...]], limit: int) -> list[int]:
        """Values within `limit` that keep every `D // T` loop exact at every task size."""
        step = 32 if use.partition else 128
        candidates = {v for v in (2 ** k for k in range(5, 17)) if v <= limit}
        envs = []
        for variant_shapes in shapes.values():
            env = {**module_constants(module), **shape_values(fn, variant_shapes)}
            dims = [static_value(d, env) for d in use.dims]
            if any(d is None for d in dims):
                return []
            envs.append((env, [int(d) for d in dims if d is not None]))
        for _, dims in envs[:1]:  # divisors of the full size's dimensions (e.g. 3584 for 7168)
            for d in dims:
                candidates |= {v for v in range(step, min(d, limit) + 1, step) if d % v == 0}
        out: list[int] = []
        seen = {tuple(static_value(_with_literal(const, const.current), env) for env, _ in envs)}
        for value in sorted(candidates):
            if value == const.current or not const.current / 4 <= value <= const.current * 16:
                continue
            sizes = tuple(static_value(_with_literal(const, value), env) for env, _ in envs)
            if sizes in seen:
                continue  # the same tiles at every size (e.g. min(cols, v) with v >= cols)
            if all(size is not None and 0 < size <= limit and not any(d % int(size) for d in dims)
                   for size, (_, dims) in zip(sizes, envs, strict=True)):
                seen.add(sizes)
                out.append(value)
        return out

    def rewrite(self, source: str, plan: Plan) -> str:
        model = model_of(source)
        module, fn = model.module, model.fn
        name, old, new = plan.params.get("name"), plan.params.get("old"), plan.params.get("new")
        if plan.params.get("literal"):
            found = [c for c, _, _ in _literal_sizes(module, fn) if c.current == old]
            if len(found) != 1:
                raise RuleError(f"the literal tile size {old} is not in the kernel any more (or has other uses)")
            return replace_nodes(module, {id(n): cst.Integer(str(int(new))) for n in found[0].occurrences}).code
        found = [c for c in _constants(module, fn) if c.name == name and c.current == old]
        if len(found) != 1:
            raise RuleError(f"the tile size {name} = {old} is not in the kernel any more")
        edits = {id(found[0].literal): cst.Integer(str(int(new)))}
        if "trips" in plan.params:
            trips = _trip_partner(module, fn, str(name))
            if trips is None or trips.name != plan.params["trips"] or trips.current != plan.params["trips_old"]:
                raise RuleError(f"the trip count {plan.params['trips']} of {name} is not in the kernel any more")
            edits[id(trips.literal)] = cst.Integer(str(int(plan.params["trips_new"])))
        return replace_nodes(module, edits).code


def _constants(module: cst.Module, fn: cst.FunctionDef) -> Iterator[_Constant]:
    """Tile-size bindings at module or function top level: a positive integer literal, possibly in
    `min(expr, N)` / `max(...)`, or an `nl.tile_size.*` field; and kernel parameters whose default is
    an integer literal (`def kernel(x, tile=512)`) the body never rebinds."""
    nl = alias_of(module, "neuronxcc.nki.language") or "nl"
    for param in (*fn.params.params, *fn.params.kwonly_params):
        default = param.default
        if (isinstance(default, cst.Integer) and int(default.evaluated_value) >= 16
                and binding_count(fn, param.name.value) == 1):
            yield _Constant(param.name.value, param, default, default, int(default.evaluated_value))
    for owner, stmts in ((module, module.body), (fn, block_statements(fn))):
        for stmt in stmts:
            node = small(stmt)
            if not isinstance(node, cst.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0].target
            if not isinstance(target, cst.Name) or binding_count(owner, target.value) != 1:
                continue
            literal = _size_literal(node.value, nl)
            if literal is None:
                continue
            current = (int(literal.value) if isinstance(literal, cst.Integer)
                       else tile_size_constant((dotted(literal) or "").rsplit(".", 1)[-1]) or 0)
            if current >= 16:
                yield _Constant(target.value, stmt, node.value, literal, current)


def _literal_sizes(module: cst.Module, fn: cst.FunctionDef) -> Iterator[tuple[_Constant, cst.Module, cst.FunctionDef]]:
    """Integer literals of the kernel used only as tile sizes, each as the constant of a copy of
    `module` in which it is a placeholder name bound after the kernel (so no line moves): the
    analysis of named constants then reads it unchanged."""
    nl = alias_of(module, "neuronxcc.nki.language") or "nl"
    up = parents(module)
    found: dict[int, list[cst.Integer]] = {}
    for node in walk(fn.body):
        if isinstance(node, cst.Integer):
            found.setdefault(int(node.evaluated_value), []).append(node)
    for value, nodes in found.items():
        kinds = {_tile_context(n, up, nl) for n in nodes}
        if value < 16 or None in kinds or "loop" not in kinds:  # a `D // V` loop bound shows it tiles
            continue
        name = fresh_name(module, f"_tile_{value}")
        hoisted = replace_nodes(module, {id(n): cst.Name(name) for n in nodes})
        hoisted = hoisted.with_changes(body=[*hoisted.body, parse_statement(f"{name} = {value}\n")])
        hoisted_fn = kernel_function(hoisted)
        for const in _constants(hoisted, hoisted_fn) if hoisted_fn is not None else ():
            if const.name == name:
                yield replace(const, occurrences=tuple(nodes)), hoisted, hoisted_fn


def _tile_context(node: cst.Integer, up: Mapping[cst.CSTNode, cst.CSTNode], nl: str) -> str | None:
    """How a literal is used: "loop" for `D // V` as a loop argument, "tile" for index arithmetic
    (slice bounds, `nl.ds`, an index expression, `nl.arange(V)`, an allocation shape), None for any
    other use (a scalar operand, a comparison...), which rules the number out as a tile size."""
    child, top = node, up.get(node)
    while isinstance(top, cst.BinaryOperation | cst.UnaryOperation) or (  # climb through arithmetic, nl.ds(...)
            isinstance(top, cst.Call) and call_name(top) in (f"{nl}.ds", f"{nl}.par_dim")) or (
            isinstance(top, cst.Arg) and call_name(up.get(top)) in (f"{nl}.ds", f"{nl}.par_dim")):
        child, top = top, up.get(top)
    outer = up.get(top) if top is not None else None
    if isinstance(top, cst.Arg) and isinstance(outer, cst.Call):
        loop = up.get(outer)
        in_loop = isinstance(loop, cst.For) and loop.iter is outer
        if in_loop and (isinstance(child, cst.BinaryOperation) and isinstance(child.operator, cst.FloorDivide)
                        and child.right is node):
            return "loop"
        if in_loop and child is node and len(outer.args) == 3 and outer.args[2] is top:  # range(0, D, V)
            return "loop"
        return "tile" if call_name(outer) == f"{nl}.arange" else None
    if isinstance(top, cst.Slice) and (child is top.lower or child is top.upper):
        return "tile"
    if isinstance(top, cst.Index) and child is not node:  # `x[256]` alone is an index, not a tile
        return "tile"
    if isinstance(top, cst.Element) and isinstance(outer, cst.Tuple):
        arg = up.get(outer)
        call = up.get(arg) if arg is not None else None
        if (isinstance(call, cst.Call) and call.args and call.args[0] is arg
                and call_name(call) in {f"{nl}.{a}" for a in _ALLOCATIONS}):
            return "tile"
    return None


def _size_literal(value: cst.BaseExpression, nl: str) -> cst.BaseExpression | None:
    if isinstance(value, cst.Integer):
        return value
    if isinstance(value, cst.Attribute):
        name = dotted(value) or ""
        limit = name.rsplit(".", 1)[-1]  # an element count (`pmax`, `gemm_moving_fmax`), not bytes or alignments
        if name.startswith(f"{nl}.tile_size.") and limit.endswith("max") and tile_size_constant(limit):
            return value
        return None
    if isinstance(value, cst.Call) and call_name(value) in ("min", "max") and len(value.args) == 2:
        ints = [a.value for a in value.args if isinstance(a.value, cst.Integer)]
        return ints[0] if len(ints) == 1 else None
    return None


def _with_literal(const: _Constant, value: int) -> cst.BaseExpression:
    if const.value is const.literal:
        return cst.Integer(str(value))
    return replace_nodes(const.value, {id(const.literal): cst.Integer(str(value))})


def _uses(module: cst.Module, fn: cst.FunctionDef, name: str, pos: Any) -> _Use:
    """How `name` (and the names computed from it) is used in the kernel."""
    nl = alias_of(module, "neuronxcc.nki.language") or "nl"
    use = _Use()
    derived = {name}
    for other, value in single_assignments(fn).items():  # e.g. i_f = nl.arange(tile_f)[None, :]
        if name in names_in(value) and _arange_axis(value, nl) is not None:
            derived.add(other)
            if _arange_axis(value, nl) == 0:
                use.partition = True
    loaded_into: dict[str, set[str]] = {}
    for node in _walk(fn):
        if isinstance(node, cst.For) and isinstance(node.iter, cst.Call):
            stepped = _stepped_extent(node, name)
            if stepped is not None:
                use.dims.append(stepped)
            for arg in node.iter.args:
                value = arg.value
                if (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.FloorDivide)
                        and isinstance(value.right, cst.Name) and value.right.value == name):
                    left = value.left
                    ceil = isinstance(left, cst.BinaryOperation) and name in names_in(left)
                    if not ceil:
                        use.dims.append(left)
        if isinstance(node, cst.Subscript):
            first = _first_sliced(node)
            for i, element in enumerate(node.slice):
                if names_in(element) & derived and i == first and len(node.slice) > 1:
                    use.partition = True
        if isinstance(node, cst.Call):
            callee = call_name(node) or ""
            head, _, fn_name = callee.rpartition(".")
            mentions = any(names_in(a.value) & derived for a in node.args)
            if head == nl and fn_name in ("load", "store") and mentions:
                use.dma_lines.add(line_of(node, pos))
            if fn_name in _MATMUL_CALLS or fn_name == "nc_transpose":
                for index, arg in enumerate(a for a in node.args if a.keyword is None):
                    used = names_in(arg.value)
                    sliced = bool(used & derived) or any(used & names for names in loaded_into.values()
                                                         if names & derived)
                    if sliced and (index == 0 or fn_name == "nc_transpose"):
                        use.stationary = True
                    elif sliced:
                        use.moving = True
            if head == nl and fn_name in _ALLOCATIONS and node.args:
                shape = node.args[0].value
                buffer = keyword(node, "buffer")
                psum = buffer is not None and flat(code_of(buffer.value)).endswith(".psum")
                if isinstance(shape, cst.Tuple):
                    for i, element in enumerate(shape.elements):
                        if names_in(element.value) & derived:
                            if i == 0 and "par_dim" not in flat(code_of(shape)):
                                use.partition = True
                            elif psum:
                                use.moving = True
        if (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                and call_name(node.value) == f"{nl}.load"):
                loaded_into[node.targets[0].target.value] = names_in(node.value)
    # loads of tiles later used as matmul operands also count
    for node in _walk(fn):
        if isinstance(node, cst.Call) and (call_name(node) or "").rsplit(".", 1)[-1] in _MATMUL_CALLS:
            for index, arg in enumerate(a for a in node.args if a.keyword is None):
                for used in names_in(arg.value):
                    if loaded_into.get(used, set()) & derived:
                        if index == 0:
                            use.stationary = True
                        else:
                            use.moving = True
    return use


def _stepped_extent(loop: cst.For, name: str) -> cst.BaseExpression | None:
    """The extent `stop - start` a loop `range(start, stop, name)` (any loop form) tiles by its step
    `name`, or None when `name` is not its step: public kernels write `range(0, D, T)` for `range(D // T)`."""
    args = loop_args(loop)
    if loop_kind(loop) is None or len(args) != 3 or any(a.keyword is not None for a in args):
        return None
    start, stop, step = (a.value for a in args)
    if not (isinstance(step, cst.Name) and step.value == name):
        return None
    if isinstance(start, cst.Integer) and int(start.evaluated_value) == 0:
        return stop
    return cst.BinaryOperation(left=stop, operator=cst.Subtract(), right=start)


def _first_sliced(sub: cst.Subscript) -> int:
    """Index of the first element of a subscript that is not a plain integer index (the partition
    axis of the tile an HBM access makes)."""
    for i, element in enumerate(sub.slice):
        if isinstance(element.slice, cst.Slice):
            return i
        value = element.slice.value if isinstance(element.slice, cst.Index) else None
        if value is not None and not isinstance(value, cst.Integer | cst.Name):
            return i
    return 0


def _arange_axis(value: cst.BaseExpression, nl: str) -> int | None:
    """0 for `nl.arange(n)[:, None]`, 1 for `nl.arange(n)[None, :]`, else None."""
    if not isinstance(value, cst.Subscript) or call_name(value.value) != f"{nl}.arange":
        return None
    texts = [flat(code_of(e.slice)) for e in value.slice]
    if texts[:2] == [":", "None"]:
        return 0
    if texts[:2] == ["None", ":"]:
        return 1
    return None


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


def _dma_gain(current: int, value: int, hardware: HardwareProfile) -> float:
    """Share of DMA time saved by transfers of `value` instead of `current` elements per partition
    (every partition, FP32): the generation's fixed setup amortised over its DMA bandwidth, with the rule's
    own estimate of small-transfer efficiency. The queues overlap setup in practice, so half the standalone
    estimate is claimed."""
    dma, partitions = hardware.dma, hardware.memory.sbuf_partitions

    def per_byte(elements: int) -> float:
        size = elements * ELEMENT_BYTES
        efficiency = min(1.0, size / (size + 256) * 1.06)
        return (dma.fixed_cost_s + partitions * size / (dma.engines * dma.engine_bandwidth * efficiency)) / (
            partitions * size)

    return max(0.0, 0.5 * (1.0 - per_byte(value) / per_byte(current)))
