"""The NeuronCore instructions: each function here checks its operands, computes values (in numeric
mode) and records exactly one instruction in the trace.

Both API generations call these: the legacy `neuronxcc.nki` wrappers let them allocate their
result tile, the newer `nki` wrappers pass `dst=`. Engines compute in float32 and cast on output,
as the hardware does (docs/fact-sheet.md A.5, B.7).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from . import dtypes
from .errors import HardwareRuleError, KernelUsageError, UnsupportedApiError, kernel_location, pin_location, trace_line
from .indexing import IndexExpr, Mask, as_mask
from .instructions import DECLARED, ENGINE_MEMORIES, LANE_ENGINES, declaration_of
from .tensor import HBM, PSUM, SBUF, Limits, MaskedTile, Tile, allocate, close_accumulation, current, declare, running
from .trace import Alu, Called, Engine, Instruction, Op

# --------------------------------------------------------------------------------------------
# Operator tables
# --------------------------------------------------------------------------------------------


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to ~1e-7 (Abramowitz & Stegun 7.1.26 refined with one Newton step is unnecessary here)."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3))),
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
    # derivatives, for backward kernels (nki.language's *_dx)
    "silu_dx": lambda x: _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x))),
    "gelu_dx": lambda x: 0.5 * (1.0 + _erf(x / np.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi),
    "erf_dx": lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x),
    "tan": np.tan,
    "relu": lambda x: np.maximum(x, 0.0),
    "square": np.square,
    "abs": np.abs,
    "sign": np.sign,
    "sin": np.sin,
    "cos": np.cos,
    "arctan": np.arctan,
    "erf": _erf,
    "softplus": lambda x: np.logaddexp(0.0, x),
    "mish": lambda x: x * np.tanh(np.logaddexp(0.0, x)),
    "negative": np.negative,
    "copy": lambda x: x,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
}

ALU: dict[str, Callable[[Any, Any], Any]] = {  # looked up by the name a kernel's operator has
    Alu.ADD: np.add,
    Alu.SUBTRACT: np.subtract,
    Alu.MULTIPLY: np.multiply,
    Alu.DIVIDE: np.divide,
    Alu.MAXIMUM: np.maximum,
    Alu.MINIMUM: np.minimum,
    Alu.POWER: np.power,
    Alu.MOD: np.mod,
    Alu.FMOD: np.fmod,
    Alu.EQUAL: np.equal,
    Alu.NOT_EQUAL: np.not_equal,
    Alu.GREATER: np.greater,
    Alu.GREATER_EQUAL: np.greater_equal,
    Alu.LESS: np.less,
    Alu.LESS_EQUAL: np.less_equal,
    Alu.LOGICAL_AND: np.logical_and,
    Alu.LOGICAL_OR: np.logical_or,
    Alu.LOGICAL_XOR: np.logical_xor,
    Alu.BITWISE_AND: np.bitwise_and,
    Alu.BITWISE_OR: np.bitwise_or,
    Alu.BITWISE_XOR: np.bitwise_xor,
    Alu.LEFT_SHIFT: np.left_shift,
    # a logical shift of the 32-bit lane (the ALU table: arithmetic shift right is not supported)
    Alu.RIGHT_SHIFT: lambda a, b: np.right_shift(np.bitwise_and(a, 0xFFFFFFFF), b),
    Alu.ABS_MAX: lambda a, b: np.maximum(np.abs(a), np.abs(b)),
}
# Unary operators the ALU also takes (nisa.tensor_scalar's operator table; `op0=nl.rsqrt, operand0=0.0` runs
# rsqrt on GpSimd): they act on the data, their operand is ignored.
UNARY_ALU: dict[str, Callable[[Any], Any]] = {
    Alu.RSQRT: lambda x: 1.0 / np.sqrt(x),
    Alu.RECIPROCAL: np.reciprocal,
    Alu.ABS: np.abs,
}
for _name, _unary in UNARY_ALU.items():
    ALU[_name] = lambda a, b, f=_unary: f(a)
BITWISE = {Alu.BITWISE_AND, Alu.BITWISE_OR, Alu.BITWISE_XOR, Alu.LEFT_SHIFT, Alu.RIGHT_SHIFT}
_INT32 = (dtypes.int32, dtypes.uint32)
# The only (op0, op1) pairs tensor_scalar accepts on the Scalar engine (nisa.tensor_scalar docs).
SCALAR_ENGINE_TENSOR_SCALAR = {(Alu.MULTIPLY, Alu.ADD), (Alu.MULTIPLY,), (Alu.ADD,)}
LOGICAL = {Alu.EQUAL, Alu.NOT_EQUAL, Alu.GREATER, Alu.GREATER_EQUAL, Alu.LESS, Alu.LESS_EQUAL, Alu.LOGICAL_AND,
           Alu.LOGICAL_OR, Alu.LOGICAL_XOR}

REDUCTIONS: dict[str, Callable[..., np.ndarray]] = {
    Alu.ADD: np.sum,
    Alu.MAXIMUM: np.max,
    Alu.MINIMUM: np.min,
    Alu.MULTIPLY: np.prod,
    "mean": np.mean,  # nl.mean: a reduction, not an ALU operator
    Alu.LOGICAL_AND: np.all,
    Alu.LOGICAL_OR: np.any,
}

_UFUNC_NAMES = {"true_divide": "divide", "absolute": "abs", "max": "maximum", "min": "minimum",
                "sum": "add", "prod": "multiply", "amax": "maximum", "amin": "minimum"}


def op_name(op: Any) -> str:
    """The name of an operator as kernels pass it: `nl.add`, `np.add`, `nl.exp`, `'add'`."""
    if isinstance(op, str):
        return _UFUNC_NAMES.get(op, op)
    name = getattr(op, "_nki_op", None) or getattr(op, "__name__", None)
    if name is None:
        raise KernelUsageError(f"{op!r} is not an NKI operator")
    return _UFUNC_NAMES.get(name, name)


def _alu(op: Any, unary: bool = False) -> tuple[str, Callable[[Any, Any], Any]]:
    """The ALU operator `op` names; `unary`: the instruction also takes the unary ones (tensor_scalar)."""
    name = op_name(op)
    fn = ALU.get(name) if unary or name not in UNARY_ALU else None
    if fn is None:
        raise UnsupportedApiError(f"arithmetic operator {name!r} is not supported by this simulator")
    return name, fn


def _alu_operand(name: str, operand: Any, reverse: bool) -> tuple[Any, bool]:
    """A unary operator acts on the data alone: its operand may be None (0.0 stands in) and is never
    the left-hand side."""
    if name in UNARY_ALU:
        return (0.0 if operand is None else operand), False
    return operand, reverse


def _activation_fn(op: Any) -> tuple[str, Callable[[np.ndarray], np.ndarray]]:
    name = op_name(op)
    fn = ACTIVATIONS.get(name)
    if fn is None:
        raise UnsupportedApiError(f"activation function {name!r} is not supported by this simulator")
    return name, fn


# --------------------------------------------------------------------------------------------
# Recording: the kernel's calls, replayable (trace.py)
# --------------------------------------------------------------------------------------------

def _fold_operand_masks(op: str, takes_mask: bool, arguments: dict[str, Any]) -> dict[str, Any]:
    """The call with every `tile[...][mask]` operand as a plain tile and its predicate in the `mask=`
    argument (the compiler's reading of an operand mask); a matmul operand's predicate over [K, free]
    picks the output rows (stationary) or columns (moving) that run."""
    if not takes_mask:
        raise UnsupportedApiError(f"{op}: an operand indexed with a mask (tile[...][mask]) is not simulated for "
                                  "an instruction without mask=")
    masks = [as_mask(arguments.get("mask"))]
    for name, value in arguments.items():
        if isinstance(value, MaskedTile):
            arguments[name] = Tile(value.storage, value.sub)
            masks.append(_matmul_operand_mask(name, value) if op == "nc_matmul" else value.access_mask)
    arguments["mask"] = functools.reduce(lambda a, b: b if a is None else a & b, masks)
    return arguments


def _matmul_operand_mask(role: str, operand: MaskedTile) -> Mask:
    try:
        values = np.broadcast_to(operand.access_mask.values, operand.shape).reshape(operand.shape[0], -1)
    except ValueError:
        raise KernelUsageError(f"mask of shape {operand.access_mask.values.shape} does not fit the matmul {role} "
                               f"operand of shape {operand.shape}") from None
    if not (values == values[:1]).all():
        raise UnsupportedApiError(f"a matmul {role} operand mask that varies along the contraction (partition) "
                                  "axis is not simulated")
    return Mask(values[0][:, None] if role == "stationary" else values[0][None, :])


REPLAYABLE: dict[str, Callable[..., Any]] = {}  # every instruction a trace may ask for, by name
F = TypeVar("F", bound=Callable[..., Any])


def instruction(fn: F) -> F:
    """Mark a public instruction: when the simulation records (trace-only runs in the sandbox), each
    call the kernel's own code makes is appended to the trace's tape with its arguments by name, so the
    trusted side can replay exactly this call; the calls it makes in turn are part of it. In every mode
    the kernel's line is found once per call of the kernel's own, not once per tensor and instruction."""
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount]
    takes_mask = "mask" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    op = fn.__name__

    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        sim = running()
        # looked for only once a kernel has indexed a tile with a mask: most never do, and this is per call
        if sim is not None and sim.operand_masks and any(isinstance(a, MaskedTile)
                                                           for a in (*args, *kwargs.values())):
            args, kwargs = (), _fold_operand_masks(op, takes_mask, dict(zip(names, args, strict=False)) | kwargs)
        if sim is None or sim.depth:
            return fn(*args, **kwargs)
        location = kernel_location()
        call = None
        if sim.tape is not None:
            arguments = dict(zip(names, args, strict=False))
            arguments.update(kwargs)
            call = Called(op, arguments, trace_line(location), sim.nest, sim.ids_used, len(sim.trace.instructions))
            sim.tape.append(call)
        sim.depth += 1
        unpinned = pin_location(location)  # the tensors and instructions of this call are at the caller's line
        try:
            return fn(*args, **kwargs)
        except BaseException:
            if call is not None:
                call.raised = True
            raise
        finally:
            pin_location(unpinned)
            sim.depth -= 1
            if call is not None:
                call.finish(sim.ids_used, len(sim.trace.instructions))
                if sim.on_call is not None:
                    sim.on_call(sim.trace)

    REPLAYABLE[op] = recorded
    return recorded  # type: ignore[return-value]


def api_function(api: str, name: str) -> Callable[..., Any] | None:
    """`nisa.<name>` of `api` ("legacy" or "modern") for an instruction declared there whose API module has no
    adapter of its own: the semantics function of that name, whose parameters are the documented ones (`dst`
    first); the documented `name=` (an instruction label) is accepted and has no effect. The newer API's
    functions return None. None when no declaration names it for `api`."""
    fn = REPLAYABLE.get(name)
    if fn is None or declaration_of(api, name) is None:
        return None

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("name", None)
        result = fn(*args, **kwargs)
        return result if api == "legacy" else None

    return call


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _f32(x: Any) -> Any:
    """Engine input: float32 values of a tile or a scalar."""
    if isinstance(x, Tile):
        return x.read().astype(np.float32, copy=False)
    return np.float32(x)


def _on_chip(tile: Tile, what: str) -> None:
    if not isinstance(tile, Tile):
        hint = " (an index expression is no data: nisa.iota makes a tile of it)" if isinstance(tile, IndexExpr) else ""
        raise KernelUsageError(f"{what} computes on a tile, got {type(tile).__name__}{hint}")
    if tile.buffer == HBM:
        raise HardwareRuleError(f"{what} cannot compute on HBM tensor {tile.name}; load it into SBUF "
                                "first (nl.load / nisa.dma_copy)")


def _check_partitions(shape: tuple[int, ...], what: str) -> None:
    """A DMA's on-chip side spans at most the hardware's partitions (compute instructions: _check_work)."""
    pmax = current().limits.pmax
    if shape and shape[0] > pmax:
        raise HardwareRuleError(f"{what}: tile of shape {shape} has {shape[0]} partitions; the "
                                f"partition dimension is limited to {pmax}")


def _work(shape: tuple[int, ...], mask: Mask | None) -> tuple[int, int, int]:
    """Partitions, elements per partition and total elements an instruction processes."""
    partitions = shape[0] if shape else 1
    free = math.prod(shape[1:])
    mask = as_mask(mask)
    if mask is None:
        return partitions, free, partitions * free
    values = mask.values
    if values.ndim > len(shape) or np.broadcast_shapes(values.shape, shape) != tuple(shape):
        np.broadcast_to(values, shape)  # raises the mismatch
    # count on the mask's own elements: a dimension it broadcasts along multiplies its counts
    values = values.reshape((1,) * (len(shape) - values.ndim) + values.shape) if shape else values.reshape(())
    repeat = math.prod(n for n, m in zip(shape[1:], values.shape[1:], strict=True) if m == 1)
    per_partition = values.reshape(values.shape[0] if shape else 1, -1).sum(axis=1) * repeat
    if per_partition.shape[0] != partitions:  # the mask is the same on every partition
        per_partition = np.broadcast_to(per_partition, (partitions,))
    return int((per_partition > 0).sum()), int(per_partition.max(initial=0)), int(per_partition.sum())


def _mask_values(mask: Mask | None, shape: tuple[int, ...]) -> np.ndarray | None:
    mask = as_mask(mask)
    if mask is None:
        return None
    try:
        return np.broadcast_to(mask.values, shape)
    except ValueError:
        raise KernelUsageError(f"mask of shape {mask.values.shape} does not fit a tile of shape {shape}") from None


def _result(shape: tuple[int, ...], dtype: Any, buffer: str = SBUF) -> Tile:
    """An instruction's new result tile: its shape is already a tuple of ints and its buffer a kind, so
    it skips the parsing `allocate` does for a kernel's own declarations."""
    return declare(buffer, shape, 0, dtypes.as_dtype(dtype), result=True)


def _lane_wise(op: Op, engine: str) -> bool:
    """Whether `op` on `engine` meets element i of an operand with element i of its output in the same lane."""
    return engine in LANE_ENGINES and not DECLARED[op].across_partitions


def _writable(op: Op, engine: str) -> tuple[str, ...]:
    """The memories `op` may write on `engine`: an instruction is retargeted into a `dst` only there; elsewhere
    `dst[...] = value` is a separate copy (a matmul result into SBUF)."""
    return tuple(m for m in DECLARED[op].writes if m in ENGINE_MEMORIES[engine][1])


_SHOWN = {Engine.TENSOR: "Tensor", Engine.VECTOR: "Vector", Engine.SCALAR: "Scalar", Engine.GPSIMD: "GpSimd",
          Engine.DMA: "DMA"}  # the engines as messages name them


def _check_memories(op: Op, engine: str, tiles: tuple[Tile, ...], written: bool) -> None:
    """Refuse an operand in a memory `op` cannot read (or write, when `written`) on `engine` (its declaration
    and what the engine can reach at all): a compute instruction given an HBM `dst=` or reduce result would
    otherwise finish a kernel without the store DMAs it needs."""
    side = 1 if written else 0
    declared = DECLARED[op]
    allowed = declared.writes if written else declared.reads
    reachable = ENGINE_MEMORIES[engine][side]
    for t in tiles:
        if t.buffer in allowed and t.buffer in reachable:
            continue
        verb = "write" if written else "read"
        hint = "; use nl.store / nisa.dma_copy" if t.buffer == HBM and written else ""
        if t.buffer in allowed and t.buffer == PSUM:
            hint = "; use the Vector or Scalar engine for PSUM tiles"
        memories = [b for b in allowed if b in reachable]
        raise HardwareRuleError(f"{op} on the {_SHOWN[engine]} engine cannot {verb} {t.buffer.upper()} ({t.name}): it "
                                f"{verb}s {' or '.join(b.upper() for b in memories)} only{hint}")


def _check_operands(op: Op, **operands: Any) -> None:
    """The rules `op`'s declaration sets on its named operands (those given as tiles): their memories and dtypes,
    and at most one of `one_in_psum` in PSUM."""
    declared = DECLARED[op]
    for name, value in operands.items():
        rule = declared.operands.get(name)
        if rule is None or not isinstance(value, Tile):
            continue
        if value.buffer not in rule.memories:
            raise HardwareRuleError(f"{op} {name} operand {value.name} is in {value.buffer.upper()}; it may be in "
                                    f"{' or '.join(b.upper() for b in rule.memories)} only")
        if rule.dtypes and value.storage.dtype_name not in rule.dtypes:
            raise HardwareRuleError(f"{op} {name} operand {value.name} is {value.storage.dtype_name}; it must be "
                                    f"{' or '.join(rule.dtypes)}")
    in_psum = [name for name in declared.one_in_psum
               if isinstance(operands.get(name), Tile) and operands[name].buffer == PSUM]
    if len(in_psum) > 1:
        raise HardwareRuleError(f"{op}: at most one of {', '.join(declared.one_in_psum)} may be in PSUM; "
                                f"{' and '.join(in_psum)} are")


def _check_work(op: Op, engine: str, partitions: int, free: int, limits: Limits) -> None:
    """The declared NeuronCore versions and work size of `op` on `engine` (the DMA engines' sizes are the
    transfer's own, checked where it is made)."""
    declared = DECLARED[op]
    if engine not in declared.engines:
        raise HardwareRuleError(f"{op} cannot run on the {engine} engine (allowed: {', '.join(declared.engines)})")
    if limits.neuron_core_version not in declared.versions:
        raise HardwareRuleError(f"{op} runs on NeuronCore-v{min(declared.versions)} and later, not "
                                f"v{limits.neuron_core_version} ({limits.name})")
    if engine == Engine.DMA:
        return
    size = declared.size(engine)
    pmax = min(size.partitions or limits.pmax, limits.pmax)
    if partitions > pmax:
        raise HardwareRuleError(f"{op} on the {engine} engine: {partitions} partitions; the partition dimension "
                                f"is limited to {pmax}")
    if free < size.min_free or (size.max_free is not None and free > size.max_free):
        most = f"at most {size.max_free}" if not size.min_free else f"{size.min_free} to {size.max_free}"
        raise HardwareRuleError(f"{op} on the {engine} engine reads {most} elements per partition, got {free}")


def _add_write(inst: Instruction, tile: Tile) -> None:
    """A second output of one instruction (a reduce result, the indices of a match): in a memory it may write."""
    _check_memories(inst.op, inst.engine, (tile,), written=True)
    inst.writes = (*inst.writes, tile.access())


def _check_lanes(srcs: tuple[Tile, ...], dst: Tile, size: int) -> None:
    """An operand of the output's size on other partitions would need data to cross lanes, which only a
    transpose, a matmul or a DMA does (the ISA requires equal partition sizes)."""
    lanes = dst.shape[0] if dst.shape else 1
    for t in srcs:
        if t.size == size and t.buffer != HBM and (t.shape[0] if t.shape else 1) != lanes:
            raise HardwareRuleError(f"{t.name} of shape {t.shape} spans other partitions than the output "
                                    f"{dst.name} of shape {dst.shape}: the compute engines work lane by lane; "
                                    "move data across partitions with a transpose, a matmul or a DMA")


def _record(engine: str, op: Op, srcs: tuple[Tile, ...], dst: Tile, *, mask: Mask | None = None,
            flops: int = 0, attrs: dict[str, Any] | None = None, dtype: str | None = None,
            fresh: bool = False, work_shape: tuple[int, ...] | None = None,
            source_mask: Mask | None = None, sized_as: Op | None = None) -> Instruction:
    """Append one instruction reading `srcs` and writing `dst` to the trace. `source_mask` is the mask
    over the sources where their elements are not the work's (a DMA transpose); `sized_as`, the instruction
    whose size limits the work was made under (a matmul in transpose mode records a transpose of a
    matmul's sizes)."""
    sim = current()
    if mask is not None:
        mask = as_mask(mask)
    shape = work_shape or dst.shape
    _check_memories(op, engine, srcs, written=False)
    _check_memories(op, engine, (dst,), written=True)
    _check_work(sized_as or op, engine, shape[0] if shape else 1, math.prod(shape[1:]), sim.limits)
    # the mask selects elements of the work; it selects the output's too when they have its shape
    # (a reduction's or bn_stats' output is written whole)
    out_mask = mask if dst.shape == shape else None
    if _lane_wise(op, engine) and dst.buffer != HBM:
        _check_lanes(srcs, dst, math.prod(shape))
    for t in srcs:
        if t.sub.overhang is not None:
            _check_overhang(t, source_mask if source_mask is not None else mask)
    if dst.sub.overhang is not None:
        _check_overhang(dst, out_mask)
    if mask is None:
        partitions = shape[0] if shape else 1
        free = math.prod(shape[1:])
        count = partitions * free
        reads = tuple([t.access() for t in srcs])
    else:  # masked-off elements are neither read nor written
        partitions, free, count = _work(shape, mask)
        reads = tuple(t.access(count * t.storage.itemsize if t.shape == shape else None) for t in srcs)
    write_bytes = None if out_mask is None else count * dst.storage.itemsize
    writes = (dst.access(write_bytes),)
    inst = sim.emit(engine, op, reads, writes, partitions, free, flops or 0, attrs,
                    dtype or dst.storage.dtype_name)
    for t in srcs:
        storage = t.storage
        storage.consumed = True
        if storage.mm_open:
            close_accumulation(storage, t.sub.region)
    if dst.storage.mm_open:
        close_accumulation(dst.storage, dst.sub.region)
    if fresh:
        dst.storage.producer = inst
        if out_mask is not None:
            dst.storage.written = _mask_values(out_mask, dst.shape)
    return inst


def _check_overhang(tile: Tile, mask: Mask | None) -> None:
    """A tile indexed past the end of its tensor is legal only if the mask switches those elements off."""
    message = tile.sub.overhang
    assert message is not None
    if mask is None:
        raise HardwareRuleError(message)
    if (_mask_values(mask, tile.shape) & ~tile.sub.in_bounds()).any():
        raise HardwareRuleError(message.split(";")[0] + "; the mask does not switch off every element past "
                                "the end")


def _output(dst: Tile | None, shape: tuple[int, ...], dtype: Any, buffer: str = SBUF) -> tuple[Tile, bool]:
    """The tile an instruction writes: the caller's `dst`, or a fresh one (legacy API)."""
    if dst is None:
        return _result(shape, dtype, buffer), True
    if dst.size != math.prod(shape):
        raise KernelUsageError(f"destination of shape {dst.shape} does not match the result shape {shape}")
    return dst, False


def _store(dst: Tile, values: Any, mask: np.ndarray | None) -> None:
    if current().numeric:
        dst.write(values, mask)


def _engine(engine: Any, op: Op, default: str | None = None) -> str:
    """The engine a kernel picked for `op` (`engine=`), else `default`, else the declared first one."""
    name = getattr(engine, "_engine", engine)
    allowed = DECLARED[op].engines
    if name in (None, "unknown"):
        return default or allowed[0]
    if name not in allowed:
        raise HardwareRuleError(f"{op} cannot run on the {name} engine (allowed: {', '.join(allowed)})")
    return name


# --------------------------------------------------------------------------------------------
# Data movement
# --------------------------------------------------------------------------------------------


_DIRECTIONS = {(True, True): "hbm_to_hbm", (True, False): "hbm_to_sbuf", (False, True): "sbuf_to_hbm",
               (False, False): "sbuf_to_sbuf"}  # a DMA's direction, by (source in HBM, destination in HBM)


@instruction
def dma_copy(src: Tile, dst: Tile | None = None, mask: Mask | None = None, dtype: Any = None,
             axes: tuple[int, ...] | None = None, dst_rmw_op: Any = None) -> Tile:
    """One DMA transfer (nl.load, nl.store, nisa.dma_copy). A new SBUF tile when `dst` is None.
    `axes` permutes the source's dimensions on the way (a DMA transpose). A side indexed with a tile
    of indices (indirect, data-dependent addressing) reads that tile too. `dst_rmw_op=np.add` adds
    the data to what `dst` holds (a read-modify-write DMA)."""
    rmw = op_name(dst_rmw_op) if dst_rmw_op is not None else None
    if rmw not in (None, Alu.ADD):
        raise UnsupportedApiError(f"dma_copy dst_rmw_op {rmw!r}: only np.add adds into the destination")
    if rmw is not None and dst is None:
        raise KernelUsageError("dma_copy with dst_rmw_op needs the dst= it adds into")
    if not isinstance(src, Tile):
        raise KernelUsageError(f"DMA source must be a tensor, got {type(src).__name__}")
    shape = tuple(src.shape[a] for a in axes) if axes is not None else src.shape
    out, fresh = _output(dst, shape, dtype or src.dtype, SBUF)
    if out.buffer != HBM:
        _check_partitions(out.shape, "DMA into " + out.buffer.upper())
    if src.buffer == PSUM or out.buffer == PSUM:
        raise HardwareRuleError("DMA engines cannot access PSUM; copy the tile to SBUF first")
    direction = _DIRECTIONS[src.buffer == HBM, out.buffer == HBM]
    indices = src.sub.index_tiles() + out.sub.index_tiles()
    source_mask = None
    if axes is not None and as_mask(mask) is not None:
        source_mask = Mask(np.transpose(_mask_values(mask, out.shape), np.argsort(axes)))
    inst = _record(Engine.DMA, Op.DMA_COPY, (src, *indices, *((out,) if rmw else ())), out, mask=mask,
                   source_mask=source_mask,
                   fresh=fresh, attrs={"direction": direction, "transpose": axes is not None, "indirect": bool(indices),
                                       **({"rmw": rmw} if rmw else {})}, dtype=out.storage.dtype_name)
    if as_mask(mask) is None:
        on_chip = out if out.buffer != HBM else src
        inst.partitions = on_chip.shape[0] if on_chip.shape else 1  # t[0, 0]: one element, one partition
    if current().numeric:
        active = _mask_values(mask, out.shape)
        for side in (src, out):
            side.sub.check_dynamic_bounds(side.storage.name, active if side.shape == out.shape else None)
        values = src.read()
        values = np.transpose(values, axes) if axes is not None else values
        if rmw:
            values = out.read().astype(np.float32) + values.astype(np.float32)
        if fresh and active is None and not rmw and src.storage.borrowed and values.dtype == out.dtype:
            out.borrow(values)  # a load of an input the replay reads in place: a view of it, not a copy
        else:
            out.write(values.astype(np.float32).astype(out.dtype) if out.dtype != values.dtype else values, active)
    return out


@instruction
def dma_compute(dst: Tile, srcs: Any, reduce_op: Any, *, scales: Any = None) -> None:
    """DMA engines computing on the way: dst = the sum of `srcs`, in float32, cast once to dst's type
    (nki.isa.dma_compute; add is its one operator and 1.0 its one scale)."""
    sources = list(srcs) if isinstance(srcs, (list, tuple)) else [srcs]
    if op_name(reduce_op) != Alu.ADD:
        raise UnsupportedApiError(f"dma_compute reduce_op {op_name(reduce_op)!r}: the DMA engines add only")
    if scales is not None and any(float(scale) != 1.0 for scale in scales):
        raise KernelUsageError(f"dma_compute scales must all be 1.0, got {list(scales)}")
    if not sources or not all(isinstance(t, Tile) for t in sources):
        raise KernelUsageError("dma_compute needs a list of source tensors")
    for t in (*sources, dst):
        if t.size != dst.size:
            raise KernelUsageError(f"dma_compute: source {t.shape} and dst {dst.shape} must hold as many elements")
        if t.buffer == PSUM:
            raise HardwareRuleError("DMA engines cannot access PSUM; copy the tile to SBUF first")
    if dst.buffer != HBM:
        _check_partitions(dst.shape, "DMA into " + dst.buffer.upper())
    direction = _DIRECTIONS[any(t.buffer == HBM for t in sources), dst.buffer == HBM]
    _record(Engine.DMA, Op.DMA_COPY, tuple(sources), dst, attrs={"direction": direction, "transpose": False,
                                                                "indirect": False, "compute": Alu.ADD},
            dtype=dst.storage.dtype_name)
    if current().numeric:
        total = sum(_f32(t).reshape(dst.shape) for t in sources)
        dst.write(np.asarray(total, dtype=np.float32).astype(dst.dtype))


class LoopReduction:
    """`nl.loop_reduce(x, op, loop_indices)`: the reduction happens where it is assigned,
    `dst[...] = nl.loop_reduce(x, ...)` computing `dst = op(dst, x)` (the destination is op's left
    input, nki.language.loop_reduce)."""

    def __init__(self, tile: Tile, op: Any, dtype: Any, mask: Mask | None):
        if not isinstance(tile, Tile):
            raise KernelUsageError(f"nl.loop_reduce reduces a tile, got {type(tile).__name__}")
        self.tile, self.op, self.dtype, self.mask = tile, op, dtype, mask


@instruction
def assign(dst: Tile, value: Any) -> None:
    """`dst[...] = value`: retarget the instruction that just produced `value`, else copy."""
    if isinstance(value, LoopReduction):
        # The first contribution to a destination nothing has written initializes it: compiler output
        # reduces into an `nl.ndarray` it never filled (the loop's first iteration starts the
        # reduction), and reading the fill of never-written memory (NaN) would poison the result.
        first = current().numeric and dtypes.is_float(dst.dtype) and bool(np.isnan(dst.read()).all())
        tensor_tensor(dst, value.tile, value.op, dtype=value.dtype, mask=value.mask, dst=dst)
        attrs = current().trace.instructions[-1].attrs
        if attrs is not None:
            attrs["loop_reduce"] = True  # the compiler may fold it into its operand's producer (perfmodel)
        if first:
            _store(dst, _f32(value.tile).reshape(dst.shape), _mask_values(value.mask, dst.shape))
        return
    if not isinstance(value, Tile):
        if isinstance(value, (int, float, np.number)):
            memset(dst.shape, value, dst.dtype, dst=dst)
            return
        raise KernelUsageError(f"cannot assign a {type(value).__name__} to a tile")
    if dst.size != value.size:
        if value.ndim == dst.ndim and value.shape[0] == dst.shape[0] and value.size * dst.shape[-1] == dst.size:
            pass  # [P,1] broadcast along the free axis, handled by the copy below
        else:
            raise KernelUsageError(f"cannot assign a tile of shape {value.shape} to a region of shape "
                                   f"{dst.shape}")
    sim = current()
    storage = value.storage
    if (storage is dst.storage and not value.sub.advanced and not dst.sub.advanced
            and value.sub.region == dst.sub.region and value.shape == dst.shape):
        return  # `t[i] = t[i]`: the data is already there
    producer = storage.producer
    if (producer is not None and not storage.consumed and value.is_whole and value.size == dst.size
            and sim.trace.instructions and sim.trace.instructions[-1] is producer
            and dst.buffer in _writable(producer.op, producer.engine)):
        if _lane_wise(producer.op, producer.engine) and dst.buffer != HBM:
            _check_lanes((value,), dst, value.size)
        # the same elements, now in dst's type: DMA and the compute engines cast on the way out
        producer.writes = (dst.access(producer.writes[0].nbytes // storage.itemsize * dst.storage.itemsize),)
        if producer.engine != Engine.TENSOR and producer.dtype == storage.dtype_name:
            producer.dtype = dst.storage.dtype_name
        if dst.buffer == HBM or storage.buffer == HBM:
            src_kind = producer.reads[0].buffer if producer.reads else "sbuf"
            producer.attrs = {**(producer.attrs or {}),
                              "direction": f"{src_kind}_to_{'hbm' if dst.buffer == HBM else 'sbuf'}"}
        sim.trace.tensors.pop(storage.id, None)
        storage.producer = None
        storage.moved_to = dst
        if sim.numeric:
            written = storage.written  # a masked producer's elements, in value's shape ([P] for t[:, j])
            dst.write(value.read(), None if written is None else written.reshape(dst.shape))
        return
    if dst.buffer == HBM or value.buffer == HBM:
        dma_copy(value, dst=dst)
    else:
        tensor_copy(value, dst=dst)


@instruction
def accumulate(dst: Tile, other: Any, op: str) -> None:
    """`dst += other` (and -=, *=, /=): PSUM accumulation for matmul results, else an ALU op."""
    sim = current()
    if isinstance(other, Tile) and op == Alu.ADD and dst.buffer == PSUM:
        producer = other.storage.producer
        if (producer is not None and producer.engine == Engine.TENSOR and not other.storage.consumed
                and sim.trace.instructions and sim.trace.instructions[-1] is producer):
            if other.size != dst.size:
                raise KernelUsageError(f"cannot accumulate a result of shape {other.shape} into a PSUM "
                                       f"region of shape {dst.shape}")
            accumulator = dst.access()  # read and written: one description of the region serves both
            producer.writes = (accumulator,)
            producer.reads = (*producer.reads, accumulator)
            producer.attrs = {**(producer.attrs or {}), "accumulate": True}
            sim.trace.tensors.pop(other.storage.id, None)
            other.storage.producer = None
            if sim.numeric:  # a masked matmul adds only the elements it computed (`written`)
                kept = other.storage.written
                dst.accumulate(other.read().reshape(dst.shape), None if kept is None else kept.reshape(dst.shape))
            return
    if dst.buffer == HBM:
        raise HardwareRuleError(f"cannot compute on HBM tensor {dst.name} in place; load, compute, store")
    binary(op, dst, other, dst=dst)


# --------------------------------------------------------------------------------------------
# Vector / Scalar / GpSimd instructions
# --------------------------------------------------------------------------------------------


def _per_partition_operand(x: Any, partitions: int, what: str) -> Any:
    """A tensor_scalar / activation operand: a scalar, or a [P, 1] tile broadcast along the free axis."""
    if isinstance(x, Tile):
        _on_chip(x, what)
        if x.shape[0] != partitions or x.size != partitions:
            raise KernelUsageError(f"{what}: a tile operand must have shape [{partitions}, 1], got {x.shape}")
        return x
    if isinstance(x, (int, float, np.number, bool)):
        return x
    raise KernelUsageError(f"{what}: operand must be a scalar or a [P, 1] tile, got {type(x).__name__}")


def _operand_values(x: Any, ndim: int, bits: bool = False) -> Any:
    if isinstance(x, Tile):
        values = x.read().astype(np.int64) if bits else _f32(x)
        return values.reshape((x.shape[0],) + (1,) * (ndim - 1))
    return np.int64(x) if bits else np.float32(x)


@instruction
def binary(op: Any, a: Any, b: Any, *, dtype: Any = None, mask: Mask | None = None, engine: Any = None,
           dst: Tile | None = None) -> Tile:
    """nl.add and friends: tensor_tensor for two tiles, tensor_scalar when one side is a scalar or
    a [P, 1] column."""
    if not isinstance(a, Tile) and not isinstance(b, Tile):
        raise KernelUsageError("an element-wise operation needs at least one tile operand")
    if dtype is None:
        dtype = _binary_dtype(op_name(op), a, b)
    if isinstance(a, Tile) and isinstance(b, Tile):
        if a.shape == b.shape or a.size == b.size:
            return tensor_tensor(a, b, op, dtype=dtype, mask=mask, engine=engine, dst=dst)
        if b.size == b.shape[0] and b.shape[0] == a.shape[0]:
            return tensor_scalar(a, op, b, dtype=dtype, mask=mask, engine=engine, dst=dst)
        if a.size == a.shape[0] and a.shape[0] == b.shape[0]:
            return tensor_scalar(b, op, a, reverse0=True, dtype=dtype, mask=mask, engine=engine, dst=dst)
        return tensor_tensor(a, b, op, dtype=dtype, mask=mask, engine=engine, dst=dst)
    if isinstance(a, Tile):
        return tensor_scalar(a, op, b, dtype=dtype, mask=mask, engine=engine, dst=dst)
    return tensor_scalar(b, op, a, reverse0=True, dtype=dtype, mask=mask, engine=engine, dst=dst)


def _binary_dtype(name: str, a: Any, b: Any) -> np.dtype:
    """Output type of an nl.* element-wise op: comparisons and logical ops give bool (their
    signatures default to dtype=bool); arithmetic promotes both operands, a Python scalar counting
    as int32 / float32 / uint8 (weakly typed scalars, docs/fact-sheet.md B.2)."""
    if name in LOGICAL:
        return dtypes.bool_
    ta = a.dtype if isinstance(a, Tile) else dtypes.scalar_dtype(a)
    tb = b.dtype if isinstance(b, Tile) else dtypes.scalar_dtype(b)
    return dtypes.promote(ta, tb)


# Element-wise ops the docs list for GpSimd's tensor_tensor (docs/fact-sheet.md B.6, B.7).
_GPSIMD_TENSOR_TENSOR = frozenset({Alu.POWER, Alu.ADD, Alu.MULTIPLY})
MAX_ACCESS_DIMS = 4  # free dimensions of one SBUF/PSUM access pattern (fact sheet A.4)
BN_STATS_FMAX = DECLARED[Op.BN_STATS].size(Engine.VECTOR).max_free  # nl.tile_size.bn_stats_fmax
# the reduction identities: masked-off elements take these values
_IDENTITY = {Alu.ADD: 0.0, "mean": 0.0, Alu.MAXIMUM: -np.inf, Alu.MINIMUM: np.inf, Alu.MULTIPLY: 1.0}


@instruction
def tensor_tensor(data1: Tile, data2: Tile, op: Any, *, dtype: Any = None, mask: Mask | None = None,
                  engine: Any = None, dst: Tile | None = None) -> Tile:
    name, fn = _alu(op)
    for t in (data1, data2):
        _on_chip(t, "tensor_tensor")
    if data1.size == data2.size:
        shape = data1.shape if data1.ndim >= data2.ndim else data2.shape
    else:
        try:
            shape = tuple(np.broadcast_shapes(data1.shape, data2.shape))
        except ValueError:
            raise KernelUsageError(f"tensor_tensor operands of shapes {data1.shape} and {data2.shape} "
                                   "do not match") from None
    _check_operands(Op.TENSOR_TENSOR, data1=data1, data2=data2)
    # 32-bit integer add/subtract/multiply run natively on GpSimd; the Vector engine would go
    # through float32 and lose integers above 2**24 (docs/fact-sheet.md B.6, B.7)
    int_math = name in (Alu.ADD, Alu.SUBTRACT, Alu.MULTIPLY) and data1.dtype in _INT32 and data2.dtype in _INT32
    on_psum = PSUM in (data1.buffer, data2.buffer)
    default = Engine.GPSIMD if name == Alu.POWER or (int_math and not on_psum) else Engine.VECTOR
    eng = _engine(engine, Op.TENSOR_TENSOR, default)
    if eng == Engine.GPSIMD and not (name in _GPSIMD_TENSOR_TENSOR or int_math):
        raise HardwareRuleError(f"tensor_tensor {name!r} cannot run on GpSimd; it runs power, add and multiply "
                                "(and 32-bit integer add/subtract/multiply) there, everything else on Vector")
    out_dtype = dtypes.as_dtype(dtype) if dtype is not None else dtypes.promote(data1.dtype, data2.dtype)
    out, fresh = _output(dst, shape, out_dtype)
    _record(eng, Op.TENSOR_TENSOR, (data1, data2), out, mask=mask, fresh=fresh, attrs={"op": name},
            work_shape=shape)
    if current().numeric:
        if name in BITWISE or (int_math and eng == Engine.GPSIMD):
            values = fn(data1.read().astype(np.int64), data2.read().astype(np.int64))
        else:
            left, right = _f32(data1), _f32(data2)
            if left.shape != right.shape and left.size == right.size:
                right = right.reshape(left.shape)
            values = fn(left, right)
        _store(out, np.asarray(values).reshape(out.shape) if np.size(values) == out.size else values,
               _mask_values(mask, out.shape))
    return out


# Engines neuronx-cc may place an op on that the kernel left to it. Scalar first: with both free the
# compiler gives the copy or affine op to the ACT engine (calibration matmul on trn1: its 16k PSUM-to-SBUF
# copies ran on Scalar, 6.8 % active, Vector 0.0004 %; docs/calibration.md, cases.json).
_COMPILER_PLACED = (Engine.SCALAR, Engine.VECTOR)


@instruction
def tensor_scalar(data: Tile, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, *, dtype: Any = None,
                  mask: Mask | None = None, engine: Any = None, dst: Tile | None = None) -> Tile:
    _on_chip(data, "tensor_scalar")
    partitions = data.shape[0]
    name0, fn0 = _alu(op0, unary=True)
    operand0, reverse0 = _alu_operand(name0, operand0, reverse0)
    operand0 = _per_partition_operand(operand0, partitions, "tensor_scalar operand0")
    ops = [name0]
    srcs: list[Tile] = [data] + [x for x in (operand0,) if isinstance(x, Tile)]
    fn1 = None
    if op1 is not None:
        name1, fn1 = _alu(op1, unary=True)
        operand1, reverse1 = _alu_operand(name1, operand1, reverse1)
        operand1 = _per_partition_operand(operand1, partitions, "tensor_scalar operand1")
        ops.append(name1)
        srcs += [x for x in (operand1,) if isinstance(x, Tile)]
    eng = _engine(engine, Op.TENSOR_SCALAR)
    # the Scalar engine takes the affine forms on every generation (nki.isa.tensor_scalar of SDK 2.21, for
    # Inf2/Trn1/Trn2: "Vector or Scalar Engine"; the compiler itself places them there on trn1)
    if eng == Engine.SCALAR and tuple(ops) not in SCALAR_ENGINE_TENSOR_SCALAR:
        raise HardwareRuleError(f"tensor_scalar with ops {' then '.join(ops)} cannot run on the Scalar engine; "
                                "it supports only multiply then add, multiply, or add")
    if name0 in BITWISE and eng != Engine.VECTOR:
        raise HardwareRuleError(f"tensor_scalar with bitvec operator {name0} runs on the Vector engine only")
    out_dtype = dtypes.as_dtype(dtype) if dtype is not None else data.dtype
    out, fresh = _output(dst, data.shape, out_dtype)
    attrs: dict[str, Any] = {"op": ops[0], "ops": tuple(ops), "op_count": len(ops)}
    if getattr(engine, "_engine", engine) in (None, "unknown") and tuple(ops) in SCALAR_ENGINE_TENSOR_SCALAR:
        # left to the compiler: an affine op is also an ACT activation (identity, scale, bias), so
        # neuronx-cc places it on whichever of Vector and Scalar is free (the scheduler decides)
        attrs["engines"] = _COMPILER_PLACED
    _record(eng, Op.TENSOR_SCALAR, tuple(srcs), out, mask=mask, fresh=fresh, attrs=attrs, work_shape=data.shape)
    if current().numeric:
        # bitvec operators work on the integer bit patterns; arithmetic ones in float32
        bits = name0 in BITWISE
        x = data.read().astype(np.int64) if bits else _f32(data)
        b0 = _operand_values(operand0, x.ndim, bits)
        x = fn0(b0, x) if reverse0 else fn0(x, b0)
        if fn1 is not None:
            b1 = _operand_values(operand1, x.ndim, bits)
            x = fn1(b1, x) if reverse1 else fn1(x, b1)
        _store(out, x, _mask_values(mask, out.shape))
    return out


REDUCE_COMMANDS = ("idle", "reset", "reduce", "reset_reduce", "load_reduce")  # nisa.reduce_cmd
_REDUCE_COMMANDS = REDUCE_COMMANDS[:4]  # what every instruction with reduce registers takes
_LANES = 128  # reduce registers per engine: one per partition


def _reduce_command(command: Any, what: str) -> str | None:
    """`nisa.reduce_cmd.X` (or its name) as "X"; None when not given."""
    if command is None:
        return None
    name = str(getattr(command, "name", None) or getattr(command, "value", None) or command).rsplit(".", 1)[-1]
    if name not in _REDUCE_COMMANDS:
        raise UnsupportedApiError(f"{what}: reduce_cmd {name!r} is not supported by this simulator "
                                  f"(supported: {', '.join(_REDUCE_COMMANDS)})")
    return name


def _registers(engine: str, command: str, partial: np.ndarray | None, combine: Callable[..., np.ndarray]
               ) -> np.ndarray:
    """The engine's reduce registers after `command` (reset: zero; reset_reduce: this instruction's
    per-partition reduction; reduce: combined with what they hold; idle: unchanged)."""
    registers = current().reduce_registers
    held = registers.get(engine)
    if held is None:
        held = registers[engine] = np.zeros(_LANES, dtype=np.float32)
    if command == "reset":
        held[:] = 0.0
    elif command == "reset_reduce" and partial is not None:
        held[:] = 0.0
        held[:partial.size] = partial
    elif command == "reduce" and partial is not None:
        held[:partial.size] = combine(np.stack([held[:partial.size], partial]), axis=0)
    return held


def _row_reduction(values: np.ndarray, name: str, reducer: Callable[..., np.ndarray],
                   active: np.ndarray | None) -> np.ndarray:
    """The reduction of each partition's active elements."""
    rows = values.reshape(values.shape[0], -1)
    if active is not None:
        rows = np.where(active.reshape(rows.shape), rows, _IDENTITY.get(name, 0.0))
    return reducer(rows, axis=1).astype(np.float32)


@instruction
def activation(op: Any, data: Tile, bias: Tile | None = None, scale: Any = 1.0, *,
               reduce_op: Any = None, reduce_res: Tile | None = None, reduce_cmd: Any = None, dtype: Any = None,
               mask: Mask | None = None, dst: Tile | None = None) -> Tile:
    """Scalar engine: out = op(data * scale + bias), optionally reducing along the free axis: into
    reduce_res alone, or through the engine's reduce registers as `reduce_cmd` says (chained over
    several instructions, read out by the one that passes reduce_res)."""
    name, fn = _activation_fn(op)
    _on_chip(data, "activation")
    partitions = data.shape[0]
    srcs: list[Tile] = [data]
    if bias is not None:
        bias = _per_partition_operand(bias, partitions, "activation bias")
        if isinstance(bias, Tile):
            srcs.append(bias)
    scale = _per_partition_operand(scale, partitions, "activation scale")
    if isinstance(scale, Tile):
        srcs.append(scale)
    out_dtype = dtypes.as_dtype(dtype) if dtype is not None else data.dtype
    out, fresh = _output(dst, data.shape, out_dtype)
    reduce_name = op_name(reduce_op) if reduce_op is not None else None
    if reduce_res is not None and reduce_name is None:
        reduce_name = Alu.ADD
    command = _reduce_command(reduce_cmd, "activation")
    reduces = reduce_res is not None or command in ("reduce", "reset_reduce")
    if reduce_res is not None:
        _column(reduce_res, partitions, "activation")
    inst = _record(Engine.SCALAR, Op.ACTIVATION, tuple(srcs), out, mask=mask, fresh=fresh,
                   attrs={"func": name, "reduce": reduces}, work_shape=data.shape)
    if reduce_res is not None:
        _add_write(inst, reduce_res)
    if current().numeric:
        x = _f32(data)
        x = x * _operand_values(scale, x.ndim)
        if bias is not None:
            x = x + _operand_values(bias, x.ndim)
        with np.errstate(all="ignore"):
            y = fn(x)
        active = _mask_values(mask, out.shape)
        _store(out, y, active)
        if reduces or command is not None:
            reducer = REDUCTIONS.get(reduce_name or Alu.ADD)
            if reducer is None:
                raise UnsupportedApiError(f"activation reduce_op {reduce_name!r}")
            partial = _row_reduction(y, reduce_name or Alu.ADD, reducer, active) if reduces else None
            # without a reduce_cmd, reduce_res is this instruction's own reduction (activation_reduce)
            held = _registers(Engine.SCALAR, command or "reset_reduce", partial, reducer)
            if reduce_res is not None:
                reduce_res.write(held[:partitions].reshape(reduce_res.shape))
    return out


def _reducer(op: Any, what: str, table: dict[str, Callable[..., np.ndarray]] = REDUCTIONS
             ) -> tuple[str, Callable[..., np.ndarray]]:
    """The name and NumPy reduction of a reduce operator `what` accepts from `table`."""
    name = op_name(op)
    reducer = table.get(name)
    if reducer is None:
        raise UnsupportedApiError(f"{what}: reduction operator {name!r} is not supported by this simulator "
                                  f"(supported: {', '.join(table)})")
    return name, reducer


@instruction
def tensor_reduce(op: Any, data: Tile, axis: Any, *, negate: bool = False, keepdims: bool = False,
                  dtype: Any = None, mask: Mask | None = None, dst: Tile | None = None) -> Tile:
    name, reducer = _reducer(op, "tensor_reduce")
    _on_chip(data, "tensor_reduce")
    axes = tuple(sorted(a % data.ndim for a in ((axis,) if isinstance(axis, (int, np.integer)) else tuple(axis))))
    if 0 in axes:
        raise HardwareRuleError("tensor_reduce reduces free axes only; reducing the partition axis needs "
                                "a transpose or a matmul with a ones vector")
    # The instruction reduces up to four innermost consecutive free axes (fact sheet B.6), but a
    # tile's free axes are an access pattern of up to four dimensions with arbitrary strides (A.4):
    # the compiler lists the reduced ones innermost, so any set of free axes of a tile with at most
    # four free dimensions is reduced by one instruction (the AveragePool2D tutorial reduces [2, 4]).
    free_dims = data.ndim - 1
    if free_dims > MAX_ACCESS_DIMS:
        raise HardwareRuleError(f"tensor_reduce of a tile of shape {data.shape}: an access pattern has at most "
                                f"{MAX_ACCESS_DIMS} free dimensions, this tile has {free_dims}")
    reordered = any(b - a != 1 for a, b in itertools.pairwise(axes)) or axes[-1] != data.ndim - 1
    shape = tuple(1 if i in axes else n for i, n in enumerate(data.shape)) if keepdims else tuple(
        n for i, n in enumerate(data.shape) if i not in axes)
    out_dtype = dtypes.as_dtype(dtype) if dtype is not None else data.dtype
    out, fresh = _output(dst, shape, out_dtype)
    _record(Engine.VECTOR, Op.TENSOR_REDUCE, (data,), out, mask=mask, fresh=fresh,
            attrs={"op": name, "reordered": reordered}, work_shape=data.shape)
    if current().numeric:
        x = _f32(data)
        if mask is not None:
            x = np.where(_mask_values(mask, data.shape), x, _IDENTITY.get(name, 0.0))
        y = reducer(x, axis=axes, keepdims=keepdims)
        _store(out, -y if negate else y, None)
    return out


@instruction
def tensor_copy(src: Tile, *, dtype: Any = None, engine: Any = None, mask: Mask | None = None,
                dst: Tile | None = None) -> Tile:
    _on_chip(src, "tensor_copy")
    eng = _engine(engine, Op.TENSOR_COPY)
    out_dtype = dtypes.as_dtype(dtype) if dtype is not None else src.dtype
    column = dst is not None and src.size == src.shape[0] == dst.shape[0] and dst.size > src.size
    spread = dst is not None and not column and src.shape != dst.shape and _spreads(src.shape, dst.shape)
    out, fresh = (dst, False) if column or spread else _output(dst, src.shape, out_dtype)
    # left to the compiler, a copy is also an ACT activation (identity): it goes where it finishes first
    attrs = {"engines": _COMPILER_PLACED} if getattr(engine, "_engine", engine) in (None, "unknown") else None
    _record(eng, Op.TENSOR_COPY, (src,), out, mask=mask, fresh=fresh, work_shape=out.shape, attrs=attrs)
    if current().numeric:
        values = src.read()
        if spread:  # free dimensions of 1 read again (a stride-0 access pattern)
            values = np.broadcast_to(values, out.shape)
        elif values.size != out.size:  # [P, 1] broadcast along the free axis
            values = np.broadcast_to(values.reshape(values.shape[0], 1), (out.shape[0], out.size // out.shape[0]))
        # the Vector and GpSimd engines copy bits when the types match (nki.isa.tensor_copy); otherwise
        # the value passes through FP32 (an int32 above 2**24 loses its low bits)
        exact = out.dtype == src.dtype and eng != Engine.SCALAR
        _store(out, (values if exact else values.astype(np.float32)).reshape(out.shape), _mask_values(mask, out.shape))
    return out


def _spreads(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether `src` reaches `dst` by repeating free dimensions of 1 (same partitions, same rank)."""
    return (len(src) == len(dst) and src[0] == dst[0]
            and all(a == b or a == 1 for a, b in zip(src[1:], dst[1:], strict=True)))




def _column(tile: Tile, partitions: int, what: str) -> None:
    """A per-partition result (`reduce_res`): on chip, one element on each of `partitions` partitions."""
    _on_chip(tile, what)
    if tile.shape[0] != partitions or tile.size != partitions:
        raise KernelUsageError(f"{what}: reduce_res must hold one element per partition, shape [{partitions}, 1]; "
                               f"got {tile.shape}")


@instruction
def tensor_scalar_reduce(data: Tile, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Tile | None, *,
                         reverse0: bool = False, reduce_cmd: Any = None, negate: bool = False, dtype: Any = None,
                         mask: Mask | None = None, dst: Tile | None = None) -> Tile:
    """Vector engine: `data op0 operand0`, and its reduction over every free axis into reduce_res, or
    through the engine's reduce registers as `reduce_cmd` says (reduce_res None keeps it there);
    `negate`: reduce_res receives the reduction negated."""
    _on_chip(data, "tensor_scalar_reduce")
    name0, fn0 = _alu(op0, unary=True)
    if name0 in BITWISE:
        raise HardwareRuleError(f"tensor_scalar_reduce takes an arithmetic operator, not the bitvec {name0}")
    operand0, reverse0 = _alu_operand(name0, operand0, reverse0)
    reduce_name, reducer = _reducer(reduce_op, "tensor_scalar_reduce")
    partitions = data.shape[0]
    operand0 = _per_partition_operand(operand0, partitions, "tensor_scalar_reduce operand0")
    command = _reduce_command(reduce_cmd, "tensor_scalar_reduce")
    if reduce_res is None and command is None:
        raise KernelUsageError("tensor_scalar_reduce needs reduce_res, or a reduce_cmd that keeps the result "
                               "in the Vector engine's registers")
    if reduce_res is not None:
        _column(reduce_res, partitions, "tensor_scalar_reduce")
    out, fresh = _output(dst, data.shape, dtypes.as_dtype(dtype) if dtype is not None else data.dtype)
    srcs = (data,) + ((operand0,) if isinstance(operand0, Tile) else ())
    inst = _record(Engine.VECTOR, Op.TENSOR_SCALAR_REDUCE, srcs, out, mask=mask, fresh=fresh,
                   attrs={"op": name0, "reduce_op": reduce_name, "reduce": True}, work_shape=data.shape)
    if reduce_res is not None:
        _add_write(inst, reduce_res)
    if current().numeric:
        x = _f32(data)
        b0 = _operand_values(operand0, x.ndim)
        y = fn0(b0, x) if reverse0 else fn0(x, b0)
        active = _mask_values(mask, out.shape)
        _store(out, y, active)
        sign = -1.0 if negate else 1.0
        if command is None:
            assert reduce_res is not None
            _reduce_rows(reduce_res, y, reduce_name, reducer, active, sign)
        else:
            partial = _row_reduction(y, reduce_name, reducer, active) if command != "idle" else None
            held = _registers(Engine.VECTOR, command, partial, reducer)
            if reduce_res is not None:
                reduce_res.write(sign * held[:partitions].reshape(reduce_res.shape))
    return out


def _reduce_rows(res: Tile, values: np.ndarray, name: str, reducer: Callable[..., np.ndarray],
                 active: np.ndarray | None, sign: float = 1.0) -> None:
    """res[p] = reduction of the active elements of partition p, times `sign` (partitions with none
    keep res)."""
    reduced = sign * _row_reduction(values, name, reducer, active).reshape(res.shape)
    if active is None:
        res.write(reduced)
        return
    res.write(reduced, active.reshape(values.shape[0], -1).any(axis=1).reshape(res.shape))


@instruction
def bn_stats(data: Tile, *, dtype: Any = None, mask: Mask | None = None, dst: Tile | None = None) -> Tile:
    """Vector engine: per partition, the count, mean and count x variance of the even-indexed and then of
    the odd-indexed elements (six values), for at most 512 elements (fact sheet B.6)."""
    _on_chip(data, "bn_stats")
    partitions, free = data.shape[0], math.prod(data.shape[1:])
    if free > BN_STATS_FMAX:
        raise HardwareRuleError(f"bn_stats reads at most {BN_STATS_FMAX} elements per partition "
                                f"(nl.tile_size.bn_stats_fmax); this tile has {free}")
    out, fresh = _output(dst, (partitions, 6), dtypes.as_dtype(dtype) if dtype is not None else data.dtype)
    _record(Engine.VECTOR, Op.BN_STATS, (data,), out, mask=mask, fresh=fresh, work_shape=data.shape)
    if current().numeric:
        x = _f32(data).reshape(partitions, free)
        active = _mask_values(mask, data.shape)
        keep = np.ones_like(x, dtype=bool) if active is None else active.reshape(partitions, free)
        stats = []
        for parity in (0, 1):
            chosen = keep & (np.arange(free) % 2 == parity)
            count = chosen.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = np.where(count > 0, np.where(chosen, x, 0.0).sum(axis=1) / np.maximum(count, 1), 0.0)
            spread = np.where(chosen, x - mean[:, None], 0.0)
            stats += [count, mean, (spread * spread).sum(axis=1)]
        _store(out, np.stack(stats, axis=1).reshape(out.shape), None)
    return out


@instruction
def bn_aggr(data: Tile, *, dtype: Any = None, mask: Mask | None = None, dst: Tile | None = None) -> Tile:
    """Vector engine: combine (count, mean, count x variance) triples, as bn_stats writes them, into the
    mean and the variance of every partition."""
    _on_chip(data, "bn_aggr")
    partitions, free = data.shape[0], math.prod(data.shape[1:])
    if free % 3:
        raise KernelUsageError(f"bn_aggr reads (count, mean, variance x count) triples; {free} elements per "
                               "partition are not a multiple of 3")
    out, fresh = _output(dst, (partitions, 2), dtypes.as_dtype(dtype) if dtype is not None else data.dtype)
    _record(Engine.VECTOR, Op.BN_AGGR, (data,), out, mask=mask, fresh=fresh, work_shape=data.shape)
    if current().numeric:
        triples = _f32(data).reshape(partitions, free // 3, 3).astype(np.float64)
        count, means, scaled = triples[..., 0], triples[..., 1], triples[..., 2]
        total = count.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (count * means).sum(axis=1) / total
            variance = (scaled.sum(axis=1) + (count * (means - mean[:, None]) ** 2).sum(axis=1)) / total
        _store(out, np.stack([mean, variance], axis=1).reshape(out.shape), _mask_values(mask, out.shape))
    return out


# Reductions GpSimd runs across partitions (nisa.tensor_partition_reduce docs).
_PARTITION_REDUCTIONS: dict[str, Callable[..., np.ndarray]] = {
    Alu.ADD: np.sum, Alu.MAXIMUM: np.max, Alu.BITWISE_OR: np.bitwise_or.reduce, Alu.BITWISE_AND: np.bitwise_and.reduce}


@instruction
def tensor_partition_reduce(op: Any, data: Tile, *, dtype: Any = None, mask: Mask | None = None,
                            dst: Tile | None = None) -> Tile:
    """GpSimd: reduce across the partitions of `data`, one partition of result."""
    name, reducer = _reducer(op, "tensor_partition_reduce", _PARTITION_REDUCTIONS)
    _on_chip(data, "tensor_partition_reduce")
    out, fresh = _output(dst, (1, *data.shape[1:]), dtypes.as_dtype(dtype) if dtype is not None else data.dtype)
    _record(Engine.GPSIMD, Op.TENSOR_PARTITION_REDUCE, (data,), out, mask=mask, fresh=fresh, work_shape=data.shape,
            attrs={"op": name})
    if current().numeric:
        values = data.read().astype(np.int64) if name in BITWISE else _f32(data)
        _store(out, reducer(values, axis=0).reshape(out.shape), None)
    return out


@instruction
def random_seed(seed: Tile, *, mask: Mask | None = None) -> None:
    """Vector engine: seed the random numbers `dropout` draws with the value of a one-element tile."""
    _on_chip(seed, "random_seed")
    sim = current()
    sim.emit(Engine.VECTOR, Op.RANDOM_SEED, (seed.access(),), (), 1, 1, attrs={"op": "random_seed"})
    mask = as_mask(mask)
    if sim.numeric and (mask is None or np.any(mask.values)):
        sim.random = np.random.default_rng(int(np.asarray(_f32(seed)).reshape(-1)[0]))


@instruction
def dropout(data: Tile, prob: Any, *, dtype: Any = None, mask: Mask | None = None, dst: Tile | None = None) -> Tile:
    """Vector engine: replace each element with 0 with probability `prob` (a scalar or a [P, 1] tile).
    The draws come from the simulator's generator (seeded by random_seed), not the device's."""
    _on_chip(data, "dropout")
    prob = _per_partition_operand(prob, data.shape[0], "dropout probability")
    out, fresh = _output(dst, data.shape, dtypes.as_dtype(dtype) if dtype is not None else data.dtype)
    srcs = (data,) + ((prob,) if isinstance(prob, Tile) else ())
    _record(Engine.VECTOR, Op.DROPOUT, srcs, out, mask=mask, fresh=fresh, work_shape=data.shape)
    sim = current()
    if sim.numeric:
        x = _f32(data)
        kept = sim.random.random(x.shape) >= _operand_values(prob, x.ndim)
        _store(out, np.where(kept, x, 0.0), _mask_values(mask, out.shape))
    return out


@instruction
def memset(shape: tuple[int, ...], value: Any, dtype: Any, *, engine: Any = None, mask: Mask | None = None,
           buffer: str = SBUF, dst: Tile | None = None) -> Tile:
    eng = _engine(engine, Op.MEMSET)
    out_dtype = dtype if dtype is not None else dtypes.float32
    if dst is None:  # the kernel's own shape and buffer (nisa.memset), parsed as a declaration's
        out, fresh = allocate(shape, out_dtype, buffer), True
    else:
        out, fresh = _output(dst, tuple(shape), out_dtype)
    _record(eng, Op.MEMSET, (), out, mask=mask, fresh=fresh, attrs={"value": float(value)})
    _store(out, np.float32(value), _mask_values(mask, out.shape))
    return out


@instruction
def iota(expr: Any, dtype: Any, *, mask: Mask | None = None, dst: Tile | None = None) -> Tile:
    """GpSimd: materialise an index expression as a tile; a number known at trace time (`nl.program_id(1)`,
    vLLM's paged attention) as a [1, 1] tile."""
    if isinstance(expr, (int, np.integer)) and not isinstance(expr, bool):
        expr = IndexExpr((1, 1), int(expr))
    if not isinstance(expr, IndexExpr):
        raise KernelUsageError("iota needs an index expression built from nl.arange or nl.mgrid, or an integer")
    shape = expr.shape if len(expr.shape) > 1 else (expr.shape[0], 1)
    out, fresh = _output(dst, shape, dtype)
    _record(Engine.GPSIMD, Op.IOTA, (), out, mask=mask, fresh=fresh)
    _store(out, expr.values.reshape(shape), _mask_values(mask, out.shape))
    return out


@instruction
def reciprocal(data: Tile, *, dtype: Any = None, mask: Mask | None = None, engine: Any = None,
               dst: Tile | None = None) -> Tile:
    """1/x on the Vector engine (precise, ~8 cycles per element) or the Scalar engine."""
    _on_chip(data, "reciprocal")
    eng = _engine(engine, Op.RECIPROCAL)
    out, fresh = _output(dst, data.shape, dtype if dtype is not None else data.dtype)
    _record(eng, Op.RECIPROCAL, (data,), out, mask=mask, fresh=fresh)
    if current().numeric:
        with np.errstate(divide="ignore"):
            _store(out, 1.0 / _f32(data), _mask_values(mask, out.shape))
    return out


@instruction
def tensor_tensor_scan(data0: Tile, data1: Tile, initial: Any, op0: Any, op1: Any, *, reverse0: bool = False,
                       reverse1: bool = False, dtype: Any = None, mask: Mask | None = None,
                       dst: Tile | None = None) -> Tile:
    """Vector engine scan along the free axis: r[i] = op1(op0(d0[i], r[i-1]), d1[i]); reverse0 /
    reverse1 swap the operands of op0 / op1."""
    for t in (data0, data1):
        _on_chip(t, "tensor_tensor_scan")
    if data0.shape != data1.shape:
        raise KernelUsageError(f"tensor_tensor_scan operands differ in shape: {data0.shape} vs {data1.shape}")
    name0, fn0 = _alu(op0)
    name1, fn1 = _alu(op1)
    partitions = data0.shape[0]
    initial = _per_partition_operand(initial, partitions, "tensor_tensor_scan initial")
    srcs = (data0, data1) + ((initial,) if isinstance(initial, Tile) else ())
    _check_operands(Op.TENSOR_TENSOR_SCAN, data0=data0, data1=data1)
    out_dtype = dtypes.as_dtype(dtype) if dtype is not None else dtypes.promote(data0.dtype, data1.dtype)
    out, fresh = _output(dst, data0.shape, out_dtype)
    _record(Engine.VECTOR, Op.TENSOR_TENSOR_SCAN, srcs, out, mask=mask, fresh=fresh,
            attrs={"ops": (name0, name1)})
    if current().numeric:
        d0 = _f32(data0).reshape(partitions, -1)
        d1 = _f32(data1).reshape(partitions, -1)
        carry = _operand_values(initial, 2)
        carry = np.broadcast_to(carry, (partitions, 1)).astype(np.float32).reshape(partitions)
        result = np.empty_like(d0)
        for i in range(d0.shape[1]):
            step = fn0(carry, d0[:, i]) if reverse0 else fn0(d0[:, i], carry)
            carry = fn1(d1[:, i], step) if reverse1 else fn1(step, d1[:, i])
            result[:, i] = carry
        _store(out, result.reshape(out.shape), _mask_values(mask, out.shape))
    return out


@instruction
def scalar_tensor_tensor(data: Tile, op0: Any, operand0: Any, op1: Any, operand1: Tile, *,
                         reverse0: bool = False, reverse1: bool = False, dtype: Any = None,
                         mask: Mask | None = None, dst: Tile | None = None) -> Tile:
    """Vector engine: (data op0 operand0) op1 operand1, with operand1 a full tile."""
    _on_chip(data, "scalar_tensor_tensor")
    name0, fn0 = _alu(op0)
    name1, fn1 = _alu(op1)
    operand0 = _per_partition_operand(operand0, data.shape[0], "scalar_tensor_tensor operand0")
    srcs = (data, operand1) + ((operand0,) if isinstance(operand0, Tile) else ())
    out, fresh = _output(dst, data.shape, dtype if dtype is not None else data.dtype)
    _record(Engine.VECTOR, Op.SCALAR_TENSOR_TENSOR, srcs, out, mask=mask, fresh=fresh,
            attrs={"ops": (name0, name1)})
    if current().numeric:
        x = _f32(data)
        b0 = _operand_values(operand0, x.ndim)
        x = fn0(b0, x) if reverse0 else fn0(x, b0)
        y = _f32(operand1).reshape(x.shape)
        _store(out, fn1(y, x) if reverse1 else fn1(x, y), _mask_values(mask, out.shape))
    return out


@instruction
def select(predicate: Any, on_true: Any, on_false: Any, *, dtype: Any = None, mask: Mask | None = None,
           engine: str = Engine.VECTOR, dst: Tile | None = None) -> Tile:
    """nl.where / nisa.affine_select: pick per element from two tiles or scalars."""
    tiles = [x for x in (predicate, on_true, on_false) if isinstance(x, Tile)]
    if not tiles:
        raise KernelUsageError("select needs at least one tile")
    shape = next(t.shape for t in tiles if t is not predicate) if any(
        t is not predicate for t in tiles) else tiles[0].shape
    for t in tiles:
        _on_chip(t, "select")
    base = on_true if isinstance(on_true, Tile) else on_false if isinstance(on_false, Tile) else predicate
    out, fresh = _output(dst, shape, dtype if dtype is not None else base.dtype)
    _record(engine, Op.AFFINE_SELECT if engine == Engine.GPSIMD else Op.SELECT, tuple(tiles), out,
            mask=mask, fresh=fresh)
    if current().numeric:
        if isinstance(predicate, Mask):
            cond = predicate.values
        elif isinstance(predicate, Tile):
            cond = _f32(predicate).reshape(predicate.shape) != 0
        else:
            cond = bool(predicate)
        _store(out, np.where(np.broadcast_to(cond, shape), _choice_values(on_true, shape),
                             _choice_values(on_false, shape)), _mask_values(mask, out.shape))
    return out


@instruction
def tensor_copy_predicated(src: Any, dst: Tile, predicate: Tile, *, reverse_pred: bool = False,
                           mask: Mask | None = None) -> None:
    """Vector engine: `src` (a tile or a number) into `dst` where `predicate` is nonzero (zero with
    `reverse_pred`); the other elements of `dst` keep their values."""
    for t, role in ((dst, "dst"), (predicate, "predicate"), *(((src, "src"),) if isinstance(src, Tile) else ())):
        _on_chip(t, "tensor_copy_predicated")
        if t.size != dst.size or t.shape[0] != dst.shape[0]:
            raise KernelUsageError(f"tensor_copy_predicated: {role} {t.shape} must cover the partitions and "
                                   f"elements of dst {dst.shape}")
    _check_operands(Op.SELECT, src=src, predicate=predicate)
    srcs = (*((src,) if isinstance(src, Tile) else ()), predicate, dst)  # unselected elements stay: dst is read
    _record(Engine.VECTOR, Op.SELECT, srcs, dst, mask=mask)
    if current().numeric:
        chosen = _f32(predicate).reshape(dst.shape) != 0
        if reverse_pred:
            chosen = ~chosen
        active = _mask_values(mask, dst.shape)
        values = _f32(src).reshape(dst.shape) if isinstance(src, Tile) else np.float32(src)
        dst.write(np.broadcast_to(values, dst.shape), chosen if active is None else chosen & active)


_RANGE_COMPARISONS = (Alu.EQUAL, Alu.LESS, Alu.LESS_EQUAL, Alu.GREATER, Alu.GREATER_EQUAL)
FP32_MIN = float(np.finfo(np.float32).min)  # range_select's only fill value (nki.isa.range_select)


@instruction
def range_select(on_true_tile: Tile, comp_op0: Any, comp_op1: Any, bound0: Tile, bound1: Tile, *,
                 reduce_cmd: Any = "reset_reduce", reduce_res: Tile | None = None, reduce_op: Any = "maximum",
                 range_start: int = 0, on_false_value: float = FP32_MIN, dtype: Any = None,
                 mask: Mask | None = None, dst: Tile | None = None) -> Tile:
    """Vector engine (NeuronCore-v3+): each element whose free index + range_start passes both comparisons
    with its partition's bounds, else on_false_value; the rows' maximum goes through the reduce registers
    as `reduce_cmd` says, and into reduce_res when given (the causal / sliding-window mask of attention)."""
    _on_chip(on_true_tile, "range_select")
    partitions = on_true_tile.shape[0]
    comparisons = []
    for op in (comp_op0, comp_op1):
        name = op_name(op)
        if name not in _RANGE_COMPARISONS:
            raise HardwareRuleError(f"range_select compares with {', '.join(_RANGE_COMPARISONS)}, not {name!r}")
        comparisons.append(ALU[name])
    for bound in (bound0, bound1):
        _column(bound, partitions, "range_select bound")
    reduce_name, reducer = _reducer(reduce_op, "range_select")
    command = _reduce_command(reduce_cmd, "range_select")
    if reduce_res is not None:
        _column(reduce_res, partitions, "range_select")
    out, fresh = _output(dst, on_true_tile.shape, dtype if dtype is not None else on_true_tile.dtype)
    inst = _record(Engine.VECTOR, Op.RANGE_SELECT, (on_true_tile, bound0, bound1), out, mask=mask, fresh=fresh,
                   attrs={"reduce_op": reduce_name, "reduce": True})
    if reduce_res is not None:
        _add_write(inst, reduce_res)
    if current().numeric:
        values = _f32(on_true_tile).reshape(partitions, -1)
        index = np.float32(range_start) + np.arange(values.shape[1], dtype=np.float32)[None, :]
        low, high = (_f32(b).reshape(partitions, 1) for b in (bound0, bound1))
        chosen = np.where(comparisons[0](index, low) & comparisons[1](index, high), values, np.float32(on_false_value))
        active = _mask_values(mask, out.shape)
        _store(out, chosen.reshape(out.shape), active)
        partial = _row_reduction(chosen, reduce_name, reducer, active) if command not in (None, "idle") else None
        held = _registers(Engine.VECTOR, command or "reset_reduce", partial, reducer)
        if reduce_res is not None:
            reduce_res.write(held[:partitions].reshape(reduce_res.shape))
    return out


@instruction
def select_reduce(dst: Tile, predicate: Tile, on_true: Tile, on_false: Any, reduce_res: Tile | None = None,
                  reduce_cmd: Any = "idle", reduce_op: Any = "maximum", reverse_pred: bool = False, *,
                  mask: Mask | None = None, dtype: Any = None) -> Tile:
    """Vector engine: dst = on_true where `predicate` is nonzero (zero with `reverse_pred`), else on_false (a
    number or a [P, 1] column); each row's maximum goes into reduce_res when given, through the engine's reduce
    registers as `reduce_cmd` says (idle: this instruction's own maximum, the registers left as they are)."""
    name, reducer = _reducer(reduce_op, "select_reduce", {Alu.MAXIMUM: np.max})
    for t, role in ((predicate, "predicate"), (on_true, "on_true")):
        _on_chip(t, "select_reduce")
        if t.size != dst.size or t.shape[0] != dst.shape[0]:
            raise KernelUsageError(f"select_reduce: {role} {t.shape} must have the partitions and elements of dst "
                                   f"{dst.shape}")
    if dtype is not None and dtypes.as_dtype(dtype) != dst.dtype:
        raise KernelUsageError(f"select_reduce writes dst's type {dst.dtype}, not dtype={dtype}")
    _check_operands(Op.SELECT_REDUCE, predicate=predicate, on_true=on_true, reduce_res=reduce_res)
    partitions = dst.shape[0]
    on_false = _per_partition_operand(on_false, partitions, "select_reduce on_false")
    command = _reduce_command(reduce_cmd, "select_reduce")
    if reduce_res is not None:
        _column(reduce_res, partitions, "select_reduce")
    srcs = (predicate, on_true) + ((on_false,) if isinstance(on_false, Tile) else ())
    reduces = reduce_res is not None or command in ("reduce", "reset_reduce")
    inst = _record(Engine.VECTOR, Op.SELECT_REDUCE, srcs, dst, mask=mask, attrs={"reduce_op": name, "reduce": reduces})
    if reduce_res is not None:
        _add_write(inst, reduce_res)
    if current().numeric:
        chosen = _f32(predicate).reshape(partitions, -1) != 0
        values = np.where(~chosen if reverse_pred else chosen, _f32(on_true).reshape(partitions, -1),
                          _operand_values(on_false, 2)).astype(np.float32)
        active = _mask_values(mask, dst.shape)
        _store(dst, values.reshape(dst.shape), active)
        partial = _row_reduction(values, name, reducer, active) if reduces else None
        held = partial if command in (None, "idle") else _registers(Engine.VECTOR, command, partial, reducer)
        if reduce_res is not None and held is not None:
            reduce_res.write(held[:partitions].reshape(reduce_res.shape))
    return dst


# the cumulative operators of tensor_scalar_cumulative and the register each starts from on reset_reduce
_CUMULATIVE_START = {Alu.ADD: 0.0, Alu.SUBTRACT: 0.0, Alu.MULTIPLY: 1.0, Alu.MAXIMUM: -np.inf, Alu.MINIMUM: np.inf}


@instruction
def tensor_scalar_cumulative(dst: Tile, src: Tile, op0: Any, op1: Any, imm0: Any, imm1: Any = None,
                             reduce_cmd: Any = "reset_reduce") -> Tile:
    """Vector engine: along each partition's free elements, reg = op1(op0(src[i], imm0), reg) and dst[i] = reg.
    The register starts at op1's identity (reset_reduce), at imm1 (load_reduce), or where the engine's reduce
    registers stand (reduce), and is left there for the next instruction."""
    name0, fn0 = _alu(op0)
    name1, fn1 = _alu(op1)
    if name0 in BITWISE or name0 in LOGICAL:
        raise HardwareRuleError(f"tensor_scalar_cumulative takes an arithmetic op0, not {name0}")
    if name1 not in _CUMULATIVE_START:
        raise HardwareRuleError(f"tensor_scalar_cumulative accumulates with {', '.join(_CUMULATIVE_START)}, "
                                f"not {name1}")
    _on_chip(src, "tensor_scalar_cumulative")
    if src.size != dst.size or src.shape[0] != dst.shape[0]:
        raise KernelUsageError(f"tensor_scalar_cumulative: src {src.shape} and dst {dst.shape} must have the same "
                               "partitions and elements")
    _check_operands(Op.TENSOR_SCALAR_CUMULATIVE, src=src, dst=dst)
    command = str(getattr(reduce_cmd, "name", None) or reduce_cmd).rsplit(".", 1)[-1]
    if command not in ("reset_reduce", "reduce", "load_reduce"):
        raise UnsupportedApiError(f"tensor_scalar_cumulative: reduce_cmd {command!r} (it takes reset_reduce, reduce "
                                  "or load_reduce)")
    if command == "load_reduce" and imm1 is None:
        raise KernelUsageError("tensor_scalar_cumulative with load_reduce starts from imm1: give imm1")
    partitions = src.shape[0]
    imm0 = _per_partition_operand(imm0, partitions, "tensor_scalar_cumulative imm0")
    imm1 = None if imm1 is None else _per_partition_operand(imm1, partitions, "tensor_scalar_cumulative imm1")
    srcs = (src, *(t for t in (imm0, imm1) if isinstance(t, Tile)))
    _record(Engine.VECTOR, Op.TENSOR_SCALAR_CUMULATIVE, srcs, dst, attrs={"ops": (name0, name1)},
            work_shape=src.shape)
    if current().numeric:
        steps = fn0(_f32(src).reshape(partitions, -1), _operand_values(imm0, 2))
        held = _registers(Engine.VECTOR, "idle", None, np.max)
        if command == "reset_reduce":
            register = np.full(partitions, _CUMULATIVE_START[name1], dtype=np.float32)
        elif command == "load_reduce":
            register = np.broadcast_to(_operand_values(imm1, 2), (partitions, 1)).reshape(partitions).copy()
        else:
            register = held[:partitions].copy()
        result = np.empty_like(steps)
        for i in range(steps.shape[1]):
            register = fn1(steps[:, i], register)
            result[:, i] = register
        held[:partitions] = register
        _store(dst, result.reshape(dst.shape), None)
    return dst


def _choice_values(x: Any, shape: tuple[int, ...]) -> Any:
    if not isinstance(x, Tile):
        return np.float32(x)
    values = _f32(x)
    return values.reshape(shape) if values.size == math.prod(shape) else _operand_values(x, len(shape))


# --------------------------------------------------------------------------------------------
# Tensor engine
# --------------------------------------------------------------------------------------------


DOUBLE_ROW_DTYPES = frozenset({"float8_e4m3", "float8_e4m3fn", "float8_e5m2"})


def _masked_extent(mask: Mask | None, m: int, n: int) -> tuple[int, int]:
    """Rows and columns of an [m, n] matmul output that a mask leaves some element of."""
    mask = as_mask(mask)
    if mask is None:
        return m, n
    values = mask.values  # 0-d when the predicate folded at trace time (`i * 128 < n` false: nothing)
    try:
        active = np.broadcast_to(values.reshape(values.shape[0], -1) if values.ndim else values, (m, n))
    except ValueError:
        return m, n
    return max(1, int(active.any(axis=1).sum())), max(1, int(active.any(axis=0).sum()))


def _output_mask(mask: Mask | None, stationary: Tile, moving: Tile) -> None:
    """A matmul's mask selects output elements [M, N]; one that only fits the contraction rows is
    refused by name rather than misapplied."""
    mask = as_mask(mask)
    if mask is None:
        return
    rows = stationary.shape[-1] if stationary.ndim > 1 else 1
    shape = mask.values.shape
    if shape and shape[0] not in (1, rows):
        raise UnsupportedApiError(f"a matmul mask of shape {shape} (over the contraction rows?): this simulator "
                                  f"applies a matmul's mask to its output of {rows} rows; slice the operands to "
                                  "the rows that count instead")


@instruction
def nc_matmul(stationary: Tile, moving: Tile, *, is_transpose: bool = False, mask: Mask | None = None,
              dst: Tile | None = None, accumulate: bool = False, stationary_onezero: bool = False,
              moving_onezero: bool = False, perf_mode: str | None = None) -> Tile:
    """stationary[K, M].T @ moving[K, N] -> PSUM [M, N] float32 (docs/fact-sheet.md B.5).

    perf_mode "double_row" (FP8 on NeuronCore-v3): stationary [K, 2, M] and moving [K, 2, N] contract
    over both K and the row pair, twice the work of one matmul in the time of one."""
    limits = current().limits
    _output_mask(mask, stationary, moving)
    _check_operands(Op.NC_MATMUL, stationary=stationary, moving=moving)
    for t, role in ((stationary, "stationary"), (moving, "moving")):
        if t.ndim < 2:
            raise KernelUsageError(f"matmul {role} operand must be a 2-D tile, got shape {t.shape}")
    rows = _double_rows(stationary, moving, perf_mode, limits)
    k, m = stationary.shape[0], math.prod(stationary.shape[1:]) // rows
    k2, n = moving.shape[0], math.prod(moving.shape[1:]) // rows
    if k != k2:
        raise KernelUsageError(f"matmul contraction (partition) sizes differ: stationary {stationary.shape} "
                               f"vs moving {moving.shape}")
    if k > limits.pmax:
        raise HardwareRuleError(f"matmul contraction dimension {k} exceeds {limits.pmax} partitions")
    per_row = " per row" if rows > 1 else ""
    if m > limits.stationary_fmax:
        raise HardwareRuleError(f"matmul stationary free size {m}{per_row} exceeds {limits.stationary_fmax} "
                                f"(stationary tile {stationary.shape})")
    if n > limits.moving_fmax:
        raise HardwareRuleError(f"matmul moving free size {n}{per_row} exceeds {limits.moving_fmax} "
                                f"(moving tile {moving.shape})")
    out, fresh = _output(dst, (m, n), dtypes.float32, PSUM)
    if out.buffer != PSUM:
        raise HardwareRuleError("the Tensor engine writes its results to PSUM only")
    srcs = (stationary, moving) + ((out,) if accumulate else ())
    op = Op.NC_TRANSPOSE if is_transpose else Op.NC_MATMUL
    # a mask makes the compiler issue the matmul on the tiles it keeps (NKI API Masking): the output
    # rows and columns with an element left are the stationary and moving columns that run
    m_run, n_run = _masked_extent(mask, m, n)
    attrs = {"stationary_free": m_run, "moving_free": n_run, "contraction": k * rows, "accumulate": accumulate,
             "is_transpose": is_transpose, "onezero": stationary_onezero or moving_onezero}
    if rows > 1:
        attrs["perf_mode"] = "double_row"
    # the wider operand sets the pace (an FP32 moving tile streams at the FP32 rate under a BF16 stationary)
    wider = max((stationary.storage, moving.storage), key=lambda s: s.itemsize)
    _record(Engine.TENSOR, op, srcs, out, mask=mask, fresh=fresh, flops=2 * k * rows * m_run * n_run,
            attrs=attrs, dtype=wider.dtype_name, sized_as=Op.NC_MATMUL)
    if current().numeric:
        a = _f32(stationary).reshape(k * rows, m)  # [K, 2, M] -> rows (k, r) of the contraction
        b = _f32(moving).reshape(k * rows, n)
        _check_hints(a, b, stationary_onezero, moving_onezero, is_transpose)
        product = a.T @ b
        if accumulate:
            product = product + out.read_accumulator().reshape(m, n)
        if fresh and mask is None:
            out.adopt(product)  # a new PSUM tile: the product is its array
        else:
            _store(out, product.reshape(out.shape), _mask_values(mask, out.shape))
    return out


def _check_hints(stationary: np.ndarray, moving: np.ndarray, stationary_onezero: bool, moving_onezero: bool,
                 is_transpose: bool) -> None:
    """The hints a matmul gives the Tensor engine are promises about its data: the hardware takes them
    on trust and computes something else when they are false, so a simulated product would pass a
    kernel that fails on Trainium."""
    for values, promised, role in ((stationary, stationary_onezero, "stationary"), (moving, moving_onezero, "moving")):
        if promised and not np.isin(values, (0.0, 1.0)).all():
            raise KernelUsageError(f"nc_matmul(is_{role}_onezero=True), but the {role} operand holds values other "
                                   "than 0 and 1; the Tensor engine's fast path would compute a wrong product")
    if is_transpose and not np.array_equal(moving, np.eye(*moving.shape, dtype=moving.dtype)):
        raise KernelUsageError("nc_matmul(is_transpose=True) transposes its stationary operand: the moving operand "
                               "must be an identity matrix (nki.isa.nc_transpose)")


EIGHT = 8  # values per partition the Vector engine's top-8 instructions find, locate or replace
_EIGHT_MAX_FREE = DECLARED[Op.MAX8].size(Engine.VECTOR).max_free  # elements per partition they read at most


def _eight_shape(data: Tile, what: str, mask: Mask | None) -> tuple[int, int]:
    """Partitions and elements per partition of a top-8 instruction's data tile."""
    _on_chip(data, what)
    if mask is not None:
        raise UnsupportedApiError(f"{what} with mask= is not simulated")
    partitions = data.shape[0]
    free = data.size // partitions
    if not EIGHT <= free <= _EIGHT_MAX_FREE:
        raise HardwareRuleError(f"{what} reads {EIGHT} to {_EIGHT_MAX_FREE} elements per partition, got {free} "
                                f"(tile {data.shape})")
    return partitions, free


def _eight_values(vals: Tile, partitions: int, what: str) -> np.ndarray:
    if vals.shape[0] != partitions or vals.size // vals.shape[0] != EIGHT:
        raise KernelUsageError(f"{what}: vals must hold {EIGHT} values on each of the data's {partitions} "
                               f"partitions, got shape {vals.shape}")
    return _f32(vals).reshape(partitions, EIGHT) if current().numeric else np.empty(0)


def _index_type(dtype: Any, op: Op, operand: str) -> np.dtype:
    """The type of the indices `op` writes into `operand`: `dtype` (uint32 when None) if its declaration allows it."""
    index = dtypes.as_dtype(dtype) if dtype is not None else dtypes.uint32
    allowed = DECLARED[op].operands[operand].dtypes
    if index.name not in allowed:
        raise HardwareRuleError(f"{op} writes {' or '.join(allowed)} indices, not {index.name}")
    return index


@instruction
def max8(src: Tile, *, dst: Tile | None = None, dtype: Any = None, mask: Mask | None = None) -> Tile:
    """Vector engine: the 8 largest values of each partition, in descending order, as [P, 8]."""
    partitions, free = _eight_shape(src, "max8", mask)
    out, fresh = _output(dst, (partitions, EIGHT), dtype if dtype is not None else src.dtype)
    _record(Engine.VECTOR, Op.MAX8, (src,), out, fresh=fresh, work_shape=src.shape)
    if current().numeric:
        values = _f32(src).reshape(partitions, free)
        _store(out, -np.sort(-values, axis=1)[:, :EIGHT].reshape(out.shape), None)
    return out


@instruction
def nc_find_index8(data: Tile, vals: Tile, *, dst: Tile | None = None, dtype: Any = None,
                   mask: Mask | None = None) -> Tile:
    """Vector engine: where in each partition of `data` its 8 `vals` occur, as [P, 8] indices; a value
    repeated in `vals` takes its next occurrence, a value absent the all-ones index."""
    partitions, free = _eight_shape(data, "nc_find_index8", mask)
    wanted = _eight_values(vals, partitions, "nc_find_index8")
    index = _index_type(dtype if dtype is not None or dst is None else dst.dtype, Op.NC_FIND_INDEX8, "dst")
    out, fresh = _output(dst, (partitions, EIGHT), index)
    _record(Engine.VECTOR, Op.NC_FIND_INDEX8, (data, vals), out, fresh=fresh, work_shape=data.shape)
    if current().numeric:
        found = np.full((partitions, EIGHT), np.iinfo(index).max, dtype=np.int64)
        values = _f32(data).reshape(partitions, free)
        for p in range(partitions):
            for slot in range(EIGHT):
                where = np.flatnonzero(values[p] == wanted[p, slot])
                earlier = int(np.count_nonzero(wanted[p, :slot] == wanted[p, slot]))
                if earlier < where.size:
                    found[p, slot] = where[earlier]
        _store(out, found.reshape(out.shape), None)
    return out


@instruction
def nc_match_replace8(data: Tile, vals: Tile, imm: Any, *, dst: Tile | None = None, dst_idx: Tile | None = None,
                      dtype: Any = None, mask: Mask | None = None) -> Tile:
    """Vector engine: `data` with the first occurrence of each of its partition's 8 `vals` replaced by
    `imm` (vals taken from the last: a repeated value replaces successive occurrences, the first
    going to the highest slot), their positions in `dst_idx` when given."""
    partitions, free = _eight_shape(data, "nc_match_replace8", mask)
    wanted = _eight_values(vals, partitions, "nc_match_replace8")
    out, fresh = _output(dst, data.shape, dtype if dtype is not None else data.dtype)
    index = None
    if dst_idx is not None:
        index = _index_type(dst_idx.dtype, Op.NC_MATCH_REPLACE8, "dst_idx")
        _output(dst_idx, (partitions, EIGHT), index)
    inst = _record(Engine.VECTOR, Op.NC_MATCH_REPLACE8, (data, vals), out, fresh=fresh, work_shape=data.shape)
    if dst_idx is not None:
        _add_write(inst, dst_idx)  # one instruction, two outputs
    if current().numeric:
        values = _f32(data).reshape(partitions, free).copy()
        found = np.full((partitions, EIGHT), np.iinfo(index or dtypes.uint32).max, dtype=np.int64)
        replaced = np.zeros((partitions, free), dtype=bool)
        for p in range(partitions):
            for slot in reversed(range(EIGHT)):
                where = np.flatnonzero((values[p] == wanted[p, slot]) & ~replaced[p])
                if where.size:
                    found[p, slot] = where[0]
                    replaced[p, where[0]] = True
        values[replaced] = float(imm)
        _store(out, values.reshape(out.shape), None)
        if dst_idx is not None:
            _store(dst_idx, found.reshape(dst_idx.shape), None)
    return out


TOPK_GROUP = 16  # partitions that hold one nisa.topk problem (its snake)
_TOPK_UNSPECIFIED_INDEX = np.iinfo(np.uint32).max  # what the simulator writes where the ISA leaves a slot unspecified


@instruction
def topk(val_dst: Tile, idx_dst: Tile, src: Tile, n: int, sorted: bool = False) -> None:  # noqa: A002 (its name)
    """GpSimd: every group of 16 partitions is one problem over the first `n` elements of its snake (element e
    at partition e % 16, column e // 16); its k largest (k: val_dst's columns) go to val_dst in the same snake
    layout, result j at partition j % 16, column j // 16, and their snake positions to idx_dst. `sorted`: result
    j is the j-th largest; otherwise the ISA leaves the order open and the simulator writes the results in the
    order of their positions, which is no order of value a kernel could rely on by accident.

    Only columns 0 .. ceil(k / 16) - 1 are written; the hardware writes a column on all 16 partitions, so the
    slots of the last one past result k - 1 hold unspecified values (NaN and the all-ones index here). Equal
    values: the lower snake position ranks first (UNCERTAIN: the ISA does not say). A NaN ranks above every
    number, so garbage read as input shows in the output."""
    for tile, role in ((src, "src"), (val_dst, "val_dst"), (idx_dst, "idx_dst")):
        _on_chip(tile, f"topk {role}")
    _check_operands(Op.TOPK, src=src, val_dst=val_dst, idx_dst=idx_dst)
    partitions = src.shape[0]
    if val_dst.ndim != 2 or idx_dst.shape != val_dst.shape or val_dst.shape[0] != partitions:
        raise KernelUsageError(f"topk: val_dst {val_dst.shape} and idx_dst {idx_dst.shape} must both be "
                               f"[{partitions}, k], the partitions of src {src.shape}")
    if partitions % TOPK_GROUP:
        raise HardwareRuleError(f"topk works on groups of {TOPK_GROUP} partitions; src has {partitions}")
    if type(n) is not int:
        raise KernelUsageError(f"topk: n must be an int, got {n!r}")
    k = val_dst.shape[1]
    free = src.size // partitions
    if not 8 <= n < 65536:
        raise HardwareRuleError(f"topk takes 8 <= n < 65536 elements per snake, got n={n}")
    if not 1 <= k < 32768 or k > n:
        raise HardwareRuleError(f"topk finds 1 <= k < 32768 values, at most n={n}; val_dst asks for k={k}")
    if free * TOPK_GROUP < n:
        raise HardwareRuleError(f"topk: a snake of n={n} elements needs {-(-n // TOPK_GROUP)} columns of src; "
                                f"src {src.shape} has {free}")
    inst = _record(Engine.GPSIMD, Op.TOPK, (src,), val_dst, work_shape=src.shape,
                   attrs={"n": n, "k": k, "sorted": bool(sorted)})
    _add_write(inst, idx_dst)
    if not current().numeric:
        return
    groups, columns = partitions // TOPK_GROUP, -(-k // TOPK_GROUP)
    # [group, partition, column] -> [group, element], element e = column * 16 + partition
    snake = _f32(src).reshape(groups, TOPK_GROUP, free).transpose(0, 2, 1).reshape(groups, -1)[:, :n]
    missing = np.isnan(snake)
    positions = np.broadcast_to(np.arange(n), snake.shape)
    # lexsort's last key is the first: NaN first, then by value descending, then by position
    ranked = np.lexsort((positions, -np.where(missing, 0, snake), ~missing), axis=-1)[:, :k]
    chosen = ranked if sorted else np.sort(ranked, axis=1)
    values = np.full((groups, columns * TOPK_GROUP), np.nan, dtype=np.float32)
    indices = np.full((groups, columns * TOPK_GROUP), _TOPK_UNSPECIFIED_INDEX, dtype=np.int64)
    values[:, :k] = np.take_along_axis(snake, chosen, axis=1)
    indices[:, :k] = chosen
    # result j of a group -> its partition j % 16, column j // 16
    for out, results in ((val_dst, values), (idx_dst, indices)):
        laid = results.reshape(groups, columns, TOPK_GROUP).transpose(0, 2, 1).reshape(partitions, columns)
        _store(out[:, 0:columns], laid, None)


QUADRANT = 32  # partitions one Vector-engine shuffle moves data within (nki.isa.nc_stream_shuffle)
_UNMODIFIED = 255  # a shuffle_mask entry that leaves its output partition as it was


@instruction
def nc_stream_shuffle(src: Tile, dst: Tile, shuffle_mask: Any, *, mask: Mask | None = None) -> None:
    """Vector engine: in every quadrant of 32 partitions, output partition i copies input partition
    shuffle_mask[i] of the same quadrant (255: left as it was). dst may be src (in place)."""
    _on_chip(src, "nc_stream_shuffle")
    _on_chip(dst, "nc_stream_shuffle")
    try:
        sources = [int(m) for m in shuffle_mask]
    except (TypeError, ValueError):
        raise UnsupportedApiError("nc_stream_shuffle with a shuffle_mask that is not a list of integers (affine "
                                  "expressions) is not simulated") from None
    if len(sources) != QUADRANT or any(not (0 <= m < QUADRANT or m == _UNMODIFIED) for m in sources):
        raise KernelUsageError(f"nc_stream_shuffle: shuffle_mask must list {QUADRANT} partitions of a quadrant "
                               f"(0-31, or 255 to leave one unmodified), got {shuffle_mask!r}")
    if src.dtype != dst.dtype:
        raise HardwareRuleError(f"nc_stream_shuffle copies bits: dst {dst.dtype} must have src's type {src.dtype}")
    partitions, free = dst.shape[0], dst.size // dst.shape[0]
    if src.size // src.shape[0] != free:
        raise HardwareRuleError(f"nc_stream_shuffle: src {src.shape} and dst {dst.shape} must hold as many "
                                "elements per partition")
    # output partition base + i reads input partition base + shuffle_mask[i], quadrant by quadrant (one
    # input partition broadcasts to a quadrant with a mask of zeros)
    pairs = [(base + i, base + m) for base in range(0, partitions, QUADRANT) for i, m in enumerate(sources)
             if m != _UNMODIFIED and base + i < partitions]
    beyond = [s for _, s in pairs if s >= src.shape[0]]
    if beyond:
        raise KernelUsageError(f"nc_stream_shuffle: shuffle_mask reads input partition {beyond[0]}; src {src.shape} "
                               f"has {src.shape[0]}")
    _record(Engine.VECTOR, Op.NC_STREAM_SHUFFLE, (src,), dst, mask=mask, work_shape=dst.shape)
    if current().numeric:
        values = src.read().reshape(src.shape[0], free)
        moved = np.zeros((partitions, free), dtype=values.dtype)
        keep = np.zeros((partitions, free), dtype=bool)
        for out_p, in_p in pairs:
            moved[out_p] = values[in_p]
            keep[out_p] = True
        active = _mask_values(mask, dst.shape)
        where = keep.reshape(dst.shape) if active is None else keep.reshape(dst.shape) & active
        _store(dst, moved.reshape(dst.shape), where)


def _double_rows(stationary: Tile, moving: Tile, perf_mode: str | None, limits: Limits) -> int:
    """How many rows one matmul contracts per partition: 2 in double_row performance mode, else 1,
    checking the mode's own limits (nki.isa.nc_matmul: NeuronCore-v3 and later, FP8, [K, 2, free])."""
    mode = str(getattr(perf_mode, "name", perf_mode) or "none")
    if mode == "none":
        return 1
    if mode not in ("double_row", "double_row_gen3"):
        raise UnsupportedApiError(f"matmul perf_mode {mode!r} is not simulated (known: double_row)")
    if limits.neuron_core_version < 3:
        raise HardwareRuleError(f"matmul perf_mode {mode!r} needs NeuronCore-v3 (trn2) or later; NeuronCore-"
                                f"v{limits.neuron_core_version} ({limits.name}) has no performance modes")
    for t, role in ((stationary, "stationary"), (moving, "moving")):
        if t.ndim != 3 or t.shape[1] != 2:
            raise HardwareRuleError(f"double_row matmul {role} tile must be [K, 2, free], got {t.shape}")
        if t.storage.dtype_name not in DOUBLE_ROW_DTYPES:
            raise HardwareRuleError(f"double_row matmul takes FP8 (float8_e4m3 / float8_e5m2) operands; the "
                                    f"{role} tile is {t.storage.dtype_name}")
    return 2


def _fits(op: Op, engine: str, partitions: int, free: int) -> bool:
    """Whether work of `partitions` x `free` elements is within `op`'s declared size on `engine`."""
    size = DECLARED[op].size(engine)
    return ((size.partitions is None or partitions <= size.partitions)
            and (size.max_free is None or free <= size.max_free))


def _square(engine: str) -> str:
    size = DECLARED[Op.NC_TRANSPOSE].size(engine)
    return f"{size.partitions}x{size.max_free}"


@instruction
def nc_transpose(data: Tile, *, engine: Any = None, dtype: Any = None, mask: Mask | None = None,
                 dst: Tile | None = None) -> Tile:
    """Swap partition and free axes: Tensor engine (<=128x128, into PSUM) or Vector (<=32x32)."""
    _on_chip(data, "nc_transpose")
    p, f = data.shape[0], math.prod(data.shape[1:])
    small = _fits(Op.NC_TRANSPOSE, Engine.VECTOR, p, f)
    # left to the compiler, a small transpose goes to Vector when its input or output rules out the
    # Tensor engine (which reads SBUF and writes PSUM)
    vector = small and (data.buffer == PSUM or (dst is not None and dst.buffer != PSUM))
    eng = _engine(engine, Op.NC_TRANSPOSE, Engine.VECTOR if vector else Engine.TENSOR)
    if eng == Engine.VECTOR:
        if not small:
            raise HardwareRuleError(f"Vector-engine transpose handles at most {_square(Engine.VECTOR)}, got {p}x{f}")
        out, fresh = _output(dst, (f, p), dtype if dtype is not None else data.dtype)
        _record(Engine.VECTOR, Op.NC_TRANSPOSE, (data,), out, mask=mask, fresh=fresh, work_shape=data.shape)
        if current().numeric:
            _store(out, _f32(data).reshape(p, f).T, _mask_values(mask, out.shape))
        return out
    if not _fits(Op.NC_TRANSPOSE, Engine.TENSOR, p, f):
        raise HardwareRuleError(f"Tensor-engine transpose handles at most {_square(Engine.TENSOR)}, got {p}x{f}")
    if data.buffer != SBUF:
        raise HardwareRuleError("Tensor-engine transpose reads its input from SBUF")
    # The result keeps the input's dtype; the docs describe dtype= as an extra cast instruction.
    out, fresh = _output(dst, (f, p), data.dtype, PSUM)
    if out.buffer != PSUM:
        raise HardwareRuleError("the Tensor engine writes its results to PSUM only; a Tensor-engine transpose "
                                "goes to PSUM (or use engine=vector for up to 32x32)")
    _record(Engine.TENSOR, Op.NC_TRANSPOSE, (data,), out, mask=mask, fresh=fresh, flops=2 * p * p * f,
            attrs={"stationary_free": f, "moving_free": p, "contraction": p, "accumulate": False,
                   "is_transpose": True}, dtype=data.storage.dtype_name)
    if current().numeric:
        _store(out, _f32(data).reshape(p, f).T, _mask_values(mask, out.shape))
    if fresh and dtype is not None and dtypes.as_dtype(dtype) != out.dtype:
        return tensor_copy(out, dtype=dtype)
    return out
