"""What the compiler does with a kernel's on-chip tensors before anything runs: reuse, allocation, spill.

The simulator records the kernel as written; the Neuron compiler (2025) changes how much of it reaches
the hardware. The calibration set's counters (docs/calibration.md, cases.json) show four mechanisms:

1. Redundant data movement is done once. A load of an HBM region that is already on chip, a transpose
   or copy of a value that was already transposed or copied, is the same value again: the compiler
   keeps the first result instead of redoing it, when what it must keep for that fits in the memory
   (add_rmsnorm_matmul loads its weights once, not once per row tile: 42 MB read, not 302 MB; swiglu
   and bmm_softmax transpose their input once: transpose_flops a third / a quarter of the written
   ones). Where the kept values do not fit, the work is redone as written (matmul re-transposes its
   left operand for every column block: transpose_flops as written). What only fed a removed
   instruction is dead and removed too.
2. Allocation per block, dead after its last access (a tensor declared with block dimensions in front
   of the partition dimension is allocated block by block). Where the live blocks exceed the usable
   SBUF, the block whose next use is furthest away gives way.
3. What gives way depends on where it came from. A block that only holds data loaded from HBM is not
   saved: its load statement is re-issued next to every use instead (matmul: the right operand block
   of 160 KiB/partition does not fit beside the rest and is fetched again for every row tile, 9.06 GB
   read and 0 spill bytes). Computed data is saved to HBM once and reloaded at its next use (spill):
   bmm_softmax spills the part of its score tiles that does not fit, gqa_full nearly all of them.
4. Sibling loops of one trip count fuse where the later consumes what the earlier wrote, iteration by
   iteration (swiglu's gate and up loops, and inside them the loops over row tiles): the gate's output
   never spills. trn1 spills 16.8 MB there, exactly the transposed input the compiler keeps instead of
   re-transposing, saved once as one allocation; program order would spill 49 MB of gate output. A
   block reloaded and not written since is not saved again: its copy in HBM is still current.
5. PSUM is spilled like SBUF: it holds 16 KiB per partition however large the PSUM tensors a kernel
   declares; the accumulation results live beyond that are saved after they are written (copied to SBUF by
   Vector or Scalar, then to HBM: a DMA moves between HBM and SBUF only) and reloaded before they are read,
   in the order SBUF's walk took (autocomp attention 02, trn1: all of Q @ K^T, 512 KiB per partition, kept
   in PSUM for three passes ran 1.57 ms where the same work recomputed block by block, 03, ran 1.02 ms).

The result is an `AllocationPlan`: which instructions the hardware does not execute, and per
instruction the bytes re-fetched from HBM, reloaded from spill before it and saved after it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from accelopt_core.nki.dtypes import DTYPE_SIZES
from accelopt_core.nki.instructions import DECLARED
from accelopt_core.nki.trace import Access, Instruction, Loop, Op, TensorInfo, Trace

Block = tuple[int, tuple[int, ...]]  # (tensor id, block index); () for a tensor without block dims
Region = tuple[tuple[int, int], ...]

# Instructions that only move or reshape data: the same inputs give the same result, so a repeat is
# redundant. Arithmetic is left as written (its parameters are not all in the trace).
_MOVES = frozenset(op for op, declared in DECLARED.items() if declared.moves)


def _is_move(inst: Instruction) -> bool:
    """Only moves data (a DMA that adds into its destination, dst_rmw_op, is arithmetic)."""
    return inst.op in _MOVES and not (inst.attrs and inst.attrs.get("rmw"))


@dataclass(slots=True)
class AllocationPlan:
    """The compiler's version of the trace: what runs, and the extra traffic around each instruction."""

    dropped: list[bool]  # not executed: redundant, dead, or a load re-issued at its uses
    same_as: list[int]  # for a redundant instruction, the one whose result it reuses; else -1
    reuses_buffer_of: list[int]  # the last access to the block whose physical buffer it takes; else -1
    refetch: list[int]  # bytes loaded again from HBM before the instruction (a re-issued load)
    refetch_line: list[int]  # the load statement those bytes come from (0: none)
    reload: list[int]  # spilled bytes reloaded before the instruction
    reload_after: list[int]  # the instruction whose spill save that reload must follow; else -1
    save: list[int]  # bytes saved to HBM after the instruction (spill)
    peak_bytes_per_partition: int  # live SBUF blocks at their peak, before anything gives way
    capacity_bytes_per_partition: int
    streamed_lines: set[int] = field(default_factory=set)  # load statements re-issued at every use
    # instruction with a refetch or reload -> SBUF bytes per partition still free once its blocks are in:
    # how many more of those transfers can be in flight ahead of their uses
    room: dict[int, int] = field(default_factory=dict)
    # the instructions dropped because only dropped instructions read what they wrote (mechanism 1)
    dead: list[int] = field(default_factory=list)
    # loop statements (their lines) the walk ran as one loop, each group with how many times it ran
    # merged (mechanism 4), and the live SBUF peak in program order that merging brought down
    merged_loops: dict[tuple[int, ...], int] = field(default_factory=dict)
    unmerged_peak_bytes_per_partition: int = 0
    psum_peak_bytes_per_partition: int = 0  # live PSUM blocks at their peak, in program order (mechanism 5)
    # instruction -> the PSUM blocks spilled there, each (partitions, elements per partition, dtype): a DMA
    # reaches only HBM and SBUF, so each is first copied to SBUF by an engine (mechanism 5)
    psum_copies: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)

    @property
    def spills(self) -> bool:
        return any(self.save) or any(self.reload)


def plan_allocation(trace: Trace, sbuf_capacity: int, psum_capacity: int, buffers: int) -> AllocationPlan:
    """The allocation plan of `trace` for an SBUF of `sbuf_capacity` and a PSUM of `psum_capacity`
    usable bytes per partition, with `buffers` physical buffers per tile of a loop body."""
    n = len(trace.instructions)
    blocks = _BlockIndex(trace)
    same_as = _reuse(trace, blocks, {"sbuf": sbuf_capacity, "psum": psum_capacity})
    dropped = [j >= 0 for j in same_as]
    instructions = trace.instructions
    dead: list[int] = []
    if any(any(a.buffer != "hbm" for a in instructions[i].reads) for i in itertools.compress(range(n), dropped)):
        _drop_dead(trace, blocks, dropped)  # a repeat of on-chip data may leave its inputs' producers dead
        dead = [i for i in itertools.compress(range(n), dropped) if same_as[i] < 0]
    plan = AllocationPlan(dropped, same_as, [-1] * n, [0] * n, [0] * n, [0] * n, [-1] * n, [0] * n, 0, sbuf_capacity,
                          dead=dead)
    uses = blocks.uses("sbuf", dropped)  # every executed access to each SBUF block
    _rotate(trace, uses, buffers, plan.reuses_buffer_of)
    order = _allocate(trace, blocks, plan, uses)
    _spill_psum(trace, blocks, plan, psum_capacity, order)
    return plan


class _BlockIndex:
    """The on-chip blocks every access of the trace touches, worked out once for all passes, and the
    first and last access of every block."""

    def __init__(self, trace: Trace) -> None:
        self.tensors = trace.tensors
        # a tensor without block dimensions is one block: every access to it shares that one tuple
        whole: dict[int, tuple[Block, ...]] = {}
        self.block_axes: dict[int, int] = {}  # tensor with block dimensions -> its partition axis
        blocked = self.block_axes
        for tid, info in trace.tensors.items():
            if info.buffer != "hbm":
                if info.partition_axis > 0:
                    blocked[tid] = info.partition_axis
                else:
                    whole[tid] = ((tid, ()),)

        def owned(accesses: tuple[Access, ...]) -> list[tuple[Access, tuple[Block, ...]]]:
            out = []
            for acc in accesses:
                if acc.buffer == "hbm":
                    continue
                own = whole.get(acc.tensor)
                if own is None:
                    axis = blocked.get(acc.tensor)
                    if axis is None:
                        continue
                    own = _own_blocks(acc, axis)
                out.append((acc, own))
            return out

        self.reads: list[list[tuple[Access, tuple[Block, ...]]]] = [owned(inst.reads) for inst in trace.instructions]
        self.writes: list[list[tuple[Access, tuple[Block, ...]]]] = [owned(inst.writes) for inst in trace.instructions]
        self.alias: dict[Block, Block] = {}

    def uses(self, buffer: str | None = None, dropped: list[bool] | None = None) -> dict[Block, list[int]]:
        """The instructions that access each block, in program order, the blocks in the order of their
        first access: all accesses, or only those in `buffer` by the instructions not `dropped`."""
        at: dict[Block, list[int]] = {}
        for i, (reads, writes) in enumerate(zip(self.reads, self.writes, strict=True)):
            if dropped is not None and dropped[i]:
                continue
            for accesses in (reads, writes):
                for acc, own in accesses:
                    if buffer is not None and acc.buffer != buffer:
                        continue
                    for b in own:
                        seen = at.get(b)
                        if seen is None:
                            at[b] = [i]
                        elif seen[-1] != i:
                            seen.append(i)
        return at

    def reuse(self, alias: dict[Block, Block], accessed_at: dict[Block, list[int]]) -> None:
        """From now on, accesses to the blocks of `alias` go to the blocks they reuse."""
        self.alias = alias
        for i in {i for b in alias for i in accessed_at[b]}:  # each instruction's entries change on their own
            for mine in (self.reads[i], self.writes[i]):
                for k, (acc, own) in enumerate(mine):
                    if own[0] in alias or (len(own) > 1 and any(b in alias for b in own)):
                        mine[k] = (acc, tuple(alias.get(b, b) for b in own))

    def sizes(self, blocks: Iterable[Block]) -> dict[Block, float]:
        """Bytes per partition of each block (one block of a tensor is as large as any other)."""
        per_tensor: dict[int, float] = {}
        sizes: dict[Block, float] = {}
        for b in blocks:
            size = per_tensor.get(b[0])
            if size is None:
                size = per_tensor[b[0]] = self.size(b)
            sizes[b] = size
        return sizes

    def size(self, block: Block) -> float:
        """Bytes per partition of one block."""
        info = self.tensors[block[0]]
        axis = max(0, info.partition_axis)
        return info.bytes_per_partition / math.prod(info.shape[:axis]) if axis else float(info.bytes_per_partition)

    def buffer(self, block: Block) -> str:
        return self.tensors[block[0]].buffer


def _own_blocks(acc: Access, axis: int) -> tuple[Block, ...]:
    """The blocks an access to a tensor with block dimensions in front of partition `axis` touches."""
    region = acc.region[:axis]
    if all(hi - lo == 1 for lo, hi in region):
        return ((acc.tensor, tuple(lo for lo, _ in region)),)
    return tuple((acc.tensor, b) for b in itertools.product(*(range(lo, hi) for lo, hi in region)))


def _inner(acc: Access, info: TensorInfo) -> Region:
    """The part of a region inside its block (partition and free dimensions)."""
    return acc.region[max(0, info.partition_axis):]


# ------------------------------------------------------------------------------------------------
# 1. Redundant data movement
# ------------------------------------------------------------------------------------------------


def _reuse(trace: Trace, blocks: _BlockIndex, capacity: dict[str, int]) -> list[int]:
    """For every instruction the earlier one whose result it may reuse (-1: none), decided per
    statement: the deepest copies first (their inputs may then die), each kept only if the values it
    keeps alive fit beside the ones kept already."""
    same_as = [-1] * len(trace.instructions)
    repeats, moved = _moved(trace)
    if not repeats:
        return same_as
    candidates, depth = _repeats(trace, blocks, moved)
    if not candidates:
        return same_as
    accessed_at = blocks.uses()
    alias: dict[Block, Block] = {}
    kept: dict[Block, tuple[int, int]] = {}  # kept block -> its extended (first, last) access
    live = {buffer: _LiveSizes(len(trace.instructions)) for buffer in capacity}  # the kept blocks' sizes, live
    by_statement: dict[tuple[int, int], list[tuple[int, int, Block, Block]]] = {}
    for i, (j, own, kept_block) in candidates.items():
        by_statement.setdefault((-depth[i], trace.instructions[i].line), []).append((i, j, own, kept_block))
    for _, group in sorted(by_statement.items()):
        spans: dict[Block, tuple[int, int]] = {}  # what the group would extend, over `kept`
        for _, _, own, kept_block in group:
            first, last = (spans.get(kept_block) or kept.get(kept_block)
                           or (accessed_at[kept_block][0], accessed_at[kept_block][-1]))
            until = accessed_at[own][-1]
            spans[kept_block] = (first, until if until > last else last)
        added = []  # (memory, first, last, size): each kept block live over the points it now adds
        for b, (first, last) in spans.items():
            before, memory = kept.get(b), live.get(blocks.buffer(b))
            if memory is not None and (before is None or last > before[1]):
                added.append((memory, first if before is None else before[1] + 1, last, blocks.size(b)))
        for memory, first, last, size in added:
            memory.add(first, last, size)
        if all(memory.most() <= capacity[buffer] for buffer, memory in live.items()):
            kept.update(spans)
            for i, j, own, kept_block in group:
                same_as[i] = j
                alias[own] = kept_block
        else:
            for memory, first, last, size in added:
                memory.add(first, last, -size)
    if alias:
        blocks.reuse(alias, accessed_at)
    return same_as


def _moved(trace: Trace) -> tuple[bool, set[int]]:
    """A quick look that lets most kernels skip value numbering: whether two moves read the same
    regions (only then can one repeat another; `_repeats` tells), and the on-chip tensors moves read
    (the only ones whose values need tracking)."""
    seen: set[tuple] = set()
    repeats = False
    read: set[int] = set()
    for inst in trace.instructions:
        op = inst.op
        if not _is_move(inst):
            continue
        reads = inst.reads
        if not repeats:
            key = (op, *((a.tensor, a.region, a.elements) for a in reads))
            repeats = key in seen
            seen.add(key)
        if op != Op.DMA_COPY or reads[0].buffer != "hbm":
            read.update(a.tensor for a in reads if a.buffer != "hbm")
    return repeats, read


def _repeats(trace: Trace, blocks: _BlockIndex, moved: set[int]
             ) -> tuple[dict[int, tuple[int, Block, Block]], dict[int, int]]:
    """Data movement that repeats an earlier one on the same values: instruction -> (earlier one, the
    block it writes, the block the earlier one wrote); and each one's depth in its chain of moves.
    `moved`: the on-chip tensors some move reads (values elsewhere are never looked up)."""
    tensors = trace.tensors
    axes = blocks.block_axes  # every other on-chip tensor has its partition axis first
    values: dict[tuple[int, tuple[int, ...]], dict[Region, int]] = {}  # on-chip block -> region -> value
    hbm_version: dict[int, int] = {}  # HBM memory (the tensor every view of it reshapes) -> writes to it so far
    memory = _memory_of(tensors)
    seen: dict[tuple, tuple[int, int, Block, Region]] = {}
    depth_of: dict[int, int] = {}  # value -> depth of the move chain that made it
    candidates: dict[int, tuple[int, Block, Block]] = {}
    depth: dict[int, int] = {}
    conflicted: set[Block] = set()
    written_by: dict[Block, int] = {}  # block -> the earlier block it repeats (-1 when written otherwise)
    fresh = itertools.count(1)
    hbm_values: dict[tuple, int] = {}
    for i, (inst, writes) in enumerate(zip(trace.instructions, blocks.writes, strict=True)):
        if len(writes) < len(inst.writes):  # some write goes to HBM
            for acc in inst.writes:
                if acc.buffer == "hbm":
                    root = memory[acc.tensor]
                    hbm_version[root] = hbm_version.get(root, 0) + 1
        if not _is_move(inst):
            # computed values never repeat here (arithmetic is left as written): forget what was there
            for acc, own in writes:
                tracked = acc.tensor in moved
                for b in own:
                    if tracked:
                        values.pop(b, None)
                    if written_by.setdefault(b, None) is not None:
                        conflicted.add(b)
            continue
        reads = inst.reads
        attrs = inst.attrs or {}
        if len(reads) == 1 and reads[0].buffer == "hbm" and inst.writes and inst.writes[0].buffer != "hbm" \
                and not attrs.get("indirect"):
            # the common case, a load: its value is the HBM region as last written
            src, out = reads[0], inst.writes[0]
            ident = _hbm_ident(src, memory, hbm_version)
            value = hbm_values.get(ident)
            if value is None:
                value = hbm_values[ident] = next(fresh)
            key: tuple | None = (inst.op, (value,), out.shape, out.dtype, out.nbytes, bool(attrs.get("transpose")))
            made = 1
        else:
            key = _move_key(inst, tensors, memory, values, hbm_version, hbm_values, fresh)
            made = 1 + max((depth_of.get(v, 0) for v in key[1]), default=0) if key is not None else 1
        for acc, own in writes:
            inner = acc.region[axes.get(acc.tensor, 0):]
            exact = acc.elements is None  # it writes the whole box `inner`: else what it holds is not known whole
            single = len(own) == 1 and exact
            earlier = seen.get(key) if key is not None and single else None
            if earlier is not None and earlier[3] == inner and earlier[2] != own[0]:
                j, value, kept_block, _ = earlier
                candidates[i] = (j, own[0], kept_block)
                depth[i] = depth_of.get(value, 1)
                _note_writer(written_by, conflicted, own[0], kept_block)
            else:
                value = next(fresh)
                if key is not None and single:
                    seen[key] = (i, value, own[0], inner)
                    depth_of[value] = made
                for b in own:
                    if written_by.setdefault(b, None) is not None:
                        conflicted.add(b)
            if acc.tensor in moved:
                for b in own:
                    regions = values.get(b)
                    if regions is None:
                        if exact:
                            values[b] = {inner: value}
                    else:
                        _set_value(values, b, inner, value if exact else None)
    return {i: c for i, c in candidates.items() if c[1] not in conflicted}, depth


def _note_writer(written_by: dict[Block, int], conflicted: set[Block], block: Block, kept: Block | None) -> None:
    """A block can reuse another only if every write to it repeats a write to that same block."""
    tag = written_by.setdefault(block, kept)
    if tag != kept:
        conflicted.add(block)


def _memory_of(tensors: dict[int, TensorInfo]) -> dict[int, int]:
    """Each tensor's memory: the tensor it views (reshape, dtype view), followed to the one that owns the
    allocation, else itself. A write through any view changes what every other view of that memory reads."""
    memory: dict[int, int] = {}
    for tid, info in tensors.items():
        root = tid
        while info is not None and info.alias_of >= 0:
            root = info.alias_of
            info = tensors.get(root)
        memory[tid] = root
    return memory


def _hbm_ident(acc: Access, memory: dict[int, int], hbm_version: dict[int, int]) -> tuple:
    """What an HBM read reads: the exact elements (bounding box and `Access.elements`, so disjoint pieces of
    one box differ) as its memory holds them after the writes so far (through whatever view)."""
    return acc.tensor, acc.region, acc.elements, hbm_version.get(memory.get(acc.tensor, acc.tensor), 0)


def _move_key(inst: Instruction, tensors: dict[int, TensorInfo], memory: dict[int, int], values: dict,
              hbm_version: dict[int, int],
              hbm_values: dict[tuple, int], fresh: itertools.count) -> tuple | None:
    """What the result of a data movement depends on: the op, its flags, its input values and its
    output shape; None when an input's value is not known exactly."""
    attrs = inst.attrs or {}
    if attrs.get("indirect") or attrs.get("accumulate") or any(a.buffer == "hbm" for a in inst.writes):
        return None
    inputs: list[int] = []
    for acc in inst.reads:
        if acc.buffer == "hbm":
            ident = _hbm_ident(acc, memory, hbm_version)
            value = hbm_values.get(ident)
            if value is None:
                value = hbm_values[ident] = next(fresh)
        else:
            info = tensors.get(acc.tensor)
            if info is None:
                return None
            if acc.elements is not None:
                return None  # not a whole box of the block: which of its values it reads is not followed
            axis = max(0, info.partition_axis)
            block = tuple(lo for lo, _ in acc.region[:axis])
            value = _value_of(values.get((acc.tensor, block)), _inner(acc, info), hbm_values, fresh)
            if value is None:
                return None
        inputs.append(value)
    out = inst.writes[0]
    return (inst.op, tuple(inputs), out.shape, out.dtype, out.nbytes, bool(attrs.get("transpose")))


def _value_of(regions: dict[Region, int] | None, inner: Region, derived: dict[tuple, int],
              fresh: itertools.count) -> int | None:
    """The value in `inner`: the one written there, or a part of one written around it."""
    if not regions:
        return None
    value = regions.get(inner)
    if value is not None:
        return value
    for region, whole in regions.items():
        if all(olo <= ilo and ihi <= ohi for (olo, ohi), (ilo, ihi) in zip(region, inner, strict=False)):
            part = (whole, inner)
            value = derived.get(part)
            if value is None:
                value = derived[part] = next(fresh)
            return value
    return None


def _set_value(values: dict, block: Block, inner: Region, value: int | None) -> None:
    """Record the value now in `inner` of `block` (None: written, but not as one known value), forgetting
    the values it overwrote in part."""
    regions = values.setdefault(block, {})
    if regions and (inner not in regions or value is None):
        for other in [r for r in regions if _overlap(r, inner)]:
            del regions[other]
    if value is not None:
        regions[inner] = value


def _overlap(a: Region, b: Region) -> bool:
    return all(alo < bhi and blo < ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=False))


class _LiveSizes:
    """Sizes live over spans of `n` points and the largest total live at one point, kept up to date as spans
    are added or taken back: a segment tree with range add and the maximum at its root, O(log n) a change
    (the kept values were checked again in full for every statement: 16,000 one-element loads on lines of
    their own took the model 74 s)."""

    def __init__(self, n: int) -> None:
        self.size = 1 << max(0, n - 1).bit_length()
        self.top = [0.0] * (2 * self.size)  # a node's largest total below it, its own adds included
        self.own = [0.0] * (2 * self.size)  # what was added over a node's whole range

    def add(self, first: int, last: int, size: float) -> None:
        """Add `size` at the points first..last (inclusive)."""
        self._add(1, 0, self.size - 1, first, last, size)

    def _add(self, node: int, lo: int, hi: int, first: int, last: int, size: float) -> None:
        if last < lo or hi < first:
            return
        if first <= lo and hi <= last:
            self.own[node] += size
            self.top[node] += size
            return
        middle = (lo + hi) // 2
        self._add(2 * node, lo, middle, first, last, size)
        self._add(2 * node + 1, middle + 1, hi, first, last, size)
        self.top[node] = self.own[node] + max(self.top[2 * node], self.top[2 * node + 1])

    def most(self) -> float:
        """The largest total live at one point."""
        return self.top[1]


def _most_live(spans: list[tuple[int, int, float]], n: int) -> float:
    """The largest total size live at one of `n` points, over spans of (first, last point, size): each adds
    its size where it starts and takes it off after its last point."""
    first, last, size = (np.asarray(column) for column in zip(*spans, strict=True))
    delta = np.zeros(n + 1)
    np.add.at(delta, first, size)
    np.add.at(delta, last + 1, -size)
    return float(np.cumsum(delta).max())


def _drop_dead(trace: Trace, blocks: _BlockIndex, dropped: list[bool]) -> None:
    """Drop what only fed dropped instructions: walking back, an instruction whose on-chip results are
    all read, and only by dropped instructions, is dead. Results nobody reads stay as written."""
    read_by_live: set[Block] = set()
    read_at_all: set[Block] = set()
    for i in range(len(trace.instructions) - 1, -1, -1):
        inst = trace.instructions[i]
        if not dropped[i] and inst.writes and all(a.buffer != "hbm" for a in inst.writes):
            own = [b for _, mine in blocks.writes[i] for b in mine]
            if own and all(b in read_at_all for b in own) and not any(b in read_by_live for b in own):
                dropped[i] = True
        for _, mine in blocks.reads[i]:
            for b in mine:
                read_at_all.add(b)
                if not dropped[i]:
                    read_by_live.add(b)


# ------------------------------------------------------------------------------------------------
# 2-3. Allocation, re-issued loads and spill
# ------------------------------------------------------------------------------------------------


def _rotate(trace: Trace, uses: dict[Block, list[int]], buffers: int, reuses_buffer_of: list[int]) -> None:
    """Buffer rotation: the compiler gives the tiles one statement allocates (the blocks of a block
    tensor, or a tile declared in a loop body, one tensor per iteration) a few physical buffers in
    turn, so a tile can be written only once the tile `buffers` allocations earlier is dead. That is
    what stops DMA from running arbitrarily far ahead of compute. A tile whose predecessor is still
    live in program order is meant to live beside it: it gets a buffer of its own."""
    tensors = trace.tensors
    sites: dict[tuple, list[Block]] = {}
    nests: dict[int, tuple[int, ...]] = {}  # innermost loop execution -> the lines of its nest
    for b in uses:  # in the order of their first use
        info = tensors[b[0]]
        if info.partition_axis > 0:
            site: tuple = (b[0],)
        elif info.loops:  # a tile of a loop body: the same statement's tile of every iteration
            innermost = info.loops[-1][0]
            nest = nests.get(id(innermost))
            if nest is None:
                nest = nests[id(innermost)] = tuple(loop.line for loop, _ in info.loops)
            site = (info.line, info.shape, info.dtype, nest)
        else:
            continue
        earlier = sites.setdefault(site, [])
        if len(earlier) >= buffers:
            before = uses[earlier[-buffers]][-1]
            if before < uses[b][0]:
                reuses_buffer_of[uses[b][0]] = max(reuses_buffer_of[uses[b][0]], before)
        earlier.append(b)


def _allocate(trace: Trace, blocks: _BlockIndex, plan: AllocationPlan, uses: dict[Block, list[int]]) -> list[int]:
    """Walk the executed instructions in the compiler's order (program order, with the sibling loops it
    fuses run iteration by iteration) keeping the live SBUF blocks resident; where they overflow, the one
    next used furthest ahead gives way (a loaded one by re-issuing its load statement at every use, a
    computed one by a spill). The order: loops are fused only where SBUF overflows in program order."""
    n = len(trace.instructions)
    if not uses:
        return list(range(n))
    sizes = blocks.sizes(uses)
    plan.peak_bytes_per_partition = _peak(uses, sizes, n)
    if plan.peak_bytes_per_partition <= plan.capacity_bytes_per_partition:
        return list(range(n))
    order = _fused_order(trace, blocks, plan.dropped, plan.merged_loops)
    if order is None:
        order = list(range(n))
    else:  # the walk's clock is the position in the fused order
        plan.unmerged_peak_bytes_per_partition = plan.peak_bytes_per_partition
        uses = _positions(uses, order)
        plan.peak_bytes_per_partition = _peak(uses, sizes, n)
        if plan.peak_bytes_per_partition <= plan.capacity_bytes_per_partition:
            return order
    _Allocator(trace, blocks, plan, uses, sizes, "sbuf", plan.capacity_bytes_per_partition, plan.dropped).run(order)
    return order


def zeroing_folded(inst: Instruction) -> bool:
    """Whether an instruction is the legacy accumulation idiom's zeroing, `nl.zeros(..., buffer=nl.psum)` before
    a `+=` matmul chain: the compiler folds it into the first matmul's start-of-group flag, so it runs on no
    engine and no PSUM is taken for the block before that first matmul (calibration set: matmul declares
    3.75 MiB per partition of PSUM blocks zeroed up front, and trn1 spilled nothing)."""
    return inst.op == Op.MEMSET and bool(inst.writes) and inst.writes[0].buffer == "psum" \
        and (inst.attrs or {}).get("value") == 0


def _spill_psum(trace: Trace, blocks: _BlockIndex, plan: AllocationPlan, capacity: int, order: list[int]) -> None:
    """PSUM holds `capacity` bytes per partition (16 KiB on trn1: eight 2 KiB banks, fact sheet A.4), whatever
    a kernel declares: where more accumulation results are live at once (autocomp attention 02 keeps all of
    Q @ K^T, 512 KiB per partition, in one PSUM tensor), the ones next used furthest ahead are spilled after
    they are written and reloaded before they are read, as SBUF blocks are, in the compiler's order `order` (the
    one SBUF's walk took). A folded zeroing takes no PSUM."""
    skipped = [gone or zeroing_folded(inst) for gone, inst in zip(plan.dropped, trace.instructions, strict=True)]
    uses = blocks.uses("psum", skipped)
    if not uses:
        return
    sizes = blocks.sizes(uses)
    n = len(trace.instructions)
    plan.psum_peak_bytes_per_partition = _peak(uses, sizes, n)
    if plan.psum_peak_bytes_per_partition <= capacity:
        return
    if plan.merged_loops:
        uses = _positions(uses, order)
        if _peak(uses, sizes, n) <= capacity:
            return
    _Allocator(trace, blocks, plan, uses, sizes, "psum", capacity, skipped).run(order)


def _positions(uses: dict[Block, list[int]], order: list[int]) -> dict[Block, list[int]]:
    """Each block's uses as positions in `order` (the walk's clock), sorted."""
    position = [0] * len(order)
    for p, i in enumerate(order):
        position[i] = p
    return {b: sorted(position[i] for i in at) for b, at in uses.items()}


def _peak(uses: dict[Block, list[int]], sizes: dict[Block, float], n: int) -> int:
    """Bytes per partition of the blocks live at once at the worst point, each from its first use to its last."""
    return round(_most_live([(at[0], at[-1], sizes[b]) for b, at in uses.items()], n))


class _Allocator:
    """The resident set of one on-chip memory (`buffer`, `capacity` bytes per partition) and its eviction
    order (next use furthest ahead first); the instructions marked `skipped` take no room in it."""

    def __init__(self, trace: Trace, blocks: _BlockIndex, plan: AllocationPlan, uses: dict[Block, list[int]],
                 sizes: dict[Block, float], buffer: str, capacity: int, skipped: list[bool]) -> None:
        self.trace, self.blocks, self.plan = trace, blocks, plan
        self.uses, self.sizes = uses, sizes
        self.buffer, self.capacity, self.skipped = buffer, capacity, skipped
        self.cursor = dict.fromkeys(uses, 0)  # index into uses[b] of its next access
        self.resident: set[Block] = set()
        self.spilled: dict[Block, int] = {}  # spilled block -> the instruction after which it was saved
        self.saved: dict[Block, int] = {}  # block whose spill copy in HBM is current -> where it was saved
        self.computed: set[Block] = set()  # written by an engine, not only loaded from HBM
        self.loaded_by: dict[Block, int] = {}  # block -> line of the load statement that filled it
        self.refetched: set[Block] = set()  # loaded blocks that gave way, to load again at their next use
        self.loads = _load_counts(trace, plan.dropped)  # line -> executed loads into SBUF
        self.kept = set(blocks.alias.values())  # blocks kept for a repeated move
        self.live = 0.0
        self.heap: list[tuple[int, int, Block]] = []
        self.order = itertools.count()

    def run(self, order: list[int]) -> None:
        """Walk the instructions in `order`; the uses are positions in it."""
        plan = self.plan
        instructions = self.trace.instructions
        for p, i in enumerate(order):
            inst = instructions[i]
            if self.skipped[i]:
                continue
            if inst.line in plan.streamed_lines and _loads_to_sbuf(inst):
                plan.dropped[i] = True  # re-issued next to each use instead
                for _, own in self.blocks.writes[i]:
                    for b in own:
                        self.loaded_by.setdefault(b, inst.line)
                continue
            here: set[Block] = set()
            for acc, own in self.blocks.reads[i]:
                if acc.buffer == self.buffer:
                    self._read(i, acc, own, here)
            for acc, own in self.blocks.writes[i]:
                if acc.buffer == self.buffer:
                    self._write(inst, own, here)
            self._fit(i, here)
            if self.buffer == "sbuf" and (plan.refetch[i] or plan.reload[i]):
                plan.room[i] = max(0, round(self.capacity - self.live))
            for b in here:
                self._advance(b, p)

    def _read(self, i: int, acc: Access, own: tuple[Block, ...], here: set[Block]) -> None:
        share = acc.nbytes // max(1, len(own))
        for b in own:
            if b not in self.sizes:
                continue
            here.add(b)
            if b in self.resident:
                continue
            if b in self.spilled:
                self.plan.reload[i] += self._bytes(b)  # a reload brings the block back whole
                self.plan.reload_after[i] = max(self.plan.reload_after[i], self.spilled[b])
                del self.spilled[b]
                self._admit(b)
            elif self.loaded_by.get(b) in self.plan.streamed_lines and b not in self.computed:
                self.plan.refetch[i] += share  # a streamed load: fetched into a short-lived buffer
                self.plan.refetch_line[i] = self.loaded_by[b]
            elif b in self.refetched:
                self.plan.refetch[i] += self._bytes(b)
                self.refetched.discard(b)
                self._admit(b)
            else:
                self._admit(b)

    def _write(self, inst: Instruction, own: tuple[Block, ...], here: set[Block]) -> None:
        for b in own:
            if b not in self.sizes:
                continue
            here.add(b)
            if _loads_to_sbuf(inst):
                self.loaded_by.setdefault(b, inst.line)
            else:
                self.computed.add(b)
            self.spilled.pop(b, None)
            self.saved.pop(b, None)
            self.refetched.discard(b)
            if b not in self.resident:
                self._admit(b)

    def _admit(self, b: Block) -> None:
        self.resident.add(b)
        self.live += self.sizes[b]

    def _release(self, b: Block) -> None:
        self.resident.discard(b)
        self.live -= self.sizes[b]

    def _advance(self, b: Block, p: int) -> None:
        """After the instruction at position p: move the block to its next use, or free it after its last."""
        at = self.uses[b]
        k = self.cursor[b]
        while k < len(at) and at[k] <= p:
            k += 1
        self.cursor[b] = k
        if k >= len(at):
            if b in self.resident:
                self._release(b)
            self.spilled.pop(b, None)
            self.saved.pop(b, None)
            self.refetched.discard(b)
        elif b in self.resident:
            heapq.heappush(self.heap, (-at[k], next(self.order), b))

    def _fit(self, i: int, here: set[Block]) -> None:
        """Make the resident set fit after instruction i, the block next used furthest ahead first."""
        capacity = self.capacity
        deferred: list[tuple[int, int, Block]] = []
        while self.live > capacity and self.heap:
            entry = heapq.heappop(self.heap)
            b = entry[2]
            at = self.uses[b]
            k = self.cursor[b]
            if b not in self.resident or k >= len(at) or -entry[0] != at[k]:
                continue  # stale entry
            if b in here:
                deferred.append(entry)
                continue
            self._evict(b, i)
            if b in self.spilled and b in self.kept:
                # a value kept for a repeated move is one allocation hoisted out of the loop that repeats
                # it: it gives way whole, and comes back block by block as each is next used
                for other in [r for r in self.resident if r[0] == b[0] and r in self.kept and r in self.computed
                              and r not in here]:
                    self._evict(other, i)
        for entry in deferred:
            heapq.heappush(self.heap, entry)

    def _evict(self, b: Block, i: int) -> None:
        line = self.loaded_by.get(b)
        if line is not None and b not in self.computed:
            self._release(b)
            if self.loads[line] > 1 and b not in self.kept:
                # a load statement of a loop: re-issued next to every use of its blocks from now on
                self.plan.streamed_lines.add(line)
                for other in [r for r in self.resident if self.loaded_by.get(r) == line and r not in self.computed]:
                    self._release(other)
            else:
                # a single load, or a repeat kept instead of reloaded: loaded again before its next use
                self.refetched.add(b)
            return
        self._release(b)
        saved_at = self.saved.get(b)
        if saved_at is None:  # a block reloaded and not written since still has its copy in HBM
            saved_at = self.saved[b] = i
            self.plan.save[i] += self._bytes(b)
            if self.buffer == "psum":
                info = self.blocks.tensors[b[0]]
                partitions = info.shape[max(0, info.partition_axis)] if info.shape else 1
                elements = round(self.sizes[b]) // DTYPE_SIZES.get(info.dtype, 4)
                self.plan.psum_copies.setdefault(i, []).append((partitions, elements, info.dtype))
        self.spilled[b] = saved_at

    def _bytes(self, b: Block) -> int:
        """The whole block's bytes over its partitions."""
        info = self.blocks.tensors[b[0]]
        partitions = info.shape[max(0, info.partition_axis)] if info.shape else 1
        return round(self.sizes[b] * partitions)


def _load_counts(trace: Trace, dropped: list[bool]) -> dict[int, int]:
    """Executed loads into SBUF per source line."""
    counts: dict[int, int] = {}
    for inst, gone in zip(trace.instructions, dropped, strict=True):
        if not gone and _loads_to_sbuf(inst):
            counts[inst.line] = counts.get(inst.line, 0) + 1
    return counts


def _loads_to_sbuf(inst: Instruction) -> bool:
    return (inst.attrs or {}).get("direction") == "hbm_to_sbuf" and inst.op == Op.DMA_COPY


# ------------------------------------------------------------------------------------------------
# 4. Loop fusion: the order the allocator walks
# ------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Run:
    """A loop statement's one execution (its instructions by iteration) or straight-line instructions side
    by side (loop None, one iteration), with what each touches: the first and last iteration per on-chip
    block."""

    loop: Loop | None
    iterations: list[list[int]]
    touched: dict[Block, tuple[int, int]] = field(default_factory=dict)
    written: dict[Block, tuple[int, int]] = field(default_factory=dict)
    hbm_touched: set[int] = field(default_factory=set)
    hbm_written: set[int] = field(default_factory=set)
    noted: bool = False

    def note(self, trace: Trace, blocks: _BlockIndex, dropped: list[bool]) -> _Run:
        """Fill the footprint once (only runs that might fuse need it)."""
        if self.noted:
            return self
        self.noted = True
        touched, written = self.touched, self.written
        for k, members in enumerate(self.iterations):
            for i in members:
                if dropped[i]:
                    continue
                for _, own in blocks.reads[i]:
                    for b in own:
                        span = touched.get(b)
                        touched[b] = (k, k) if span is None else (span[0], k)
                for _, own in blocks.writes[i]:
                    for b in own:
                        span = touched.get(b)
                        touched[b] = (k, k) if span is None else (span[0], k)
                        span = written.get(b)
                        written[b] = (k, k) if span is None else (span[0], k)
                inst = trace.instructions[i]
                for a in inst.reads:
                    if a.buffer == "hbm":
                        self.hbm_touched.add(a.tensor)
                for a in inst.writes:
                    if a.buffer == "hbm":
                        self.hbm_touched.add(a.tensor)
                        self.hbm_written.add(a.tensor)
        return self


def _hbm_conflict(a: _Run, b: _Run) -> bool:
    """Whether one writes an HBM tensor the other touches (HBM is not followed block by block)."""
    return bool(a.hbm_written & b.hbm_touched or b.hbm_written & a.hbm_touched)


def _independent(a: _Run, b: _Run) -> bool:
    """Whether the two may run in either order: neither writes what the other touches."""
    return (not _hbm_conflict(a, b)
            and not any(x in b.touched for x in a.written) and not any(x in a.touched for x in b.written))


def _in_step(earlier: _Run, later: _Run) -> bool:
    """Whether running `later`'s iteration k right after `earlier`'s iteration k keeps every dependence:
    each on-chip block both touch, where either writes it, is touched by `earlier` in no later an
    iteration than `later` touches it; no HBM tensor one writes is touched by the other."""
    if _hbm_conflict(earlier, later):
        return False
    for after, before in ((later.touched, earlier.written), (later.written, earlier.touched)):
        for b, (first, _) in after.items():
            span = before.get(b)
            if span is not None and span[1] > first:
                return False
    return True


def _feeds(earlier: _Run, later: _Run) -> bool:
    """Whether `later` touches on-chip blocks `earlier` wrote: fusing them is what keeps those on chip."""
    return any(b in earlier.written for b in later.touched)


def _fused_order(trace: Trace, blocks: _BlockIndex, dropped: list[bool],
                 merged: dict[tuple[int, ...], int] | None = None) -> list[int] | None:
    """The order the compiler runs the instructions in: program order, except that sibling loops of one
    trip count, where a later one consumes on-chip blocks of an earlier and every dependence allows it,
    run as one loop (iteration k of each in turn, their bodies fused the same way). What runs between them
    moves before the first when independent of the group, or stays after it when independent of the one
    that joins. Without fusion a producer loop's whole output stays live until its consumer loop starts;
    trn1's swiglu counters show the compiler does not keep it so. Dropped instructions keep their place and
    count for no dependence. None: nothing fuses. `merged` counts each fused group's loop lines."""
    instructions = trace.instructions
    worth = _with_sibling_loops(trace)
    if not worth:
        return None
    fused = False

    def runs_of(members: list[int], depth: int) -> list[_Run]:
        runs: list[_Run] = []
        for i in members:
            nest = instructions[i].loops
            last = runs[-1] if runs else None
            if len(nest) <= depth:  # straight-line instructions side by side are one run
                if last is None or last.loop is not None:
                    last = _Run(None, [[]])
                    runs.append(last)
                last.iterations[0].append(i)
                continue
            loop, k = nest[depth]
            if last is None or last.loop is not loop:
                last = _Run(loop, [[] for _ in range(loop.trip_count)])
                runs.append(last)
            while k >= len(last.iterations):
                last.iterations.append([])
            last.iterations[k].append(i)
        return runs

    def noted(run: _Run) -> _Run:
        return run.note(trace, blocks, dropped)

    def joins(group: list[_Run], run: _Run) -> bool:
        return (run.loop is not None and len(run.iterations) == len(group[0].iterations)
                and any(_feeds(noted(m), noted(run)) for m in group) and all(_in_step(m, run) for m in group))

    def arrange(members: list[int], depth: int) -> list[int]:
        nonlocal fused
        enclosing = instructions[members[0]].loops[depth - 1][0] if depth and members else None
        if id(enclosing) not in worth:
            return members  # no two loops of one trip count anywhere inside: nothing to fuse
        runs = runs_of(members, depth)
        out: list[int] = []
        k = 0
        while k < len(runs):
            head = runs[k]
            k += 1
            if head.loop is None:
                out += head.iterations[0]
                continue
            group = [head]
            j = k
            while j < len(runs):
                if not joins(group, runs[j]):
                    j += 1
                    continue
                between = [noted(r) for r in runs[k:j]]
                if all(_independent(m, r) for m in group for r in between):
                    for r in between:  # they run before the group
                        out += arrange([i for step in r.iterations for i in step], depth)
                    group.append(runs[j])
                    del runs[k:j + 1]
                elif all(_independent(runs[j], r) for r in between):
                    group.append(runs.pop(j))  # it runs before them
                else:
                    j += 1
                    continue
                j = k
            if len(group) > 1:
                fused = True
                if merged is not None:
                    lines = tuple(member.loop.line for member in group if member.loop is not None)
                    merged[lines] = merged.get(lines, 0) + 1
            for step in range(len(head.iterations)):
                out += arrange([i for member in group for i in member.iterations[step]], depth + 1)
        return out

    order = arrange(list(range(len(instructions))), 0)
    return order if fused else None


def _with_sibling_loops(trace: Trace) -> set[int]:
    """The loop executions (by id; id(None) for the kernel's top level) holding, directly or further in,
    two loops of one trip count side by side: the only places a fusion can happen."""
    trips: dict[int, list[int]] = {}
    for loop in trace.loops:
        trips.setdefault(id(loop.parent), []).append(loop.trip_count)
    parent_of = {id(loop): loop.parent for loop in trace.loops}
    worth: set[int] = set()
    for key, counts in trips.items():
        if len(set(counts)) == len(counts):
            continue
        while key not in worth:  # it and every loop around it
            worth.add(key)
            if key == id(None):
                break
            key = id(parent_of[key])
    return worth
