"""Replaying a trace's tape (its wire form: tape.py): the trusted side's own run of exactly what a kernel did.

A sandboxed kernel hands back its tape, never a verdict. The replay rebuilds the tensors the tape
declares and executes each recorded call with this simulator's own instructions (ops.py), in order,
on the trusted side's inputs: numerically to check the outputs, or trace-only to rebuild the
instruction list for the performance model. Nothing the kernel's process computed is reused, so a
trace whose instructions were edited, deleted or forged, or outputs written by host code (which
leave no call on the tape), give the outputs and the timing of what the tape really asks for.

Every entry is checked as it is reached (tape.TapeReader checks the tables): references to
tensors that do not exist (or were dropped), arguments no recording writes, calls that create other
tensors or emit other instructions than the tape says, memory beyond a budget and time beyond a
limit all stop the replay with a `TapeError` or a `ReplayLimitError`. A hardware rule or a kernel
error the replay meets (a numeric one, such as an indirect index out of bounds) is the `NkiError` the
kernel's own numeric run would have raised, at the line the call was recorded at.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .allocation import Placement
from .blocks import SMALLEST, BlockLiveness, LiveBlocks, large_block_tensor
from .errors import NkiError, replaying
from .indexing import DynamicIndex, Subscript, full_subscript, normalize
from .ops import REPLAYABLE
from .runner import RunResult, TensorSpec, end_launch, returns_unwritten_input, start_program
from .tape import TapeError, TapeReader, shown_name
from .tensor import HBM, PSUM, SBUF, BufferPool, MemoryBudget, Simulation, Storage, Tile, declare, host_fill, pop, push
from .trace import collector_paused

_AS_RECORDED = (bool, int, float, str)  # argument types a tape holds as the values themselves
MAX_TILE_ELEMENTS = 2**28  # one operand of one instruction; the largest honest one is a whole HBM tensor


MAX_KEPT_SUBSCRIPTS = 1 << 16  # decoded subscripts a replay keeps for the entries naming them again


def _subscript_key(shape: tuple[int, ...], plain: list[Any]) -> tuple[Any, ...] | None:
    """What decides a tile reference's subscript, hashable: the tensor's shape and the items when each is an
    int, a slice ["s", start, count, step] or an affine expression ["x", k] of the tape's table (a loop nest
    names the same blocks again and again: decoded once, the later references share it); None for indices
    read at run time or any other item."""
    key: list[Any] = [shape]
    for item in plain[2:]:
        kind = type(item)
        if kind is int:
            key.append(item)
        elif kind is list and len(item) == 4 and item[0] == "s" and type(item[1]) is int and type(item[2]) is int \
                and type(item[3]) is int:
            key.append((item[1], item[2], item[3]))
        elif kind is list and len(item) == 2 and item[0] == "x" and type(item[1]) is int:
            key.append(("x", item[1]))
        else:
            return None
    return tuple(key)


class ReplayLimitError(Exception):
    """The replay needed more memory or time than the trusted side gives it: the trusted side's own limit,
    not the kernel's fault. `resource` says which ran out, "seconds" or "memory", so that what a user is told
    names the limit to raise."""

    def __init__(self, message: str, resource: str = "seconds"):
        super().__init__(message)
        self.resource = resource


@dataclass(frozen=True)
class ReplayLimits:
    """What one replay may use: bytes held in tensors at once, and seconds."""

    memory_bytes: int = 8 * 2**30
    seconds: float = 300.0


def replay(tape: Any, inputs: Sequence[np.ndarray | TensorSpec], hardware: str, numeric: bool,
           kernel_file: str = "kernel.py", limits: ReplayLimits = ReplayLimits(),
           recycled: BufferPool | None = None, liveness: BlockLiveness | None = None,
           borrow_inputs: bool = False) -> RunResult:
    """Run the tape's calls again on `inputs` (arrays for a numeric replay, else shapes): the outputs
    (None when trace-only), the instruction trace this replay recorded, and the guards' facts. A numeric
    replay takes the arrays of its tensors from `recycled` where it has them, and leaves there those of
    the tensors it drops (the replays of one check share one); given the `liveness` of the tape's large
    block tensors (from a trace-only replay of it), it holds those block by block (blocks.py). It copies
    its inputs, unless it may `borrow_inputs`: read them where they are (copying one the kernel writes),
    which only a caller whose arrays nothing else writes meanwhile may allow (a reference that writes its
    inputs, running beside the replay, would change what the replay reads)."""
    reader = tape if isinstance(tape, TapeReader) else TapeReader(tape)
    return _Replay(reader, hardware, numeric, kernel_file, limits, recycled, liveness, borrow_inputs).run(inputs)


def declares_block_tensors(tape: TapeReader, smallest: int = SMALLEST) -> bool:
    """Does the tape declare an on-chip block tensor of `smallest` bytes or more (one a numeric replay
    would rather hold block by block)?"""
    for entry in tape.entries:
        if isinstance(entry, list) and len(entry) == 10 and entry[0] == "tensor" and entry[3] != HBM:
            _, _, _, kind, dtype_name, shape, axis, placement, _, _ = entry
            if large_block_tensor(kind, axis, placement,
                                  math.prod(tape.shape(shape)) * tape.dtype(dtype_name).itemsize, smallest):
                return True
    return False


class _Replay:
    """One replay: the simulation, the tensors the tape's entries may refer to, the outputs."""

    def __init__(self, reader: TapeReader, hardware: str, numeric: bool, kernel_file: str, limits: ReplayLimits,
                 recycled: BufferPool | None, liveness: BlockLiveness | None, borrow_inputs: bool = False):
        self.reader = reader
        self.borrow_inputs = borrow_inputs
        self.sim = Simulation(numeric=numeric, hardware=hardware)
        self.sim.trace.kernel_file = kernel_file
        self.sim.trace.loops = reader.loops  # the recorded loop statements (they grow with a streamed tape)
        self.sim.registry = {}
        self.sim.memory = MemoryBudget(limits.memory_bytes) if numeric else None
        self.sim.recycled = recycled if numeric else None
        self.sim.blocks = LiveBlocks(liveness) if numeric and liveness is not None else None
        self.deadline = time.monotonic() + limits.seconds
        self.limits = limits
        self.inputs: list[np.ndarray | TensorSpec] = []
        self.input_ids: set[int] = set()
        self.viewed: set[int] = set()  # tensors a view shares memory with: their bytes stay counted
        self.result: RunResult | None = None
        self.subscripts: dict[tuple[Any, ...], Subscript] = {}  # by _subscript_key
        reader.resolve = self.tile
        self.handlers: dict[str, Callable[[list[Any]], None]] = {
            "input": self.input, "tensor": self.tensor, "view": self.view, "fill": self.fill, "call": self.call,
            "drop": self.drop, "program": self.program, "launch": self.launch, "return": self.returned}

    def run(self, inputs: Sequence[np.ndarray | TensorSpec]) -> RunResult:
        self.inputs = [a for a in inputs if tuple(a.shape)][::-1]  # 0-d inputs reached the kernel as numbers
        push(self.sim)
        try:
            with collector_paused(), replaying(self.sim.trace.kernel_file) as self.at_line:
                entries, position = self.reader.entries, 0
                while position < len(entries) or self.reader.more():  # a tape still being recorded grows
                    if not position % 256 and time.monotonic() > self.deadline:
                        raise ReplayLimitError(f"the replay did not finish within {self.limits.seconds:g} s")
                    if position < len(entries):
                        self.entry(position, entries[position])
                        position += 1
        except MemoryError as exc:
            raise ReplayLimitError(f"the replay ran out of memory: {exc}", "memory") from None
        finally:
            pop()
            self._let_go()
        if self.result is None:
            raise TapeError("the tape does not say what the kernel returned")
        if self.inputs:
            raise TapeError(f"the tape declares {len(self.input_ids)} array inputs; the kernel has "
                            f"{len(self.input_ids) + len(self.inputs)}")
        return self.result

    def _let_go(self) -> None:
        """Break the replay's reference cycles (its handlers, the reader's resolve, the registry), so that
        its tensors are freed the moment it ends: a paused collector (the profiler pauses it while it
        concludes) must not keep a numeric replay's gigabytes alive until it resumes."""
        self.handlers.clear()
        self.reader.detach()
        self.sim.registry = None
        self.sim.blocks = None

    def entry(self, position: int, entry: Any) -> None:
        if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
            raise TapeError(f"tape entry {position} is not a tagged list")
        handler = self.handlers.get(entry[0])
        if handler is None:
            raise TapeError(f"tape entry {position} is a {entry[0]!r}, which no recording writes")
        if self.result is not None and entry[0] != "drop":
            raise TapeError(f"tape entry {position} comes after the kernel returned")
        try:
            handler(entry)
        except (NkiError, TapeError, ReplayLimitError, MemoryError):
            raise
        except (TypeError, ValueError, IndexError, KeyError, AttributeError, AssertionError) as exc:
            raise TapeError(f"tape entry {position} ({entry[0]}) does not replay: {type(exc).__name__}: "
                            f"{str(exc)[:200]}") from None

    # --- declarations ---------------------------------------------------------------------------
    def _fields(self, entry: list[Any], count: int) -> list[Any]:
        if len(entry) != count:
            raise TapeError(f"a {entry[0]} entry has {len(entry)} fields, not {count}")
        return entry

    def _new(self, recorded: Any, storage: Storage) -> None:
        if storage.id != recorded:
            raise TapeError(f"the tape says tensor {recorded!r} where the replay creates tensor {storage.id}")

    def _storage(self, tensor: Any) -> Storage:
        storage = self.sim.registry.get(tensor) if type(tensor) is int else None  # type: ignore[union-attr]
        if storage is None:
            raise TapeError(f"tensor {tensor!r} does not exist (or no longer) where the tape uses it")
        return storage

    def _place(self, line: Any, nest: Any) -> None:
        if type(line) is not int or line < 0:
            raise TapeError(f"line {line!r} is not a line number")
        self.at_line(line)
        self.sim.nest = self.reader.nest(nest)

    def input(self, entry: list[Any]) -> None:
        _, tensor, name, dtype_name, shape = self._fields(entry, 5)
        if not self.inputs:
            raise TapeError("the tape declares more array inputs than the kernel has")
        given = self.inputs.pop()
        dtype, dims = self.reader.dtype(dtype_name), self.reader.shape(shape)
        if dims != tuple(given.shape) or dtype != np.dtype(given.dtype):
            raise TapeError(f"the tape's input {tensor} is {dtype.name}{list(dims)}, the kernel's is "
                            f"{np.dtype(given.dtype).name}{list(given.shape)}")
        data = None
        if self.sim.numeric:
            memory = self.sim.memory
            memory.reserve(math.prod(dims) * dtype.itemsize)  # type: ignore[union-attr]
            if self.borrow_inputs:
                data = np.asarray(given).view()  # the caller's array, read-only: copied if the kernel writes it
                data.flags.writeable = False
            else:
                recycled = self.sim.recycled
                data = recycled.take(dims, dtype, memory.used) if recycled is not None else None  # type: ignore[union-attr]
                if data is None:
                    data = np.array(given, dtype=dtype, copy=True)
                else:
                    data[...] = given  # the previous seed's input array, this seed's values
        storage = Storage(self.sim, shown_name(name), HBM, dims, dtype, -1, data)
        storage.borrowed = self.borrow_inputs and data is not None
        self._new(tensor, storage)
        self.input_ids.add(storage.id)

    def tensor(self, entry: list[Any]) -> None:
        _, tensor, name, kind, dtype_name, shape, axis, placement, line, nest = self._fields(entry, 10)
        if kind not in (HBM, SBUF, PSUM):
            raise TapeError(f"buffer {kind!r} does not exist")
        dims = self.reader.shape(shape)
        if type(axis) is not int or not 0 <= axis < max(1, len(dims)):
            raise TapeError(f"partition axis {axis!r} is not a dimension of {list(dims)}")
        self._place(line, nest)
        located = None if placement is None else self._placement(kind, placement, dims[:axis])
        self._new(tensor, declare(kind, dims, axis, self.reader.dtype(dtype_name), shown_name(name), located).storage)

    def _placement(self, kind: str, plain: Any, blocks: tuple[int, ...]) -> Placement:
        """A direct allocation as recorded: each block's physical tile (checked again by allocation.place)."""
        if not (isinstance(plain, list) and len(plain) == 2 and isinstance(plain[1], list)):
            raise TapeError("a placement is not [slot array, locations]")
        slots = self.reader.array(plain[0], "int64")
        locations = plain[1]
        if slots.shape != blocks or (slots.size and not (slots.min() >= 0 and slots.max() < len(locations))):
            raise TapeError(f"a placement's slots do not map the blocks {list(blocks)} to its {len(locations)} tiles")
        if not all(isinstance(loc, list) and all(type(n) is int for n in loc) for loc in locations):
            raise TapeError("a placement's locations are not lists of integers")

        def locate(idx: tuple[int, ...], pdim_size: int, fdim_size: int) -> tuple[int, ...]:
            return tuple(locations[int(slots[idx])])

        return Placement(kind, locate, "the recorded placement")

    def view(self, entry: list[Any]) -> None:
        _, tensor, base, shape, line, nest, dtype = self._fields(entry, 7)
        self._place(line, nest)
        viewed = self._storage(base)
        self.viewed.add(viewed.id)
        whole = Tile(viewed, full_subscript(viewed.shape))
        as_recorded = whole.view(dtype) if dtype != viewed.dtype_name else whole.reshape(self.reader.shape(shape))
        self._new(tensor, as_recorded.storage)

    def fill(self, entry: list[Any]) -> None:
        _, tensor, plain, line = self._fields(entry, 4)
        self._place(line, 0)
        storage = self._storage(tensor)
        values = self.reader.value(plain)
        if not isinstance(values, (np.ndarray, np.generic, bool, int, float)):
            raise TapeError("host data is not a number or an array")
        host_fill(Tile(storage, full_subscript(storage.shape)), values)

    def drop(self, entry: list[Any]) -> None:
        _, tensors = self._fields(entry, 2)
        if not isinstance(tensors, list):
            raise TapeError("a drop entry does not list tensors")
        for tensor in tensors:
            storage = self._storage(tensor)
            del self.sim.registry[tensor]  # type: ignore[union-attr]
            data = storage.data
            blocks = self.sim.blocks
            if blocks is not None and blocks.holds(tensor):
                blocks.forget(tensor)
                self.sim.memory.release(data.nbytes)  # type: ignore[union-attr]
            elif storage.borrowed and self.sim.memory is not None:
                self.sim.memory.release(data.nbytes)  # the caller's array: not the pool's to keep
            elif data is not None and data.base is None and tensor not in self.viewed and self.sim.memory is not None:
                self.sim.memory.release(data.nbytes)
                if self.sim.recycled is not None:
                    storage.data = None  # its array is the pool's now
                    self.sim.recycled.give(data)

    # --- calls ----------------------------------------------------------------------------------
    def call(self, entry: list[Any]) -> None:
        _, op, plain, line, nest, created, emitted, raised = self._fields(entry, 8)
        function = REPLAYABLE.get(op) if isinstance(op, str) else None
        if function is None or type(plain) is not dict:
            raise TapeError(f"call of {op!r} is not an instruction call")
        self._place(line, nest)
        sim = self.sim
        arguments = self._arguments(op, plain)
        ids, index = sim.ids_used, len(sim.trace.instructions)
        if sim.blocks is not None and type(emitted) is int:
            sim.blocks.before(index, emitted)
        try:
            function(**arguments)
        except (MemoryError, ReplayLimitError):
            raise
        except Exception as exc:  # the kernel's own run may have raised here too (and caught it)
            if raised is not True:
                if isinstance(exc, NkiError):
                    raise
                raise TapeError(f"call of {op} at line {line} fails: {type(exc).__name__}: {str(exc)[:200]}") from None
        else:
            if raised is not False:
                raise TapeError(f"the tape says the call of {op} at line {line} failed; it does not")
        if (sim.ids_used - ids, len(sim.trace.instructions) - index) != (created, emitted):
            raise TapeError(f"the call of {op} at line {line} creates {sim.ids_used - ids} tensors and emits "
                            f"{len(sim.trace.instructions) - index} instructions; the tape says {created!r} and "
                            f"{emitted!r}")

    def _arguments(self, op: str, plain: dict[Any, Any]) -> dict[str, Any]:
        """A call's arguments by name as the simulator's objects: None and plain numbers as they are (most
        of a call's arguments; `TapeReader.value` would return them unchanged), the rest decoded."""
        value_of = self.reader.value
        arguments: dict[str, Any] = {}
        for name, value in plain.items():
            if type(name) is not str:
                raise TapeError(f"call of {op!r} is not an instruction call")
            arguments[name] = value if value is None or type(value) in _AS_RECORDED else value_of(value)
        return arguments

    def tile(self, plain: list[Any]) -> Tile:
        """A tensor reference of the tape as a tile of this replay's tensors (TapeReader's resolve)."""
        if len(plain) < 2:
            raise TapeError("a tile reference names no tensor")
        storage = self._storage(plain[1])
        if len(plain) == 2:
            return Tile(storage, full_subscript(storage.shape))
        decoded = self.reader.subscripts
        known = decoded.get(id(plain)) if decoded is not None else None
        if known is not None and known[0] is plain and known[1] == storage.shape:
            return Tile(storage, known[2])  # decoded and checked by an earlier replay of this tape
        if len(plain) - 2 != len(storage.shape):
            raise TapeError(f"a subscript of {len(plain) - 2} items for a tensor of {len(storage.shape)} dimensions")
        same = _subscript_key(storage.shape, plain)
        sub = self.subscripts.get(same) if same is not None else None
        if sub is None:
            items = tuple(self._item(item) for item in plain[2:])
            sub = normalize(items, storage.shape, storage.name)
            if math.prod(sub.shape) > MAX_TILE_ELEMENTS:
                raise TapeError(f"a tile of shape {sub.shape} is larger than any instruction handles")
            if same is not None and sub.overhang is None and len(self.subscripts) < MAX_KEPT_SUBSCRIPTS:
                self.subscripts[same] = sub  # an overhang's message names its tensor: not shared
            if decoded is not None and not any(type(item) is DynamicIndex for item in items):
                decoded[id(plain)] = (plain, storage.shape, sub)  # indices read from a tile differ per replay
        elif decoded is not None:
            decoded[id(plain)] = (plain, storage.shape, sub)
        return Tile(storage, sub)

    def _item(self, plain: Any) -> Any:
        if type(plain) is int:
            return plain
        if isinstance(plain, list) and plain:
            tag = plain[0]
            if tag == "s" and len(plain) == 4 and all(type(n) is int for n in plain[1:]):
                start, count, step = plain[1:]
                if count >= 0 and step >= 1:
                    return slice(start, start + (count - 1) * step + 1 if count else start, step)
            elif tag in ("x", "v"):
                return self.reader.expr(plain)
            elif tag == "d" and len(plain) == 5 and all(type(n) is int for n in plain[2:]):
                size, step, start = plain[2:]
                if size >= 1 and step >= 1:
                    return DynamicIndex(self.tile(plain[1]), size, step, start)
        raise TapeError(f"{str(plain)[:80]} is not a subscript item")

    # --- SPMD and the end -----------------------------------------------------------------------
    def program(self, entry: list[Any]) -> None:
        self._fields(entry, 1)
        start_program(self.sim)

    def launch(self, entry: list[Any]) -> None:
        _, grid = self._fields(entry, 2)
        if not isinstance(grid, list) or not grid or not all(type(n) is int and n >= 1 for n in grid):
            raise TapeError(f"launch grid {grid!r} is not a list of sizes")
        end_launch(self.sim, tuple(grid))

    def _output_array(self, tile: Tile, only_once: bool) -> np.ndarray:
        """An output's values: the replay's own array of a whole tensor returned `only_once`, handed over (the
        replay ends here, and a full-size output is hundreds of megabytes to copy), else a copy (part of a
        tensor, an input the caller holds, memory another tensor views, a tensor returned twice)."""
        storage = tile.storage
        values = tile.read()
        data = storage.data
        if (only_once and tile.is_whole and data is not None and data.base is None and not storage.borrowed
                and storage.id not in self.viewed and data.flags.c_contiguous):
            storage.data = None  # the caller's now: no later entry touches it or lends it to another replay
            return data
        return np.array(values)

    def returned(self, entry: list[Any]) -> None:
        _, plain = self._fields(entry, 2)
        if not isinstance(plain, list):
            raise TapeError("the kernel's outputs are not a list of tiles")
        tiles = [self.reader.value(item) for item in plain]
        if not all(isinstance(tile, Tile) and tile.buffer == HBM for tile in tiles):
            raise TapeError("an output of the kernel is not an HBM tensor")
        outputs: list[np.ndarray | None] = [
            self._output_array(tile, sum(t.storage is tile.storage for t in tiles) == 1) if self.sim.numeric else None
            for tile in tiles]
        returned_input = returns_unwritten_input(self.sim.trace, tiles, self.input_ids)
        self.result = RunResult(outputs, self.sim.trace, [t.shape for t in tiles], returned_input,
                                set(self.input_ids))
