"""shrink_blocks: a block tensor whose blocks are each written and read within one iteration of a
loop becomes a tile declared inside that loop.

Compiler output declares every intermediate up front with block dimensions for every loop around
it, `v6 = nl.ndarray((32, 7, 2, nl.par_dim(128), 512), ...)` used as `v6[i0, i1, i2, ...]` inside
`for i2`. When the analysis shows each iteration touches only its own blocks (the block indices
are the same affine forms of the loop variables in every access, different in every iteration),
no value flows from one iteration to another, so the tensor can be `v6 = nl.ndarray((nl.par_dim(128),
512), ...)` declared at the top of the loop body, its accesses without those block indices. Block
dimensions indexed by loops inside the iteration stay. The kernel then declares per iteration what
it uses per iteration: the SBUF it asks for shrinks by the trip counts, the allocator has no
whole-array intermediates to place (where the compiler spilled them), and the simulator allocates
a tile instead of the whole array.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from . import cst_util as u
from .analysis import KernelModel, Locality, ModelRule, Tensor, model_of
from .base import Plan, RuleError

_PRIORITY = 0.002  # the same instructions run: a small share for the footprint, after the rewrites that save time


@dataclass(frozen=True)
class _Shrink:
    tensor: Tensor
    where: Locality

    @property
    def kept_shape(self) -> tuple[int | None, ...]:
        return tuple(d for i, d in enumerate(self.tensor.shape) if i not in self.where.dims)


def shrinkable(model: KernelModel) -> list[_Shrink]:
    """Every block tensor the analysis finds local to single iterations of a loop."""
    found = []
    for name, tensor in model.tensors.items():
        where = model.iteration_local(name)
        if isinstance(where, Locality) and tensor.decl is not None:
            found.append(_Shrink(tensor, where))
    return found


class ShrinkBlocks(ModelRule):
    """Declare a block tensor whose blocks live within one loop iteration as a tile inside that loop: the kernel
    asks SBUF for one iteration's tile instead of the whole array, nothing else changes."""

    name = "shrink_blocks"

    def plans(self, model: KernelModel) -> list[Plan]:
        found = shrinkable(model)
        # every tensor at once: shrinking one changes nothing the others depend on, and one plan is
        # one evaluation, where a search on a kernel of many intermediates spends its time
        return [self._plan(model, found)] if found else []

    def _plan(self, model: KernelModel, shrinks: Sequence[_Shrink]) -> Plan:
        names = sorted(s.tensor.name for s in shrinks)
        partitions = model.hardware.memory.sbuf_partitions
        before = sum(_bytes(s.tensor.shape, partitions) or 0 for s in shrinks)
        after = sum(_bytes(s.kept_shape, partitions) or 0 for s in shrinks)
        saved = f" ({before // 1024:,} -> {after // 1024:,} KiB per partition declared)" if before else ""
        if len(shrinks) == 1:
            s = shrinks[0]
            shape = ", ".join("?" if d is None else str(d) for d in s.kept_shape)
            what = (f"declare `{s.tensor.name}` inside `for {s.where.loop.var}` (line {s.where.loop.line}) as a "
                    f"({shape}) tile: each of its blocks is written and read within one iteration{saved}")
            line = s.tensor.decl.line if s.tensor.decl is not None else s.where.loop.line
        else:
            what = (f"declare the {len(shrinks)} block tensors used within single loop iterations "
                    f"({', '.join(names)}) inside their loops{saved}")
            line = min(s.tensor.decl.line for s in shrinks if s.tensor.decl is not None)
        priority = _PRIORITY * (1.0 + math.log1p(len(shrinks)))
        return Plan(self.name, line, what[0].upper() + what[1:] + ".", {"tensors": names}, priority)

    def rewrite(self, source: str, plan: Plan) -> str:
        model = model_of(source)
        by_name = {s.tensor.name: s for s in shrinkable(model)}
        wanted = list(plan.params.get("tensors") or [])
        missing = [n for n in wanted if n not in by_name]
        if missing or not wanted:
            raise RuleError(f"`{missing[0] if missing else '?'}` is no longer used within single iterations")
        module = _rewrite(model, [by_name[n] for n in wanted])
        return u.compiled_code(module, "shrink_blocks")


def _bytes(shape: Sequence[int | None], partitions: int) -> int | None:
    """Bytes per partition of a tensor of `shape` spread over every partition, its elements of unknown dtype (an
    estimate for the plan's text)."""
    if any(d is None for d in shape):
        return None
    dims = [int(d) for d in shape if d is not None]
    return u.ELEMENT_BYTES * math.prod(dims) // partitions if dims else None


def _new_declaration(shrink: _Shrink) -> cst.SimpleStatementLine:
    """`name = <the same allocation call>` with the block dimensions of the iteration dropped."""
    decl = shrink.tensor.decl
    assert decl is not None

    def kept(elements: list[cst.Element]) -> list[cst.Element]:
        out = [e for i, e in enumerate(elements) if i not in shrink.where.dims]
        if len(out) == 1:
            out = [out[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
        out[-1] = out[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return out

    comments = [line for line in decl.stmt.leading_lines if line.comment is not None]  # they move with it
    return u.with_allocated_shape(decl.stmt, shrink.tensor.name, kept).with_changes(leading_lines=comments)


def _rewrite(model: KernelModel, shrinks: Sequence[_Shrink]) -> cst.Module:
    subscripts: dict[int, tuple[int, ...]] = {}
    removed: set[int] = set()
    declarations: dict[int, list[cst.SimpleStatementLine]] = {}
    for s in shrinks:
        assert s.tensor.decl is not None
        removed.add(id(s.tensor.decl.stmt))
        body = s.where.loop.node.body
        declarations.setdefault(id(body), []).append(_new_declaration(s))
        for op, ref in model.refs(s.tensor.name):
            if op is not s.tensor.decl and isinstance(ref.node, cst.Subscript):
                subscripts[id(ref.node)] = s.where.dims

    class _Shrinker(cst.CSTTransformer):
        def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:  # noqa: N802
            dims = subscripts.get(id(original))
            if dims is None:
                return updated
            kept = [e for i, e in enumerate(updated.slice) if i not in dims]
            if not kept:
                kept = [cst.SubscriptElement(cst.Index(cst.Ellipsis()))]
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(slice=kept)

        def leave_IndentedBlock(  # noqa: N802
                self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
            body = [s for o, s in zip(original.body, updated.body, strict=True) if id(o) not in removed]
            new = declarations.get(id(original), [])
            if new and body:
                first = body[0]
                new = [new[0].with_changes(leading_lines=[*first.leading_lines, *new[0].leading_lines]), *new[1:]]
                body = [*new, first.with_changes(leading_lines=[]), *body[1:]]
            return updated.with_changes(body=body or [cst.SimpleStatementLine([cst.Pass()])])

    return model.module.visit(_Shrinker())
