"""Hand-built traces for the performance-model tests.

Writing `Instruction` records by hand is verbose and easy to get subtly wrong (regions, byte counts,
contiguity), so the tests describe kernels through this small builder instead. It only creates
trace records; it never imitates what the simulator would decide.
"""

from __future__ import annotations

from typing import Any

from accelopt_core.nki.dtypes import DTYPE_SIZES
from accelopt_core.nki.trace import Access, Instruction, Loop, LoopNest, TensorInfo, Trace

Region = tuple[tuple[int, int], ...]


def _prod(values: tuple[int, ...]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


class TraceBuilder:
    """Accumulates tensors, loops and instructions into a `Trace`."""

    def __init__(self) -> None:
        self.trace = Trace(kernel_file="test_kernel.py", kernel_name="kernel")
        self._nest: LoopNest = ()

    # ------------------------------------------------------------------ declarations
    def tensor(self, name: str, buffer: str, shape: tuple[int, ...], dtype: str = "float32",
               partition_axis: int = 0, line: int = 1) -> int:
        """Declare a tensor; on-chip ones get their per-partition footprint (block dims included).
        `line` is the declaring statement: the tiles one statement declares in a loop rotate through
        the compiler's buffers."""
        tid = len(self.trace.tensors) + 1
        if buffer == "hbm":
            partition_axis = -1
            per_partition = 0
        else:
            per_partition = _prod(shape[:partition_axis] + shape[partition_axis + 1:]) * DTYPE_SIZES[dtype]
        self.trace.tensors[tid] = TensorInfo(
            id=tid, name=name, buffer=buffer, shape=shape, dtype=dtype, partition_axis=partition_axis,
            bytes_per_partition=per_partition, line=line, loops=self._nest)
        return tid

    def loop(self, kind: str, trip_count: int, line: int = 1, parent: Loop | None = None) -> Loop:
        loop = Loop(id=len(self.trace.loops) + 1, kind=kind, trip_count=trip_count, line=line, parent=parent)
        self.trace.loops.append(loop)
        return loop

    def enter(self, *pairs: tuple[Loop, int]) -> None:
        """Make following instructions run in this loop nest (outermost first)."""
        self._nest = tuple(pairs)

    def leave(self) -> None:
        self._nest = ()

    # --------------------------------------------------------------------- accesses
    def access(self, tid: int, region: Region | None = None) -> Access:
        info = self.trace.tensors[tid]
        if region is None:
            region = tuple((0, s) for s in info.shape)
        shape = tuple(hi - lo for lo, hi in region)
        if info.partition_axis > 0:
            # a block tensor is accessed one block at a time: the tile starts at the partition dim
            shape = shape[info.partition_axis:]
        size = DTYPE_SIZES[info.dtype]
        nbytes = _prod(shape) * size
        # HBM: longest row-major run of the box; on chip: one partition's free data
        contiguous = (_contiguous_run(info.shape, region) if info.buffer == "hbm" else _prod(shape[1:])) * size
        return Access(tensor=tid, buffer=info.buffer, dtype=info.dtype, shape=shape, region=region,
                      nbytes=nbytes, contiguous_bytes=contiguous)

    # ----------------------------------------------------------------- instructions
    def _add(self, engine: str, op: str, reads: tuple[Access, ...], writes: tuple[Access, ...],
             partitions: int, free: int, flops: int = 0, line: int = 1, dtype: str = "float32",
             attrs: dict[str, Any] | None = None) -> Instruction:
        inst = Instruction(index=len(self.trace.instructions), engine=engine, op=op, reads=reads,
                           writes=writes, partitions=partitions, free_elements=free, flops=flops,
                           line=line, loops=self._nest, attrs=attrs, dtype=dtype)
        self.trace.instructions.append(inst)
        return inst

    def dma(self, src: int, dst: int, src_region: Region | None = None, dst_region: Region | None = None,
            line: int = 1, transpose: bool = False) -> Instruction:
        """A `dma_copy` from `src` to `dst` (either side may be hbm/sbuf)."""
        a = self.access(src, src_region)
        b = self.access(dst, dst_region)
        direction = f"{a.buffer}_to_{b.buffer}"
        on_chip = b if b.buffer != "hbm" else a
        partitions = on_chip.shape[0] if on_chip.shape else 1
        free = _prod(on_chip.shape[1:])
        return self._add("dma", "dma_copy", (a,), (b,), partitions, free, line=line, dtype=a.dtype,
                         attrs={"direction": direction, "transpose": transpose})

    def matmul(self, stationary: int, moving: int, psum: int, accumulate: bool = False,
               psum_region: Region | None = None, stationary_region: Region | None = None,
               moving_region: Region | None = None, line: int = 1, is_transpose: bool = False) -> Instruction:
        st = self.access(stationary, stationary_region)
        mv = self.access(moving, moving_region)
        out = self.access(psum, psum_region)
        k = st.shape[0]
        m = _prod(st.shape[1:])
        n = _prod(mv.shape[1:])
        reads = (st, mv, out) if accumulate else (st, mv)
        return self._add("tensor", "nc_matmul", reads, (out,), k, n, flops=2 * k * m * n, line=line,
                         dtype=st.dtype, attrs={"stationary_free": m, "moving_free": n, "contraction": k,
                                                "accumulate": accumulate, "is_transpose": is_transpose})

    def compute(self, engine: str, op: str, reads: list[int | Access], writes: list[int | Access],
                line: int = 1, attrs: dict[str, Any] | None = None, dtype: str = "float32") -> Instruction:
        """A Vector/Scalar/GpSimd instruction; partitions and free size come from the first write."""
        r = tuple(x if isinstance(x, Access) else self.access(x) for x in reads)
        w = tuple(x if isinstance(x, Access) else self.access(x) for x in writes)
        shape = w[0].shape if w else r[0].shape
        return self._add(engine, op, r, w, shape[0], _prod(shape[1:]), line=line, attrs=attrs, dtype=dtype)

    def build(self) -> Trace:
        return self.trace


def _contiguous_run(shape: tuple[int, ...], region: Region) -> int:
    """Longest contiguous run, in elements, of a box in a row-major tensor."""
    run = 1
    for dim in range(len(shape) - 1, -1, -1):
        lo, hi = region[dim]
        run *= hi - lo
        if hi - lo != shape[dim]:
            break
    return run
