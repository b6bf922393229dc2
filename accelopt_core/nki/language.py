"""`neuronxcc.nki.language` (legacy NKI) on the CPU.

Every function records the instructions the compiler would emit for it: transcendentals run on
the Scalar engine (`activation`), arithmetic on the Vector engine (`tensor_tensor`, or
`tensor_scalar` when one side is a scalar or a [P, 1] column), reductions on the Vector engine,
loads and stores on DMA queues, matmuls and transposes on the Tensor engine.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import dtypes, ops
from .errors import HardwareRuleError, KernelUsageError, UnsupportedApiError, missing_api
from .indexing import Mask, arange, as_mask, ds, mgrid  # noqa: F401  (re-exported NKI names)
from .tensor import HBM, PSUM, SBUF, Buffer, Limits, ParDim, Tile, allocate, current, host_fill, running
from .trace import LoopKind

# --- data types --------------------------------------------------------------------------------
float32 = dtypes.float32
float16 = dtypes.float16
bfloat16 = dtypes.bfloat16
tfloat32 = dtypes.tfloat32
float8_e4m3 = dtypes.float8_e4m3
float8_e4m3fn = dtypes.float8_e4m3fn
float8_e5m2 = dtypes.float8_e5m2
int8, int16, int32 = dtypes.int8, dtypes.int16, dtypes.int32
uint8, uint16, uint32 = dtypes.uint8, dtypes.uint16, dtypes.uint32
bool_ = dtypes.bool_
float4_e2m1fn_x4, float8_e4m3fn_x4, float8_e5m2_x4 = dtypes.PACKED_MX.values()


class fp32:  # noqa: N801  (NKI's own name)
    """FP32 constants (nki.language.fp32): `min`, the most negative float32 (bit pattern 0xff7fffff)."""

    min = float(np.finfo(np.float32).min)


def finfo(dtype: Any) -> Any:
    """Limits of a floating-point type (`nl.finfo(nl.bfloat16).min`), narrow floats included."""
    import ml_dtypes

    return ml_dtypes.finfo(dtypes.as_dtype(dtype))

# --- buffers -----------------------------------------------------------------------------------
sbuf = Buffer("sbuf", SBUF)
psum = Buffer("psum", PSUM)
hbm = Buffer("hbm", HBM)
shared_hbm = Buffer("shared_hbm", HBM)
private_hbm = Buffer("private_hbm", HBM)
par_dim = ParDim


class _SbufSizes(type):
    """The SBUF sizes of `nl.tile_size` follow the generation being simulated (fact sheet A.4: 176 KiB
    usable per partition on trn1, 212,984 B on trn2); library kernels budget their buffers with them."""

    @property
    def total_available_sbuf_size(cls) -> int:
        sim = running()
        return (sim.limits if sim is not None else Limits.for_hardware("trn1")).sbuf_usable_bytes

    @property
    def sbuf_fmax_bytes(cls) -> int:
        return cls.total_available_sbuf_size

    @property
    def sbuf_fmax(cls) -> int:
        return cls.total_available_sbuf_size // 4  # FP32 elements

    @property
    def sbuf_size_bytes(cls) -> int:
        return cls.pmax * cls.total_available_sbuf_size  # all partitions


class tile_size(metaclass=_SbufSizes):  # noqa: N801  (NKI's own name)
    """Hardware tile limits as kernels read them (docs/fact-sheet.md A.3, A.4)."""

    pmax = 128
    psum_fmax = 512  # deprecated name of psum_bank_fmax (NKI 0.4.0)
    psum_bank_fmax = 512  # FP32 elements per PSUM bank and partition
    psum_bank_fmax_bytes = 2048
    psum_fmax_bytes = 2048
    psum_num_banks = 8
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_partition_bytes = 16384
    psum_min_align = 4
    sbuf_min_align = 1


# --- allocation --------------------------------------------------------------------------------
def ndarray(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **_: Any) -> Tile:
    """An uninitialised tensor (NaN-filled in numeric mode so stray reads show up).

    Extra keyword arguments are accepted and ignored: kernels in the wild pass options such as
    `lazy_initialization=`, which no NKI documentation we found describes."""
    return allocate(shape, dtype, buffer, name)


def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = None, name: str = "", **_: Any) -> Tile:
    tile = allocate(shape, dtype, buffer, name)
    if tile.buffer == HBM:
        host_fill(tile, fill_value)
        return tile
    blocks = tile.storage.shape[:tile.storage.partition_axis]
    if blocks:  # one memset per block tile
        for index in np.ndindex(*blocks):
            ops.memset(tile[index].shape, fill_value, tile.dtype, dst=tile[index])
    else:
        ops.memset(tile.shape, fill_value, tile.dtype, dst=tile)
    return tile


def zeros(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kwargs: Any) -> Tile:
    return full(shape, 0, dtype, buffer, name, **kwargs)


def ones(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kwargs: Any) -> Tile:
    return full(shape, 1, dtype, buffer, name, **kwargs)


def empty_like(a: Tile, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> Tile:
    return ndarray(a.shape, dtype if dtype is not None else a.dtype, buffer or a.buffer, name)


def zeros_like(a: Tile, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> Tile:
    return zeros(a.shape, dtype if dtype is not None else a.dtype, buffer or a.buffer, name)


def ones_like(a: Tile, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> Tile:
    return ones(a.shape, dtype if dtype is not None else a.dtype, buffer or a.buffer, name)


def shared_constant(constant: Any, dtype: Any = None, **_: Any) -> Tile:
    """A constant tensor in HBM built from host data."""
    values = np.asarray(constant)
    dtype = dtypes.as_dtype(dtype) if dtype is not None else values.dtype
    tile = allocate(values.shape, dtype, hbm, "constant")
    host_fill(tile, values.astype(dtype))
    return tile


def shared_identity_matrix(n: int, dtype: Any = uint8, **_: Any) -> Tile:
    return shared_constant(np.eye(n), dtype)


# --- SPMD and loops ----------------------------------------------------------------------------
def nc(count: int) -> int:
    """`kernel[nl.nc(2)]`: spread a grid dimension over physical cores. The simulator runs every
    program in turn on one core either way, so the grid dimension is just its size."""
    return int(count)


def spmd_dim(*sizes: int) -> int:
    """`kernel[nl.spmd_dim(4, nl.nc(2)), 2]`: a grid dimension tiled over cores; as many programs as
    the product of its sub-dimensions."""
    return math.prod(int(size) for size in sizes)


def program_id(axis: int = 0) -> int:
    """This program's index along `axis` of the launch grid (0 outside a grid launch)."""
    ids = current().program_id
    return ids[axis] if axis < len(ids) else 0


def num_programs(axes: int | tuple[int, ...] | None = None) -> int:
    """Programs along `axes` of the launch grid; all of them when no axis is given."""
    grid = current().grid
    if axes is None:
        return math.prod(grid)
    return math.prod(grid[a] if a < len(grid) else 1 for a in ((axes,) if isinstance(axes, int) else axes))


def program_ndim() -> int:
    """Dimensions of the launch grid, 0 without one (nki.language.program_ndim)."""
    return len(current().grid)


def affine_range(*args: int, **_: Any) -> Iterator[int]:
    return current().loop(LoopKind.AFFINE, args)


def sequential_range(*args: int, **_: Any) -> Iterator[int]:
    return current().loop(LoopKind.SEQUENTIAL, args)


def static_range(*args: int, **_: Any) -> Iterator[int]:
    return current().loop(LoopKind.STATIC, args)


class KernelRange:
    """Replaces `range` inside kernel modules: a recorded loop when iterated during a kernel run."""

    def __init__(self, kind: str, *args: int):
        self.kind = kind
        self.args = args
        self.steps = builtins.range(*args)

    def __iter__(self) -> Iterator[int]:
        sim = running()
        return sim.loop(self.kind, self.args) if sim is not None else iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, i: Any) -> Any:
        return self.steps[i]

    def __reversed__(self) -> Iterator[int]:
        return reversed(self.steps)

    def __contains__(self, x: Any) -> bool:
        return x in self.steps


# --- data movement -----------------------------------------------------------------------------
def load(src: Tile, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    if not isinstance(src, Tile):
        raise KernelUsageError("nl.load needs a tensor (an HBM input or its slice)")
    return ops.dma_copy(src, mask=mask, dtype=dtype)


def store(dst: Tile, value: Any, mask: Mask | None = None, **_: Any) -> None:
    if not isinstance(dst, Tile) or dst.buffer != HBM:
        raise HardwareRuleError("nl.store writes to an HBM tensor; allocate the output with "
                                "buffer=nl.shared_hbm")
    if not isinstance(value, Tile):
        raise KernelUsageError("nl.store needs a tile to store")
    if value.buffer == PSUM:  # DMA cannot read PSUM: the compiler copies to SBUF first
        value = ops.tensor_copy(value)
    ops.dma_copy(value, dst=dst, mask=mask)


def load_transpose2d(src: Tile, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    if src.ndim != 2:
        raise KernelUsageError(f"nl.load_transpose2d loads a 2-D tile, got shape {src.shape}")
    return ops.dma_copy(src, mask=_over_the_result(mask, src.shape), dtype=dtype, axes=(1, 0))


def _over_the_result(mask: Mask | None, source_shape: tuple[int, ...]) -> Mask | None:
    """A load_transpose2d mask is written with the source access's indices (`i * 128 + i_r < n` for the
    ragged last rows it reads), so it is transposed onto the result; one only the result's shape fits
    is already over it."""
    mask = as_mask(mask)
    if mask is None:
        return None
    try:
        values = np.broadcast_to(mask.values, source_shape)
    except ValueError:
        return mask
    return Mask(values.T)


def copy(x: Tile | None = None, dtype: Any = None, mask: Mask | None = None, *, src: Tile | None = None,
         **_: Any) -> Tile:
    """A copy of `x` (the legacy docs name it `src=`)."""
    if x is None and src is None:
        raise KernelUsageError("nl.copy needs the tile to copy")
    return ops.tensor_copy(x if x is not None else src, dtype=dtype, mask=mask)


copy._nki_op = "copy"  # type: ignore[attr-defined]


def transpose(x: Tile, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """A PSUM tile too large for the Vector engine's 32x32 is first copied to SBUF, as for nl.matmul."""
    if x.buffer == PSUM and (x.shape[0] > 32 or math.prod(x.shape[1:]) > 32):
        x = ops.tensor_copy(x)
    return ops.nc_transpose(x, dtype=dtype, mask=mask)


def matmul(x: Tile, y: Tile, transpose_x: bool = False, mask: Mask | None = None, **_: Any) -> Tile:
    """x @ y into PSUM. Without transpose_x the compiler first transposes x on the Tensor engine. An
    operand still in PSUM (an nl.transpose result) is first copied to SBUF, as the compiler does: the
    Tensor engine reads SBUF only."""
    x, y = (ops.tensor_copy(t) if t.buffer == PSUM else t for t in (x, y))
    if not transpose_x:
        if x.buffer != SBUF:
            raise HardwareRuleError(f"nl.matmul reads x from SBUF; {x.name} is in {x.buffer.upper()}")
        contraction = math.prod(x.shape[1:])
        if contraction > current().limits.pmax:
            raise HardwareRuleError(f"matmul contraction dimension {contraction} exceeds "
                                    f"{current().limits.pmax} partitions (x tile {x.shape}, contracted over "
                                    "its free axis)")
        x = ops.tensor_copy(ops.nc_transpose(x), dtype=x.dtype)
    return ops.nc_matmul(x, y, mask=mask)


def broadcast_to(x: Tile | None = None, shape: Any = None, dtype: Any = None, *, src: Tile | None = None,
                 **_: Any) -> Tile:
    """Broadcast a tile by NumPy's rules (`x` or the legacy `src=`; `dtype=` of the newer API).

    Free dimensions of 1 are read again by one copy (a stride-0 access pattern). Across partitions the
    compiler multiplies by a ones vector on the Tensor engine (docs/fact-sheet.md A.3): one matmul per
    512-column PSUM bank of each [1, F] row, each copied into the SBUF result.
    """
    x = x if x is not None else src
    if x is None or shape is None:
        raise KernelUsageError("broadcast_to needs a tile and a shape")
    shape = tuple(int(s) for s in shape)
    source = tuple(x.shape)
    if len(source) == 1 and len(shape) > 1 and source[0] == shape[0]:
        # an on-chip 1-D tile runs along the partitions (a reduction's [P] result), so it spreads along
        # the free dimensions (sd_attention's `(1.0 / sum_res).broadcast_to((P, d_head))`)
        source = source + (1,) * (len(shape) - 1)
    elif len(source) < len(shape):
        source = (1,) * (len(shape) - len(source)) + source
    if len(source) != len(shape) or any(a not in (1, b) for a, b in zip(source, shape, strict=True)):
        raise KernelUsageError(f"broadcast_to: a tile of shape {x.shape} does not broadcast to {shape}")
    if x.shape == shape and dtype is None:
        return x
    out = ops.allocate(shape, dtypes.as_dtype(dtype) if dtype is not None else x.dtype, SBUF)
    if source != tuple(x.shape):
        x = x.reshape(source)
    if source[0] == 1 and shape[0] > 1:
        if source[1:] != shape[1:]:  # first along the free axes, on the one partition
            x = ops.tensor_copy(x, dst=ops.allocate((1, *shape[1:]), x.dtype, SBUF))
        _across_partitions(x, out)
        return out
    return ops.tensor_copy(x, dst=out)


def _across_partitions(row: Tile, out: Tile) -> None:
    """out[p, ...] = row[0, ...] for every partition, by ones-vector matmuls of [1, F] rows."""
    if row.ndim > 2:
        for i in builtins.range(out.shape[1]):
            _across_partitions(row[:, i], out[:, i])
        return
    ones_row = _ones_row(out.shape[0])
    row = row if row.dtype == float32 else ops.tensor_copy(row, dtype=float32)
    bank = tile_size.psum_fmax
    for start in builtins.range(0, out.shape[1], bank):
        stop = builtins.min(start + bank, out.shape[1])
        ops.tensor_copy(ops.nc_matmul(ones_row, row[:, start:stop]), dst=out[:, start:stop])


def _ones_row(partitions: int) -> Tile:
    """The ones vector a partition broadcast multiplies by: a constant, which the compiler materialises
    once for the kernel, not once per broadcast."""
    constants = current().constants
    key = ("ones_row", partitions)
    if key not in constants:
        constants[key] = ops.memset((1, partitions), 1.0, float32)
    return constants[key]


def loop_reduce(x: Tile, op: Any, loop_indices: Any, *, dtype: Any = None, mask: Mask | None = None,
                **_: Any) -> ops.LoopReduction:
    """`dst[...] = nl.loop_reduce(x, op, loop_indices)` is `dst = op(dst, x)` on the Vector engine; the
    loop indices only tell the compiler which loops the reduction runs across."""
    return ops.LoopReduction(x, op, dtype, mask)


def random_seed(seed: Tile, *, mask: Mask | None = None, **_: Any) -> None:
    """Seed the random numbers nl.dropout draws with a one-element tile."""
    ops.random_seed(seed, mask=mask)


def dropout(x: Tile, rate: Any, *, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """Replace each element with 0 with probability `rate` (a scalar or a [P, 1] tile)."""
    return ops.dropout(x, rate, dtype=dtype, mask=mask)


def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """By default the result takes the more precise of x's and y's types (nki.language.where)."""
    if dtype is None:
        kinds = [v.dtype if isinstance(v, Tile) else dtypes.scalar_dtype(v) for v in (x, y)]
        dtype = dtypes.promote(*kinds)
    return ops.select(condition, x, y, dtype=dtype, mask=mask)


def device_print(prefix: str, x: Any, **_: Any) -> None:
    if current().numeric and isinstance(x, Tile):
        print(prefix, x.read())


# --- element-wise ------------------------------------------------------------------------------
def _unary(name: str) -> Callable[..., Tile]:
    def fn(x: Tile, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
        return ops.activation(name, x, dtype=dtype, mask=mask)

    fn.__name__ = fn.__qualname__ = name
    fn._nki_op = name  # type: ignore[attr-defined]
    fn.__doc__ = f"Element-wise {name} on the Scalar engine."
    return fn


def _binary(name: str) -> Callable[..., Tile]:
    def fn(x: Any, y: Any, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
        return ops.binary(name, x, y, dtype=dtype, mask=mask)

    fn.__name__ = fn.__qualname__ = name
    fn._nki_op = name  # type: ignore[attr-defined]
    fn.__doc__ = f"Element-wise {name} on the Vector engine."
    return fn


exp, log, sqrt, rsqrt, tanh = (_unary(n) for n in ("exp", "log", "sqrt", "rsqrt", "tanh"))
sigmoid, silu, gelu, relu, square = (_unary(n) for n in ("sigmoid", "silu", "gelu", "relu", "square"))
sin, cos, arctan, erf, softplus = (_unary(n) for n in ("sin", "cos", "arctan", "erf", "softplus"))
mish, sign, gelu_apprx_tanh = _unary("mish"), _unary("sign"), _unary("gelu_apprx_tanh")
floor, ceil, trunc = _unary("floor"), _unary("ceil"), _unary("trunc")
gelu_apprx_sigmoid, tan = _unary("gelu_apprx_sigmoid"), _unary("tan")
silu_dx, gelu_dx, erf_dx = _unary("silu_dx"), _unary("gelu_dx"), _unary("erf_dx")


def expand_dims(data: Tile, axis: int) -> Tile:
    """`nl.expand_dims(t, 1)`: the tile with a dimension of 1 inserted at `axis`."""
    return data.expand_dims(axis)

add, subtract, multiply, divide = (_binary(n) for n in ("add", "subtract", "multiply", "divide"))
maximum, minimum, power = _binary("maximum"), _binary("minimum"), _binary("power")
mod, fmod = _binary("mod"), _binary("fmod")
equal, not_equal = _binary("equal"), _binary("not_equal")
greater, greater_equal = _binary("greater"), _binary("greater_equal")
less, less_equal = _binary("less"), _binary("less_equal")
logical_and, logical_or, logical_xor = (_binary(n) for n in ("logical_and", "logical_or", "logical_xor"))
bitwise_and, bitwise_or, bitwise_xor = (_binary(n) for n in ("bitwise_and", "bitwise_or", "bitwise_xor"))
left_shift, right_shift = _binary("left_shift"), _binary("right_shift")


def abs(x: Tile, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:  # noqa: A001
    return ops.activation("abs", x, dtype=dtype, mask=mask)


abs._nki_op = "abs"  # type: ignore[attr-defined]


def negative(x: Tile, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    return ops.tensor_scalar(x, "multiply", -1.0, dtype=dtype, mask=mask)


negative._nki_op = "negative"  # type: ignore[attr-defined]


def reciprocal(x: Tile, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    return ops.reciprocal(x, dtype=dtype, mask=mask)


reciprocal._nki_op = "reciprocal"  # type: ignore[attr-defined]


def logical_not(x: Tile, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    return ops.tensor_scalar(x, "equal", 0, dtype=dtype if dtype is not None else bool_, mask=mask)


def invert(x: Tile, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    return ops.tensor_scalar(x, "bitwise_xor", -1, dtype=dtype, mask=mask)


# --- reductions --------------------------------------------------------------------------------
def _reduction(name: str, op: str) -> Callable[..., Tile]:
    def fn(x: Tile, axis: Any, dtype: Any = None, mask: Mask | None = None, keepdims: bool = False,
           **_: Any) -> Tile:
        return ops.tensor_reduce(op, x, axis, dtype=dtype, mask=mask, keepdims=keepdims)

    fn.__name__ = fn.__qualname__ = name
    fn._nki_op = op  # type: ignore[attr-defined]
    fn.__doc__ = f"{name} over free axes on the Vector engine."
    return fn


sum = _reduction("sum", "add")  # noqa: A001
max = _reduction("max", "maximum")  # noqa: A001
min = _reduction("min", "minimum")  # noqa: A001
prod = _reduction("prod", "multiply")
_all = _reduction("all", "logical_and")


def all(x: Tile, axis: Any, dtype: Any = None, mask: Mask | None = None, **kwargs: Any) -> Tile:  # noqa: A001
    """Whether all elements along free axes are true; a bool tile unless dtype= says otherwise."""
    return _all(x, axis, dtype=dtype if dtype is not None else bool_, mask=mask, **kwargs)


all._nki_op = "logical_and"  # type: ignore[attr-defined]


def mean(x: Tile, axis: Any, dtype: Any = None, mask: Mask | None = None, keepdims: bool = False,
         **_: Any) -> Tile:
    """Mean over free axes on the Vector engine; integer inputs give float32 (as documented)."""
    if dtype is None and not dtypes.is_float(x.dtype):
        dtype = float32
    return ops.tensor_reduce("mean", x, axis, dtype=dtype, mask=mask, keepdims=keepdims)


mean._nki_op = "mean"  # type: ignore[attr-defined]


def var(x: Tile, axis: Any, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """Variance over free axes, as the instructions the compiler makes of it: the mean, the deviations
    and the mean of their squares (Vector engine)."""
    centered = ops.binary("subtract", x, ops.tensor_reduce("mean", x, axis, mask=mask, keepdims=True,
                                                           dtype=float32), mask=mask)
    return ops.tensor_reduce("mean", ops.binary("multiply", centered, centered, mask=mask), axis, mask=mask,
                             dtype=dtype if dtype is not None else x.dtype)


def rms_norm(x: Tile, w: Tile, axis: Any, n: int, epsilon: float = 1e-6, dtype: Any = None,
             compute_dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """x / sqrt(sum(x^2 over axis) / n + epsilon) * w, over the free axis of a [P, F] tile, as the
    instructions the compiler makes of it: squares summed on the Scalar engine, the mean plus epsilon,
    its rsqrt, then the per-row scale and the weight on the Vector engine."""
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if x.ndim != 2 or builtins.any(a % 2 != 1 for a in axes):
        raise UnsupportedApiError(f"nl.rms_norm over axis {axis} of a tile of shape {x.shape}: this simulator "
                                  "normalizes the free axis of a [P, F] tile")
    squares = ops.allocate((x.shape[0], 1), float32, SBUF)
    ops.activation("square", x, reduce_op="add", reduce_res=squares, mask=mask)
    mean_sq = ops.tensor_scalar(squares, "multiply", 1.0 / float(n), False, "add", float(epsilon))
    scale = ops.activation("rsqrt", mean_sq)
    normed = ops.tensor_scalar(x, "multiply", scale, mask=mask, dtype=compute_dtype)
    return ops.tensor_tensor(normed, w, "multiply", mask=mask, dtype=dtype if dtype is not None else x.dtype)


def softmax(x: Tile, axis: Any = -1, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """Numerically stable softmax over a free axis, as the compiler lowers it."""
    # the mask holds for every step: masked-off elements are neither maxed, exponentiated nor summed
    row_max = ops.tensor_reduce("maximum", x, axis, keepdims=True, negate=True, mask=mask)
    shifted = ops.activation("exp", x, bias=row_max, dtype=float32, mask=mask)
    total = ops.tensor_reduce("add", shifted, axis, keepdims=True, mask=mask)
    inverse = ops.reciprocal(total)
    return ops.tensor_scalar(shifted, "multiply", inverse, dtype=dtype if dtype is not None else x.dtype,
                             mask=mask)


__getattr__ = missing_api("nki.language", {"constants": "accelopt_core.nki.language_constants"})

