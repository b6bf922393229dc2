"""Running a kernel: wrap NumPy inputs as HBM tensors, call the kernel, collect outputs and trace.

`nki.jit` and friends return a `Kernel`; calling it with NumPy arrays runs it on the simulator.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..hardware import available_hardware
from . import dtypes
from .errors import KernelUsageError, recording_lines_of
from .hook import nki_imports
from .indexing import full_subscript
from .tensor import HBM, Simulation, Storage, Tile, pop, push, running
from .trace import Trace, collector_paused


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of an input, enough for trace-only mode (no data). A 0-d input is a scalar
    argument (an epsilon, a scale), so its value is kept: the kernel computes with it, not on it."""

    shape: tuple[int, ...]
    dtype: np.dtype
    value: Any = None

    @staticmethod
    def of(array: Any) -> TensorSpec:
        shape = tuple(array.shape)
        return TensorSpec(shape, dtypes.as_dtype(array.dtype), None if shape else np.asarray(array).item())


@dataclass(frozen=True)
class KernelExpression:
    """A kernel parameter's value written as Python and evaluated in the kernel's own module when the
    kernel is called: values of types the kernel file defines or imports (a config dataclass, an enum)
    that a reference, which never imports the kernel, cannot build itself."""

    text: str

    def evaluate(self, func: Callable[..., Any], parameter: str) -> Any:
        # evaluated where the kernel's own code runs (the sandbox), with the kernel's trust
        namespace = getattr(func, "__globals__", {})
        try:
            return eval(compile(self.text, f"<{parameter}>", "eval"), namespace)
        except Exception as exc:  # any failure is the reference's to fix
            raise KernelUsageError(f"the value of kernel parameter {parameter!r}, {self.text!r}, failed in the "
                                   f"kernel's module: {type(exc).__name__}: {exc}", "<inputs>", 0) from None


@dataclass(frozen=True)
class Launch:
    """How a kernel is called beyond its array inputs: Python values for named parameters (shapes,
    pool sizes, epsilons) and the SPMD launch grid (None: launched without one)."""

    kernel_args: dict[str, Any] = field(default_factory=dict)
    grid: tuple[int, ...] | None = None


@dataclass
class RunResult:
    """Outputs (NumPy, None in trace-only mode), the trace, and facts the checker's guards need."""

    outputs: list[np.ndarray | None]
    trace: Trace
    output_shapes: list[tuple[int, ...]] = field(default_factory=list)
    returned_input: bool = False
    input_ids: set[int] = field(default_factory=set)  # trace tensor ids of the kernel's inputs


class Kernel:
    """A function decorated with `nki.jit` (or baremetal, benchmark, ...), runnable on NumPy inputs."""

    def __init__(self, func: Callable[..., Any], api: str, options: dict[str, Any] | None = None):
        self.func = func
        self.api = api
        self.options = options or {}
        self.grid: tuple[int, ...] | None = None  # set by `kernel[grid]`
        self.__name__ = getattr(func, "__name__", "kernel")
        self.__doc__ = getattr(func, "__doc__", None)
        self.__wrapped__ = func

    def __getitem__(self, grid: Any) -> Kernel:
        launched = Kernel(self.func, self.api, self.options)
        sizes = grid if isinstance(grid, tuple) else (grid,)
        try:
            launched.grid = tuple(operator.index(g) for g in sizes)
        except TypeError:
            raise KernelUsageError(f"a launch grid is made of integers, got {grid!r}") from None
        if not launched.grid or min(launched.grid) < 1:
            raise KernelUsageError(f"launch grid {launched.grid} has no programs; every grid dimension must "
                                   "be at least 1")
        return launched

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        sim = running()
        if sim is not None:  # called from inside a kernel or its host wrapper: trace into it
            if self.grid is None:
                return self.func(*args, **kwargs)
            return run_programs(sim, self.grid, lambda: self.func(*args, **kwargs))
        result = run_kernel(self, args, kwargs, numeric=True)
        outputs = result.outputs
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def jit_decorator(api: str) -> Callable[..., Any]:
    """Build `nki.jit`-style decorators usable bare (`@nki.jit`) or with options (`@nki.jit(mode=...)`)."""

    def decorator(func: Callable[..., Any] | None = None, **options: Any) -> Any:
        if func is None:
            return lambda f: Kernel(_unwrap(f), api, options)
        return Kernel(_unwrap(func), api, options)

    return decorator


def _unwrap(func: Any) -> Callable[..., Any]:
    return func.func if isinstance(func, Kernel) else func


def _as_input(sim: Simulation, name: str, value: Any) -> Any:
    # array-likes become HBM tensors; a class such as np.float32 (a dtype argument) has `shape` and
    # `dtype` too, as attribute descriptors, and passes through
    if isinstance(value, (np.ndarray, TensorSpec)) or (hasattr(value, "shape") and hasattr(value, "dtype")
                                                       and not isinstance(value, (Tile, type))):
        spec = value if isinstance(value, TensorSpec) else TensorSpec.of(value)
        if not spec.shape:  # a scalar argument: the kernel sees the Python number its caller passed
            return spec.value
        data = None
        if sim.numeric:
            if isinstance(value, TensorSpec):
                raise KernelUsageError(f"input {name}: numeric mode needs data, not just a shape",
                                       "<inputs>", 0)
            data = np.array(value, dtype=spec.dtype, copy=True)
        storage = Storage(sim, name, HBM, spec.shape, spec.dtype, -1, data)
        sim.declared(storage, "input")
        return Tile(storage, full_subscript(spec.shape))
    return value


def run_kernel(kernel: Kernel | Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any] | None = None,
               numeric: bool = True, hardware: str | None = None, api: str | None = None,
               grid: tuple[int, ...] | None = None, record: bool = False,
               on_call: Callable[[Trace], None] | None = None) -> RunResult:
    """Run a kernel on the simulator. Array arguments become HBM tensors; others pass through.
    Positional arrays fill the parameters `kwargs` does not name, in order, so Python values may sit
    between arrays (`kernel(x, eps, gamma)` with kwargs {"eps": 1e-5}).

    `grid` (else the kernel's own, `kernel[2, 2]`) launches that many programs, one after another.
    `hardware` defaults to the kernel's `platform_target=` option (`@nki.jit(platform_target=...)`),
    else trn1. `record` keeps the trace's tape, its replayable form (trace.py); `on_call` is told after each
    call the kernel's own code makes (the tape is complete up to there)."""
    kwargs = dict(kwargs or {})
    if hardware is None:
        target = kernel.options.get("platform_target") if isinstance(kernel, Kernel) else None
        hardware = target if target in available_hardware() else "trn1"
    func = kernel.func if isinstance(kernel, Kernel) else kernel
    api = api or (kernel.api if isinstance(kernel, Kernel) else "legacy")
    if grid is None and isinstance(kernel, Kernel):
        grid = kernel.grid
    sim = Simulation(numeric=numeric, hardware=hardware, api=api, record=record)
    sim.on_call = on_call
    sim.force_auto_alloc = bool(kernel.options.get("force_auto_alloc")) if isinstance(kernel, Kernel) else False
    sim.trace.kernel_name = getattr(func, "__name__", "kernel")
    sim.trace.kernel_file = inspect.getsourcefile(func) or "" if callable(func) else ""
    positional, named = bind_arguments(func, list(args), kwargs)
    push(sim)
    try:
        # the file its code was compiled from (a sandboxed run loads the source under a name of its own)
        home = getattr(getattr(func, "__code__", None), "co_filename", "")
        with collector_paused(), recording_lines_of(home):
            tiles = [_as_input(sim, name, a) for name, a in positional]
            kw_tiles = {k: _as_input(sim, k, v) for k, v in named.items()}
            with nki_imports():  # kernels may import NKI inside their body
                call = lambda: func(*tiles, **kw_tiles)  # noqa: E731
                returned = call() if grid is None else run_programs(sim, grid, call)
    finally:
        pop()
    return _collect(sim, returned, tiles + list(kw_tiles.values()))


def bind_arguments(func: Callable[..., Any], arrays: list[Any], kwargs: dict[str, Any]
                   ) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """Positional (name, value) pairs and keyword arguments for calling `func`: the arrays fill, in
    order, the positional parameters `kwargs` leaves free; once a parameter is taken by `kwargs`, the
    arrays after it are passed by name. Too many arrays for the signature is an error. A
    KernelExpression value is evaluated in the kernel's module here."""
    kwargs = {name: value.evaluate(func, name) if isinstance(value, KernelExpression) else value
              for name, value in kwargs.items()}
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return [(f"arg{i}", a) for i, a in enumerate(arrays)], kwargs
    positional_kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    free = [p for p in parameters if p.kind in positional_kinds and p.name not in kwargs]
    variadic = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters)
    if len(arrays) > len(free) and not variadic:
        given = f" besides {', '.join(sorted(kwargs))}" if kwargs else ""
        raise KernelUsageError(f"{getattr(func, '__name__', 'kernel')} takes {len(free)} array inputs{given}, "
                               f"but {len(arrays)} were given", "<inputs>", 0)
    positional: list[tuple[str, Any]] = []
    keywords = dict(kwargs)
    by_name = False
    order = [p for p in parameters if p.kind in positional_kinds]
    remaining = iter(arrays)
    for parameter in order:
        if parameter.name in kwargs:
            by_name = True
            continue
        value = next(remaining, _MISSING)
        if value is _MISSING:
            break
        if by_name:
            keywords[parameter.name] = value
        else:
            positional.append((parameter.name, value))
    positional += [(f"arg{len(positional) + i}", a) for i, a in enumerate(remaining)]  # into *args
    return positional, keywords


_MISSING = object()


def run_programs(sim: Simulation, grid: tuple[int, ...], call: Callable[[], Any]) -> Any:
    """Run `call` once per program of `grid`, in order, as one NeuronCore runs an SPMD launch; every
    program sees its own `nl.program_id` and shares the launch's `shared_hbm` outputs. Returns what
    the programs returned (the shared outputs, the same for all)."""
    saved = sim.grid, sim.program_id, sim.shared, sim.shared_cursor
    sim.grid, sim.shared = grid, []
    returned: Any = None
    try:
        for index in np.ndindex(*grid):
            sim.program_id = tuple(int(i) for i in index)
            sim.shared_cursor = 0
            start_program(sim)
            returned = call()
    finally:
        sim.grid, sim.program_id, sim.shared, sim.shared_cursor = saved
    end_launch(sim, grid)
    return returned


def start_program(sim: Simulation) -> None:
    """An SPMD program starts: a barrier for the performance model (and an entry of the tape)."""
    sim.trace.program_starts.append(len(sim.trace.instructions))
    if sim.tape is not None:
        sim.tape.append(("program",))


def end_launch(sim: Simulation, grid: tuple[int, ...]) -> None:
    sim.trace.launches.append(grid)
    if sim.tape is not None:
        sim.tape.append(("launch", grid))


def storage_root(trace: Trace, tensor: int) -> int:
    """The allocation a (possibly reshaped, possibly many times) tensor views."""
    info = trace.tensors.get(tensor)
    while info is not None and info.alias_of >= 0:
        tensor = info.alias_of
        info = trace.tensors.get(tensor)
    return tensor


def written_roots(trace: Trace) -> set[int]:
    """The allocations some instruction of the trace writes."""
    return {storage_root(trace, acc.tensor) for inst in trace.instructions for acc in inst.writes}


def returns_unwritten_input(trace: Trace, outputs: Sequence[Tile], input_ids: set[int]) -> bool:
    """Whether an output is an input the kernel never wrote (a reshaped view of an input is that
    input): an output argument the kernel filled is an output, an input passed back is not."""
    roots = {storage_root(trace, t.storage.id) for t in outputs} & input_ids
    return bool(roots - written_roots(trace)) if roots else False


def _collect(sim: Simulation, returned: Any, inputs: list[Any]) -> RunResult:
    input_ids = {t.storage.id for t in inputs if isinstance(t, Tile)}
    if returned is None:
        # the output-argument convention (`kernel(x, out)`, legacy nki_jit and baremetal kernels): the
        # outputs are the array arguments the kernel wrote, in argument order
        written = written_roots(sim.trace)
        items: Any = [t for t in inputs if isinstance(t, Tile) and t.buffer == HBM and t.storage.id in written]
    else:
        items = returned if isinstance(returned, (tuple, list)) else [returned]
    outputs: list[np.ndarray | None] = []
    shapes: list[tuple[int, ...]] = []
    for item in items:
        if not isinstance(item, Tile):
            raise KernelUsageError(f"a kernel must return the HBM tensors it wrote, got {type(item).__name__}",
                                   sim.trace.kernel_file, 0)
        if item.buffer != HBM:
            raise KernelUsageError(f"kernel returned {item.name}, a {item.buffer.upper()} tile; outputs must "
                                   "be HBM tensors (buffer=nl.shared_hbm) written with nl.store",
                                   sim.trace.kernel_file, 0)
        shapes.append(item.shape)
        outputs.append(np.array(item.read()) if sim.numeric else None)
    if sim.tape is not None:
        sim.tape.append(("return", tuple(items)))
    return RunResult(outputs, sim.trace, shapes, returns_unwritten_input(sim.trace, items, input_ids), input_ids)

