"""Direct allocation (`nki.compiler.sbuf.alloc / mod_alloc`, `psum.alloc / mod_alloc`): where each logical
block of an on-chip tensor physically lives.

A tensor declared `(B..., par_dim(P), F...)` has one logical tile per block index; a placement maps each
block index to a physical tile: `(start_partition, byte_addr)` in SBUF, `(bank, start_partition,
byte_addr)` in PSUM. Blocks that map to the same location share one physical tile: that is how a kernel
declares double buffering or rotation. The simulator holds the physical tiles as placed: a write to one
block is a write to every block sharing its tile, so a kernel whose rotation overwrites a tile still in use
reads the later block's values, as the hardware would, and fails its check. What stays logical is whether a
block was written before: a legacy `acc[i] += nisa.nc_matmul(...)` onto a block nothing wrote starts a new
accumulation group, as the compiler, which sets a matmul's start-of-group flag from the kernel's logical tensors,
compiles it, even when the tile it shares holds another block's sums (the public attention tutorial's allocated
versions, v9 and v10, accumulate every query tile's output in one PSUM bank, and its test checks them against
NumPy). Everything it records works on
the physical tiles too: the tensor's footprint is its distinct physical tiles, and every access is recorded
against the physical tile slots it touches, so the performance model orders the instructions that reuse a
tile (the rotation the kernel declared) and sees no more capacity than was allocated. Simulation and price
are of the same tiles: a model that priced the physical tiles while the values of every logical block were
kept would time an aliasing kernel as fast and call it correct.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import HardwareRuleError, KernelUsageError

PSUM_BANKS = 8

Locate = Callable[[tuple[int, ...], int, int], Any]


class Placement:
    """A direct-allocation buffer: assigned to `buffer=` like `nl.sbuf`; `locate(idx=block_index,
    pdim_size=partitions, fdim_size=bytes_per_partition)` gives the physical tile of a logical block."""

    def __init__(self, kind: str, locate: Locate, description: str):
        self.kind = kind
        self.name = kind
        self.locate = locate
        self.description = description

    def __repr__(self) -> str:
        return self.description


def modulo(base: int, counts: tuple[int, ...], index: tuple[int, ...], scale: int) -> int:
    """base + scale x (the block index, each coordinate taken modulo its count, linearised over the
    counts); coordinates beyond the counts given are ignored, an empty count tuple means one tile."""
    counts = tuple(int(c) for c in counts) or (1,) * len(index)
    offset = 0
    for i, count in zip(index, counts, strict=False):
        if count < 1:
            raise KernelUsageError(f"modulo allocation tile counts must be positive, got {counts}")
        offset = offset * count + i % count
    return base + offset * scale


class Slots:
    """The physical tiles of one directly allocated tensor: the slot of every logical block, and where
    each slot lives."""

    def __init__(self, block_shape: tuple[int, ...], slot_of_block: np.ndarray, locations: list[tuple[int, ...]]):
        self.block_shape = block_shape
        self.block_ndim = len(block_shape)
        self.slot_of_block = slot_of_block
        self.locations = locations
        self._members: dict[int, list[tuple[int, ...]]] | None = None  # slot -> the blocks placed on it

    @property
    def count(self) -> int:
        return len(self.locations)

    def sharing(self, region: tuple[tuple[int, int], ...]) -> list[tuple[tuple[int, ...], list[tuple[int, ...]]]]:
        """The blocks a logical region writes that share their physical tile with other blocks, each with those
        others (empty when every block has a tile of its own)."""
        if not self.block_ndim or self.count == self.slot_of_block.size:
            return []
        if self._members is None:
            self._members = {}
            for block in np.ndindex(*self.block_shape):
                self._members.setdefault(int(self.slot_of_block[block]), []).append(block)
        out = []
        for block in itertools.product(*(range(lo, hi) for lo, hi in region[:self.block_ndim])):
            others = [other for other in self._members[int(self.slot_of_block[block])] if other != block]
            if others:
                out.append((block, others))
        return out

    def region(self, region: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        """A logical region as the physical one it touches: the block dimensions become the range of
        slots the blocks in the region occupy."""
        if not self.block_ndim:
            return region
        blocks = self.slot_of_block[tuple(slice(lo, hi) for lo, hi in region[:self.block_ndim])]
        return ((int(blocks.min()), int(blocks.max()) + 1), *region[self.block_ndim:])

    def physical_shape(self, tile_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (self.count, *tile_shape) if self.block_ndim else tile_shape


def place(placement: Placement, dims: tuple[int, ...], partition_axis: int, itemsize: int,
          sbuf_partition_bytes: int) -> Slots:
    """Locate every logical block of a tensor of `dims` and check each location against the rules of
    the direct-allocation API (nki.compiler.sbuf.alloc / psum.alloc)."""
    block_shape = dims[:partition_axis]
    partitions = dims[partition_axis]
    tile_bytes = math.prod(dims[partition_axis + 1:]) * itemsize
    slot_of: dict[tuple[int, ...], int] = {}
    slots = np.empty(block_shape, dtype=np.int64)
    for index in np.ndindex(*block_shape):
        # by keyword, as the compiler calls it: functions may take other parameters first (a bank map)
        location = placement.locate(idx=tuple(int(i) for i in index), pdim_size=partitions, fdim_size=tile_bytes)
        key = _location(placement.kind, location)
        _check_location(placement.kind, key, partitions, tile_bytes, sbuf_partition_bytes)
        slots[index] = slot_of.setdefault(key, len(slot_of))
    return Slots(block_shape, slots, list(slot_of))


def _location(kind: str, location: Any) -> tuple[int, ...]:
    want = 3 if kind == "psum" else 2
    what = "(bank_id, start_partition, byte_addr)" if kind == "psum" else "(start_partition, byte_addr)"
    try:
        values = tuple(int(v) for v in location)
    except TypeError:
        values = ()
    if len(values) != want:
        raise KernelUsageError(f"a {kind.upper()} allocation function must return {what}, got {location!r}")
    return values


def _check_location(kind: str, location: tuple[int, ...], partitions: int, tile_bytes: int,
                    sbuf_partition_bytes: int) -> None:
    if kind == "psum":
        bank, start, address = location
        if not 0 <= bank < PSUM_BANKS:
            raise HardwareRuleError(f"PSUM bank {bank} does not exist (banks 0 to {PSUM_BANKS - 1})")
        if start or address:  # nki.compiler.psum.alloc: both must be 0 in the current release
            raise HardwareRuleError(f"a PSUM tile must start at partition 0, byte 0 of its bank; got partition "
                                    f"{start}, byte {address}")
        return
    start, address = location
    allowed = (0,) if partitions > 64 else (0, 64) if partitions > 32 else (0, 32, 64, 96)
    if start not in allowed:  # the start-partition rules of nki.compiler.sbuf.alloc (fact sheet A.4)
        raise HardwareRuleError(f"an SBUF tile of {partitions} partitions must start at partition "
                                f"{' or '.join(map(str, allowed))}, not {start}")
    # The docs (nki.compiler.sbuf.alloc) keep byte addresses below the partition size less 16 KiB the
    # compiler uses itself, but the public samples' allocated attention kernel, checked on hardware,
    # places tiles above that: only the partition's physical end is enforced.
    if address < 0 or address + tile_bytes > sbuf_partition_bytes:
        raise HardwareRuleError(f"an SBUF tile of {tile_bytes} bytes per partition at byte {address} does not fit "
                                f"the {sbuf_partition_bytes} bytes of a partition")
