"""`neuronxcc.nki.isa` (legacy NKI): one function per instruction, each returning a new tile."""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import Any

from . import ops
from .errors import KernelUsageError, missing_api
from .indexing import Mask
from .tensor import PSUM, Tile, current
from .trace import Engine, Op


class EngineChoice:
    """`nisa.vector_engine` and friends; `unknown_engine` lets the compiler choose."""

    def __init__(self, name: str):
        self._engine = name

    def __repr__(self) -> str:
        return f"nisa.{self._engine}_engine"


class engine:  # noqa: N801  (NKI's own name)
    tensor = EngineChoice(Engine.TENSOR)
    vector = EngineChoice(Engine.VECTOR)
    scalar = EngineChoice(Engine.SCALAR)
    gpsimd = EngineChoice(Engine.GPSIMD)
    sync = EngineChoice("sync")
    unknown = EngineChoice("unknown")


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


reduce_cmd = type("reduce_cmd", (), {command: command for command in ops.REDUCE_COMMANDS})


class dge_mode(Enum):  # noqa: N801  (NKI's own name)
    """How a DMA's descriptors are generated (`dma_copy(dge_mode=...)`): accepted, not modelled."""

    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(Enum):  # noqa: N801  (NKI's own name)
    """What an out-of-bounds dynamic access does at run time: accepted (the simulator always checks)."""

    error = 0
    skip = 1


class dma_engine(Enum):  # noqa: N801  (NKI's own name)
    """Which DMA engine a collective transfer uses (`sendrecv(dma_engine=...)`): a name kernels import."""

    dma = 1
    gpsimd_dma = 2


class nc_version(IntEnum):  # noqa: N801  (NKI's own name)
    """NeuronCore generations: gen2 is trn1 (and inf2), gen3 is trn2, gen4 is trn3 (nki.isa.nc_version)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """The NeuronCore generation the kernel is being run for."""
    return nc_version(current().limits.neuron_core_version)


def nc_matmul(stationary: Tile, moving: Tile, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, mask: Mask | None = None,
              perf_mode: Any = None, **_: Any) -> Tile:
    stationary, moving = _staged(stationary), _staged(moving)
    return ops.nc_matmul(stationary, moving, is_transpose=is_transpose, mask=mask,
                         stationary_onezero=is_stationary_onezero,
                         moving_onezero=is_moving_onezero, perf_mode=perf_mode)


def _staged(operand: Tile) -> Tile:
    """A matmul operand that a Tensor-engine transpose just left in PSUM, copied to SBUF as the
    compiler does (the flash-attention backward kernel multiplies nc_transpose results directly);
    any other PSUM operand stays an error: the Tensor engine reads SBUF only."""
    producer = operand.storage.producer if isinstance(operand, Tile) else None
    if operand.buffer == PSUM and producer is not None and producer.op == Op.NC_TRANSPOSE:
        return ops.tensor_copy(operand, dtype=operand.dtype)
    return operand


def nc_transpose(data: Tile, engine: Any = None, mask: Mask | None = None, dtype: Any = None,
                 **_: Any) -> Tile:
    return ops.nc_transpose(data, engine=engine, mask=mask, dtype=dtype)


def activation(op: Any, data: Tile, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None,
               reduce_res: Tile | None = None, reduce_cmd: Any = None, mask: Mask | None = None,
               dtype: Any = None, **_: Any) -> Tile:
    return ops.activation(op, data, bias, scale, reduce_op=reduce_op, reduce_res=reduce_res,
                          reduce_cmd=reduce_cmd, dtype=dtype, mask=mask)


def activation_reduce(op: Any, data: Tile, reduce_op: Any, reduce_res: Tile, bias: Any = None,
                      scale: Any = 1.0, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.activation(op, data, bias, scale, reduce_op=reduce_op, reduce_res=reduce_res,
                          dtype=dtype, mask=mask)


def tensor_tensor(data1: Tile, data2: Tile, op: Any, engine: Any = None, mask: Mask | None = None,
                  dtype: Any = None, **_: Any) -> Tile:
    return ops.tensor_tensor(data1, data2, op, engine=engine, mask=mask, dtype=dtype)


def tensor_scalar(data: Tile, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, engine: Any = None,
                  mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1, engine=engine,
                             mask=mask, dtype=dtype)


def scalar_tensor_tensor(data: Tile, op0: Any, operand0: Any, op1: Any, operand1: Tile,
                         reverse0: bool = False, reverse1: bool = False, mask: Mask | None = None,
                         dtype: Any = None, **_: Any) -> Tile:
    return ops.scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0=reverse0,
                                    reverse1=reverse1, mask=mask, dtype=dtype)


def tensor_reduce(op: Any, data: Tile, axis: Any, negate: bool = False, keepdims: bool = False,
                  mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.tensor_reduce(op, data, axis, negate=negate, keepdims=keepdims, mask=mask, dtype=dtype)


def tensor_copy(src: Tile, engine: Any = None, mask: Mask | None = None, dtype: Any = None,
                **_: Any) -> Tile:
    return ops.tensor_copy(src, engine=engine, mask=mask, dtype=dtype)


def tensor_tensor_scan(data0: Tile, data1: Tile, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                       reverse1: bool = False, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=reverse0, reverse1=reverse1,
                                  mask=mask, dtype=dtype)


def tensor_scalar_reduce(*, data: Tile, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Tile | None = None,
                         reverse0: bool = False, reduce_cmd: Any = None, dtype: Any = None, mask: Mask | None = None,
                         **_: Any) -> Tile:
    return ops.tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0=reverse0,
                                    reduce_cmd=reduce_cmd, dtype=dtype, mask=mask)


def bn_stats(data: Tile, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.bn_stats(data, mask=mask, dtype=dtype)


def bn_aggr(data: Tile, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.bn_aggr(data, mask=mask, dtype=dtype)


def tensor_partition_reduce(op: Any, data: Tile, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.tensor_partition_reduce(op, data, mask=mask, dtype=dtype)


def dropout(data: Tile, prob: Any, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.dropout(data, prob, mask=mask, dtype=dtype)


def dma_copy(src: Tile | None = None, dst: Tile | None = None, *, mask: Mask | None = None,
             dst_rmw_op: Any = None, **_: Any) -> Tile:
    """`nisa.dma_copy(src=..., dst=...)` (legacy): one DMA transfer into `dst` (added to it with
    `dst_rmw_op=np.add`)."""
    if src is None or dst is None:
        raise KernelUsageError("nisa.dma_copy needs both src= and dst=")
    return ops.dma_copy(src, dst=dst, mask=mask, dst_rmw_op=dst_rmw_op)


# the dimension order nisa.dma_transpose produces for a 2-, 3- and 4-D source (nki.isa.dma_transpose)
DMA_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def nc_stream_shuffle(src: Tile, dst: Tile, shuffle_mask: Any, dtype: Any = None, mask: Mask | None = None,
                      **_: Any) -> None:
    ops.nc_stream_shuffle(src, dst, shuffle_mask, mask=mask)


def tensor_copy_predicated(src: Any, dst: Tile, predicate: Tile, mask: Mask | None = None, dtype: Any = None,
                           reverse_pred: bool = False, **_: Any) -> None:
    ops.tensor_copy_predicated(src, dst, predicate, reverse_pred=reverse_pred, mask=mask)


def range_select(on_true_tile: Tile, comp_op0: Any, comp_op1: Any, bound0: Tile, bound1: Tile,
                 reduce_cmd: Any = "reset_reduce", reduce_res: Tile | None = None, reduce_op: Any = "maximum",
                 range_start: int = 0, on_false_value: float = ops.FP32_MIN, mask: Mask | None = None,
                 dtype: Any = None, **_: Any) -> Tile:
    return ops.range_select(on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd,
                            reduce_res=reduce_res, reduce_op=reduce_op, range_start=range_start,
                            on_false_value=on_false_value, dtype=dtype, mask=mask)


def dma_compute(dst: Tile, srcs: Any, reduce_op: Any, scales: Any = None, **_: Any) -> None:
    ops.dma_compute(dst, srcs, reduce_op, scales=scales)


def max8(src: Tile, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.max8(src, dtype=dtype, mask=mask)


def nc_find_index8(data: Tile, vals: Tile, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    return ops.nc_find_index8(data, vals, dtype=dtype, mask=mask)


def nc_match_replace8(data: Tile, vals: Tile, imm: Any, dst_idx: Tile | None = None, mask: Mask | None = None,
                      dtype: Any = None, **_: Any) -> Tile:
    return ops.nc_match_replace8(data, vals, imm, dst_idx=dst_idx, dtype=dtype, mask=mask)


def dma_transpose(src: Tile, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    axes = DMA_TRANSPOSE_AXES.get(src.ndim)
    if axes is None:
        raise KernelUsageError(f"nisa.dma_transpose transposes 2-, 3- or 4-D tiles, got shape {src.shape}")
    return ops.dma_copy(src, mask=mask, dtype=dtype, axes=axes)


def memset(shape: Any, value: Any, dtype: Any, engine: Any = None, mask: Mask | None = None,
           **_: Any) -> Tile:
    return ops.memset(tuple(shape), value, dtype, engine=engine, mask=mask)


def iota(expr: Any, dtype: Any, mask: Mask | None = None, **_: Any) -> Tile:
    return ops.iota(expr, dtype, mask=mask)


def reciprocal(data: Tile, mask: Mask | None = None, dtype: Any = None, engine: Any = None, **_: Any) -> Tile:
    return ops.reciprocal(data, mask=mask, dtype=dtype, engine=engine)


def affine_select(pred: Mask, on_true_tile: Tile, on_false_value: Any, mask: Mask | None = None,
                  dtype: Any = None, **_: Any) -> Tile:
    if not isinstance(pred, Mask):
        raise KernelUsageError("affine_select needs a predicate built from index expressions")
    # GpSimd cannot reach PSUM (fact sheet A.4): the compiler first copies a PSUM tile to SBUF (flash
    # attention selects straight from its PSUM scores, and is checked on hardware)
    if isinstance(on_true_tile, Tile) and on_true_tile.buffer == PSUM:
        on_true_tile = ops.tensor_copy(on_true_tile)
    return ops.select(pred, on_true_tile, on_false_value, dtype=dtype, mask=mask, engine=Engine.GPSIMD)


_missing = missing_api("nki.isa", {"constants": "accelopt_core.nki.isa_constants"})


def __getattr__(name: str) -> Any:
    """An instruction declared for this API without an adapter above (nki/instructions.py), else the name of
    what is not implemented."""
    return ops.api_function("legacy", name) or _missing(name)
