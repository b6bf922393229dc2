"""Running a kernel: wrap NumPy inputs as HBM tensors, call the kernel, collect outputs and trace.

`nki.jit` and friends return a `Kernel`; calling it with NumPy arrays runs it on the simulator.
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import dtypes
from .errors import KernelUsageError
from .hook import nki_imports
from .indexing import full_subscript
from .tensor import HBM, Simulation, Storage, Tile, pop, push
from .trace import Trace


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of an input, enough for trace-only mode (no data)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @staticmethod
    def of(array: Any) -> TensorSpec:
        return TensorSpec(tuple(array.shape), dtypes.as_dtype(array.dtype))


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

    def __init__(self, func: Callable[..., Any], generation: str, options: dict[str, Any] | None = None):
        self.func = func
        self.generation = generation
        self.options = options or {}
        self.grid: tuple[int, ...] = (1,)
        self.__name__ = getattr(func, "__name__", "kernel")
        self.__doc__ = getattr(func, "__doc__", None)
        self.__wrapped__ = func

    def __getitem__(self, grid: Any) -> Kernel:
        launched = Kernel(self.func, self.generation, self.options)
        launched.grid = tuple(int(g) for g in (grid if isinstance(grid, tuple) else (grid,)))
        return launched

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .tensor import _current

        if _current:  # called from inside another kernel: just trace into it
            return self.func(*args, **kwargs)
        result = run_kernel(self, args, kwargs, numeric=True)
        outputs = result.outputs
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def jit_decorator(generation: str) -> Callable[..., Any]:
    """Build `nki.jit`-style decorators usable bare (`@nki.jit`) or with options (`@nki.jit(mode=...)`)."""

    def decorator(func: Callable[..., Any] | None = None, **options: Any) -> Any:
        if func is None:
            return lambda f: Kernel(_unwrap(f), generation, options)
        return Kernel(_unwrap(func), generation, options)

    return decorator


def _unwrap(func: Any) -> Callable[..., Any]:
    return func.func if isinstance(func, Kernel) else func


def _as_input(sim: Simulation, name: str, value: Any) -> Any:
    if isinstance(value, (np.ndarray, TensorSpec)) or (hasattr(value, "shape") and hasattr(value, "dtype")
                                                       and not isinstance(value, Tile)):
        spec = value if isinstance(value, TensorSpec) else TensorSpec.of(value)
        data = None
        if sim.numeric:
            if isinstance(value, TensorSpec):
                raise KernelUsageError(f"input {name}: numeric mode needs data, not just a shape",
                                       "<inputs>", 0)
            data = np.array(value, dtype=spec.dtype, copy=True)
        storage = Storage(sim, name, HBM, spec.shape, spec.dtype, -1, data)
        return Tile(storage, full_subscript(spec.shape))
    return value


def run_kernel(kernel: Kernel | Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any] | None = None,
               numeric: bool = True, hardware: str | None = None, generation: str | None = None) -> RunResult:
    """Run a kernel on the simulator. Array arguments become HBM tensors; others pass through.

    `hardware` defaults to the kernel's `platform_target=` option (`@nki.jit(platform_target=...)`),
    else trn1."""
    kwargs = dict(kwargs or {})
    if hardware is None:
        target = kernel.options.get("platform_target") if isinstance(kernel, Kernel) else None
        hardware = target if target in ("trn1", "trn2") else "trn1"
    func = kernel.func if isinstance(kernel, Kernel) else kernel
    gen = generation or (kernel.generation if isinstance(kernel, Kernel) else "legacy")
    grid = kernel.grid if isinstance(kernel, Kernel) else (1,)
    sim = Simulation(numeric=numeric, hardware=hardware, generation=gen)
    sim.trace.kernel_name = getattr(func, "__name__", "kernel")
    sim.trace.kernel_file = inspect.getsourcefile(func) or "" if callable(func) else ""
    try:
        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        names = []
    # The trace is hundreds of thousands of small acyclic objects: the cyclic collector would
    # rescan them over and over while they are built, for nothing.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    push(sim)
    try:
        tiles = [_as_input(sim, names[i] if i < len(names) else f"arg{i}", a) for i, a in enumerate(args)]
        kw_tiles = {k: _as_input(sim, k, v) for k, v in kwargs.items()}
        returned: Any = None
        sim.grid = grid
        with nki_imports():  # kernels may import NKI inside their body
            for index in np.ndindex(*grid):
                sim.program_id = tuple(int(i) for i in index)
                sim.shared_cursor = 0
                returned = func(*tiles, **kw_tiles)
    finally:
        pop()
        if gc_was_enabled:
            gc.enable()
    return _collect(sim, returned, tiles + list(kw_tiles.values()))


def _collect(sim: Simulation, returned: Any, inputs: list[Any]) -> RunResult:
    items = returned if isinstance(returned, (tuple, list)) else ([] if returned is None else [returned])
    outputs: list[np.ndarray | None] = []
    shapes: list[tuple[int, ...]] = []
    input_ids = {t.storage.id for t in inputs if isinstance(t, Tile)}
    returned_input = False
    for item in items:
        if not isinstance(item, Tile):
            raise KernelUsageError(f"a kernel must return the HBM tensors it wrote, got {type(item).__name__}",
                                   sim.trace.kernel_file, 0)
        if item.buffer != HBM:
            raise KernelUsageError(f"kernel returned {item.name}, a {item.buffer.upper()} tile; outputs must "
                                   "be HBM tensors (buffer=nl.shared_hbm) written with nl.store",
                                   sim.trace.kernel_file, 0)
        returned_input = returned_input or item.storage.id in input_ids
        shapes.append(item.shape)
        outputs.append(np.array(item.read()) if sim.numeric else None)
    return RunResult(outputs, sim.trace, shapes, returned_input, input_ids)

