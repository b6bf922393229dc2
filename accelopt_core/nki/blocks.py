"""Large block tensors of a numeric replay, held in memory only while their blocks are live.

Compiler-style kernels declare whole-array intermediates with block dimensions in front of the
partition dimension (`nl.ndarray((12, 32, 5, nl.par_dim(128), 1024), buffer=nl.sbuf)`: a gigabyte at
full size) that the compiler allocates block by block, each block written and read within a few
iterations. Held whole, they cost a replay gigabytes, and on virtual machines seconds of page faults
per gigabyte, on every seed of a check.

A trace-only replay of the same tape tells which instructions touch which block (every on-chip byte an
instruction reads or writes lies inside its operands' regions, which the performance model relies on
too). So a numeric replay gives each large block tensor an address range of its own, maps a slot of
reused memory under a block just before the first instruction that touches it, filled as fresh on-chip
memory is (NaN), and hands the slot to the next block once the last one has run. The values an
instruction sees are the ones a whole array would hold; the memory is that of the blocks live at once.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
from collections import defaultdict
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from .trace import Trace

SMALLEST = 16 << 20  # smaller block tensors are held whole: what they would save is not worth a mapping


def large_block_tensor(buffer: str, partition_axis: Any, placement: Any, nbytes: int, smallest: int = SMALLEST) -> bool:
    """An on-chip tensor the compiler allocates block by block (block dimensions in front of the partition
    dimension, no direct allocation) of `smallest` bytes or more: one a numeric replay holds by block."""
    return (buffer != "hbm" and type(partition_axis) is int and partition_axis >= 1 and placement is None
            and nbytes >= smallest)


@dataclass(frozen=True)
class BlockLiveness:
    """For a tape's large block tensors: the blocks each instruction touches first, and last."""

    tensors: frozenset[int]
    first: dict[int, list[tuple[int, int]]]  # instruction index -> (tensor, flat block index)
    last: dict[int, list[tuple[int, int]]]

    @staticmethod
    def of(trace: Trace, smallest: int = SMALLEST) -> BlockLiveness | None:
        """The liveness of the trace's on-chip block tensors of `smallest` bytes or more; None when it has
        none. Tensors another tensor views, and directly allocated ones, are left whole."""
        viewed = {info.alias_of for info in trace.tensors.values() if info.alias_of >= 0}
        managed = {tid: info.shape[:info.partition_axis] for tid, info in trace.tensors.items()
                   if large_block_tensor(info.buffer, info.partition_axis, info.placement, info.nbytes, smallest)
                   and info.alias_of < 0 and tid not in viewed}
        if not managed:
            return None
        first: dict[int, dict[int, int]] = defaultdict(dict)
        last: dict[int, dict[int, int]] = defaultdict(dict)
        for inst in trace.instructions:
            for access in (*inst.reads, *inst.writes):
                blocks = managed.get(access.tensor)
                if blocks is None:
                    continue
                for block in _blocks(blocks, access.region[:len(blocks)]):
                    first[access.tensor].setdefault(block, inst.index)
                    last[access.tensor][block] = inst.index
        return BlockLiveness(frozenset(managed), _by_instruction(first), _by_instruction(last))


def _blocks(dims: tuple[int, ...], region: tuple[tuple[int, int], ...]) -> list[int]:
    """Flat indices of the blocks a region's bounding box spans."""
    if all(hi - lo == 1 for lo, hi in region):
        flat = 0
        for size, (lo, _) in zip(dims, region, strict=True):
            flat = flat * size + lo
        return [flat]
    return [int(np.ravel_multi_index(index, dims)) for index in product(*(range(lo, hi) for lo, hi in region))]


def _by_instruction(per_tensor: dict[int, dict[int, int]]) -> dict[int, list[tuple[int, int]]]:
    table: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for tensor, blocks in per_tensor.items():
        for block, index in blocks.items():
            table[index].append((tensor, block))
    return dict(table)


class _Mapped:
    """One array whose blocks live in a few reused slots of memory: an address range the size of the whole
    array, in which each block in use is mapped onto a slot of a memory file. Memory the process keeps
    and reuses costs no page faults, where fresh memory costs seconds per gigabyte on virtual machines
    that hand freed memory back to their host."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, blocks: int):
        self.file = os.memfd_create("accelopt-blocks", os.MFD_CLOEXEC)
        self.block_elements = math.prod(shape) // blocks
        self.block_bytes = self.block_elements * dtype.itemsize
        self.map = mmap.mmap(-1, math.prod(shape) * dtype.itemsize, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.array = np.frombuffer(self.map, dtype=dtype).reshape(shape)  # addresses only, until placed
        self.flat = self.array.reshape(-1)
        self.slots = 0
        self.free: list[int] = []
        self.slot_of: dict[int, int] = {}

    def __del__(self) -> None:
        os.close(self.file)

    def place(self, block: int, value: Any) -> None:
        """Map a slot under the block and fill it as fresh memory is filled."""
        if not self.free:
            self.free.append(self.slots)
            self.slots += 1
            os.ftruncate(self.file, self.slots * self.block_bytes)
        slot = self.free.pop()
        address = self.array.ctypes.data + block * self.block_bytes
        if _LIBC.mmap(address, self.block_bytes, _READ_WRITE, _SHARED_FIXED, self.file,
                      slot * self.block_bytes) != address:
            errno = ctypes.get_errno()
            raise MemoryError(f"cannot map a block of {self.block_bytes} bytes: {os.strerror(errno)} (errno {errno})")
        self.slot_of[block] = slot
        self.flat[block * self.block_elements:(block + 1) * self.block_elements] = value

    def release(self, block: int) -> None:
        """The block's slot serves the next block; the block must not be touched again."""
        self.free.append(self.slot_of.pop(block))

    @staticmethod
    def fits(shape: tuple[int, ...], dtype: np.dtype, blocks: int) -> bool:
        """Whether every block starts on a page (so that it can be mapped on its own)."""
        return _LIBC is not None and math.prod(shape) // blocks * dtype.itemsize % mmap.PAGESIZE == 0


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
    except (OSError, AttributeError):
        return None
    return libc if hasattr(os, "memfd_create") else None


_LIBC = _libc()
_READ_WRITE = mmap.PROT_READ | mmap.PROT_WRITE
_SHARED_FIXED = mmap.MAP_SHARED | 0x10  # MAP_FIXED: this address, replacing what was mapped there


class LiveBlocks:
    """One numeric replay's large block tensors (see the module's docstring). The replay calls `adopt`
    when it declares one, `before(start, emitted)` before each recorded call (which emits instructions
    `start` .. `start + emitted - 1`) and `forget` when the tape drops one.

    A block is given back only at the next call that emits an instruction after its last one: the call
    right after an instruction may still move that instruction's result into its final place (`t[i] =
    nl.copy(...)`, `acc += nisa.nc_matmul(...)` retarget the instruction and emit none of their own)."""

    def __init__(self, liveness: BlockLiveness):
        self.liveness = liveness
        self.mapped: dict[int, tuple[_Mapped, _Mapped | None, Any]] = {}  # data, PSUM written-flags, garbage
        self.released_to = 0  # instructions before this index have had their last blocks given back

    def takes(self, tensor: int, dims: tuple[int, ...], axis: int, dtype: np.dtype, buffer: str) -> bool:
        """Will the tensor about to be declared be held block by block? Its blocks must start on pages,
        and so must those of the one-byte written-flags a PSUM tensor keeps beside its data."""
        blocks = math.prod(dims[:axis])
        return (tensor in self.liveness.tensors and _Mapped.fits(dims, dtype, blocks)
                and (buffer != "psum" or _Mapped.fits(dims, np.dtype(bool), blocks)))

    def holds(self, tensor: int) -> bool:
        return tensor in self.mapped

    def adopt(self, storage: Any, garbage: Any) -> None:
        """Give a tensor `takes` agreed to its mapped arrays (its data, and the written-flags PSUM keeps)."""
        blocks = math.prod(storage.shape[:storage.partition_axis])
        data = _Mapped(storage.shape, storage.dtype, blocks)
        flags = _Mapped(storage.shape, np.dtype(bool), blocks) if storage.buffer == "psum" else None
        storage.data = data.array
        storage.initialized = flags.array if flags is not None else None
        self.mapped[storage.id] = (data, flags, garbage)

    def before(self, start: int, emitted: int) -> None:
        if not emitted:
            return
        last = self.liveness.last
        for index in range(self.released_to, start):
            for tensor, block in last.get(index, ()):
                for array in self.mapped.get(tensor, ())[:2]:
                    if array is not None:
                        array.release(block)
        self.released_to = max(self.released_to, start)
        first = self.liveness.first
        for index in range(start, start + emitted):
            for tensor, block in first.get(index, ()):
                held = self.mapped.get(tensor)
                if held is not None:
                    data, flags, garbage = held
                    data.place(block, garbage)
                    if flags is not None:
                        flags.place(block, False)  # nothing written there yet

    def forget(self, tensor: int) -> None:
        self.mapped.pop(tensor, None)
