"""`nki.isa` (newer NKI): every instruction writes the `dst` tile passed first and returns None."""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import numpy as np

from .. import isa as _legacy
from .. import ops
from ..errors import KernelUsageError
from ..indexing import IndexExpr, Mask
from ..tensor import PSUM, Tile, overlaps
from ..trace import Engine
from .lnc import core_barrier, sendrecv  # noqa: F401  (deprecated nisa.* wrappers of nki.lnc's)
from .scalar import (  # noqa: F401  (nisa.* names kernels call)
    NkiScalar,
    VirtualRegister,
    register_alloc,
    register_load,
    register_move,
    register_store,
    scalar_load,
    scalar_store,
)


class matmul_perf_mode(Enum):  # noqa: N801  (NKI's own name)
    """Tensor-engine performance modes: double_row runs FP8 at twice the rate (NeuronCore-v3 and later)."""

    none = "none"
    double_row = "double_row"


def nc_matmul(dst: Tile, stationary: Tile, moving: Tile, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, accumulate: bool | None = None,
              perf_mode: Any = None, **_: Any) -> None:
    """accumulate=None: the first matmul into a PSUM region overwrites, the following ones add
    (docs/fact-sheet.md A.3). The docs do not say what ends such a group; here any other
    instruction reading or writing the region does, so the next matmul starts a new one."""
    storage = dst.storage
    region = dst.sub.region
    # a region inside one an open group wrote was "previously written" (a matmul into ps[:, 0:256]
    # after one into ps[:, 0:512] adds)
    inside = any(_contains(open_region, region) for open_region in storage.mm_open or ())
    if accumulate is None:
        accumulate = inside
    open_before = list(storage.mm_open or ())
    ops.nc_matmul(stationary, moving, is_transpose=is_transpose, dst=dst, accumulate=accumulate,
                  stationary_onezero=is_stationary_onezero, moving_onezero=is_moving_onezero, perf_mode=perf_mode)
    # recording the matmul closed the groups it touched, the one it continues among them: that one stays
    # open (k-outer loops accumulate into several column ranges of one PSUM tile in turn)
    kept = [r for r in open_before if _contains(r, region) or not overlaps(r, region)]
    storage.mm_open = kept + ([] if inside else [region])


def _contains(outer: tuple[tuple[int, int], ...], inner: tuple[tuple[int, int], ...]) -> bool:
    return all(lo <= lo2 and hi2 <= hi for (lo, hi), (lo2, hi2) in zip(outer, inner, strict=True))


def nc_transpose(dst: Tile, data: Tile, engine: Any = None, **_: Any) -> None:
    ops.nc_transpose(data, engine=engine, dst=dst)


def dma_copy(dst: Tile, src: Tile, dst_rmw_op: Any = None, **_: Any) -> None:
    ops.dma_copy(src, dst=dst, dst_rmw_op=dst_rmw_op)


def activation(dst: Tile, op: Any, data: Tile, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None,
               reduce_res: Tile | None = None, reduce_cmd: Any = None, **_: Any) -> None:
    ops.activation(op, data, bias, scale, reduce_op=reduce_op, reduce_res=reduce_res, reduce_cmd=reduce_cmd,
                   dst=dst)


def activation_reduce(dst: Tile, op: Any, data: Tile, reduce_op: Any, reduce_res: Tile, bias: Any = None,
                      scale: Any = 1.0, **_: Any) -> None:
    ops.activation(op, data, bias, scale, reduce_op=reduce_op, reduce_res=reduce_res, dst=dst)


def tensor_tensor(dst: Tile, data1: Tile, data2: Tile, op: Any, engine: Any = None, **_: Any) -> None:
    ops.tensor_tensor(data1, data2, op, engine=engine, dst=dst)


def tensor_scalar(dst: Tile, data: Tile, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, engine: Any = None, **_: Any) -> None:
    ops.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1, engine=engine, dst=dst)


def scalar_tensor_tensor(dst: Tile, data: Tile, op0: Any, operand0: Any, op1: Any, operand1: Tile,
                         reverse0: bool = False, reverse1: bool = False, **_: Any) -> None:
    ops.scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0=reverse0, reverse1=reverse1,
                             dst=dst)


def tensor_reduce(dst: Tile, op: Any, data: Tile, axis: Any, negate: bool = False, keepdims: bool = False,
                  **_: Any) -> None:
    ops.tensor_reduce(op, data, axis, negate=negate, keepdims=keepdims, dst=dst)


def tensor_copy(dst: Tile, src: Tile, engine: Any = None, **_: Any) -> None:
    ops.tensor_copy(src, engine=engine, dst=dst)


def tensor_tensor_scan(dst: Tile, data0: Tile, data1: Tile, initial: Any, op0: Any, op1: Any,
                       reverse0: bool = False, reverse1: bool = False, **_: Any) -> None:
    ops.tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=reverse0, reverse1=reverse1, dst=dst)


def memset(dst: Tile, value: Any, engine: Any = None, **_: Any) -> None:
    ops.memset(dst.shape, value, dst.dtype, engine=engine, dst=dst)


def reciprocal(dst: Tile, data: Tile, engine: Any = None, **_: Any) -> None:
    ops.reciprocal(data, engine=engine, dst=dst)


def tensor_scalar_reduce(dst: Tile, data: Tile, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Tile | None,
                         reverse0: bool = False, reduce_cmd: Any = None, reduce_res_negate: bool = False,
                         **_: Any) -> None:
    ops.tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0=reverse0, reduce_cmd=reduce_cmd,
                             negate=bool(reduce_res_negate), dst=dst)


def bn_stats(dst: Tile, data: Tile, **_: Any) -> None:
    ops.bn_stats(data, dst=dst)


def bn_aggr(dst: Tile, data: Tile, **_: Any) -> None:
    ops.bn_aggr(data, dst=dst)


def tensor_partition_reduce(dst: Tile, op: Any, data: Tile, **_: Any) -> None:
    ops.tensor_partition_reduce(op, data, dst=dst)


def dropout(dst: Tile, data: Tile, prob: Any, **_: Any) -> None:
    ops.dropout(data, prob, dst=dst)


def nc_stream_shuffle(dst: Tile, src: Tile, shuffle_mask: Any, **_: Any) -> None:
    ops.nc_stream_shuffle(src, dst, shuffle_mask)


def tensor_copy_predicated(dst: Tile, src: Any, predicate: Tile, reverse_pred: bool = False, **_: Any) -> None:
    ops.tensor_copy_predicated(src, dst, predicate, reverse_pred=reverse_pred)


def range_select(dst: Tile, on_true_tile: Tile, comp_op0: Any, comp_op1: Any, bound0: Tile, bound1: Tile,
                 reduce_cmd: Any = "reset_reduce", reduce_res: Tile | None = None, reduce_op: Any = "maximum",
                 range_start: int = 0, on_false_value: float = ops.FP32_MIN, **_: Any) -> None:
    ops.range_select(on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd, reduce_res=reduce_res,
                     reduce_op=reduce_op, range_start=range_start, on_false_value=on_false_value, dst=dst)


def max8(dst: Tile, src: Tile, **_: Any) -> None:
    ops.max8(src, dst=dst)


def nc_find_index8(dst: Tile, data: Tile, vals: Tile, **_: Any) -> None:
    ops.nc_find_index8(data, vals, dst=dst)


def nc_match_replace8(dst: Tile, data: Tile, vals: Tile, imm: Any, dst_idx: Tile | None = None, **_: Any) -> None:
    ops.nc_match_replace8(data, vals, imm, dst=dst, dst_idx=dst_idx)


def dma_transpose(dst: Tile, src: Tile, axes: tuple[int, ...] | None = None, **_: Any) -> None:
    """DMA `src` into `dst` with its dimensions permuted (`axes`, by default the reversal of 2-D)."""
    order = tuple(axes) if axes is not None else _legacy.DMA_TRANSPOSE_AXES.get(src.ndim)
    if order is None:
        raise KernelUsageError(f"nisa.dma_transpose needs axes= for a tile of shape {src.shape}")
    ops.dma_copy(src, dst=dst, axes=order)


def _pattern(dst: Tile, pattern: Any, offset: Any, channel_multiplier: Any, what: str) -> IndexExpr:
    """The affine values `offset + channel_multiplier * partition + sum(step * i)` over the access
    pattern [[step, num], ...] (outermost first), shaped as `dst`."""
    try:
        steps = [(int(step), int(num)) for step, num in pattern]
    except (TypeError, ValueError):
        raise KernelUsageError(f"{what}: pattern must be a list of [step, num] pairs, got {pattern!r}") from None
    free = math.prod(num for _, num in steps)
    if free != dst.size // dst.shape[0]:
        raise KernelUsageError(f"{what}: the pattern covers {free} elements per partition; dst {dst.shape} has "
                               f"{dst.size // dst.shape[0]}")
    grid = (dst.shape[0], *(num for _, num in steps))
    terms = ((0, int(channel_multiplier)), *((axis + 1, step) for axis, (step, _) in enumerate(steps)))
    values = IndexExpr(grid, int(offset or 0), tuple((a, c) for a, c in terms if c)).values
    return IndexExpr(dst.shape, values=values.reshape(dst.shape))


def iota(dst: Tile, pattern: Any = None, offset: Any = 0, channel_multiplier: Any = 0, **kwargs: Any) -> None:
    """`iota(dst, pattern, offset, channel_multiplier)`, or an index expression as the legacy API takes."""
    expr = kwargs.get("expr", pattern)
    if not isinstance(expr, IndexExpr):
        expr = _pattern(dst, pattern, offset, channel_multiplier, "iota")
    ops.iota(expr, dst.dtype, dst=dst)


# affine_select's positional order: SDK 2.27/2.28, then 2.29 moved offset last (told apart by the tile)
_SELECT_ORDER = ("offset", "channel_multiplier", "on_true_tile", "on_false_value", "cmp_op")
_SELECT_ORDER_229 = ("channel_multiplier", "on_true_tile", "on_false_value", "cmp_op", "offset")


def affine_select(dst: Tile, pattern: Any, *args: Any, **kwargs: Any) -> None:
    """dst = on_true_tile where cmp_op(affine value, 0), else on_false_value (GpSimd)."""
    order = _SELECT_ORDER_229 if len(args) > 1 and isinstance(args[1], Tile) else _SELECT_ORDER
    given = {**dict(zip(order, args, strict=False)), **kwargs}
    on_true_tile, cmp_op = given.get("on_true_tile"), given.get("cmp_op")
    values = _pattern(dst, pattern, given.get("offset", 0), given.get("channel_multiplier", 0), "affine_select").values
    compare = ops.ALU[ops.op_name(cmp_op)] if cmp_op is not None else np.equal
    if isinstance(on_true_tile, Tile) and on_true_tile.buffer == PSUM:
        on_true_tile = ops.tensor_copy(on_true_tile)  # GpSimd cannot reach PSUM: the compiler copies first
    ops.select(Mask(compare(values, 0)), on_true_tile, given.get("on_false_value", 0.0), engine=Engine.GPSIMD,
               dst=dst)


def __getattr__(name: str) -> Any:
    """An instruction declared for this API without an adapter above (nki/instructions.py), else the legacy
    module's name (the enums and constants both APIs share)."""
    return ops.api_function("modern", name) or getattr(_legacy, name)
