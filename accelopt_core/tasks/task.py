"""Tasks: a reference implementation plus the inputs a kernel is run and checked on.

Two file formats are read:
- the public NKIBench reference module: `get_inputs()`, `forward(*inputs)`, and optionally
  `transform_to_nki_inputs(inputs)` and `transform_nki_outputs(out, ref)`; randomness comes from
  NumPy's global generator (and torch's, when the module uses torch), which we seed per check;
- our native form: `make_inputs(rng: numpy.random.Generator) -> sequence of arrays` and
  `reference(*inputs) -> array or tuple of arrays`, optionally `RTOL` and
  `peak_work(*inputs) -> PeakWork`.

"% of peak" needs the task's work: a reference's `peak_work` when it declares one, else the NumPy work
of the reference itself, counted while it runs (work.py) — any NumPy reference of either form.

Either form may say how the kernel is launched beyond its array inputs: `KERNEL_ARGS`, the kernel
parameters that take Python values (`{"pool_size": 2, "eps": 1e-6}`), and `GRID`, the SPMD launch
grid (`(2, 2)`). Each is a constant or, in the native form, a function of the size variant's sizes
(`def KERNEL_ARGS(**sizes)`), so a value can follow the variant. `KERNEL_ARG_EXPRESSIONS` gives
parameters whose values the kernel's own file defines (`{"cfg": "Config(eps=1e-6)"}`): Python
evaluated in the kernel's module when the kernel is called, since a reference never imports the kernel.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..nki.runner import KernelExpression, Launch
from .declared import default_task_name
from .shapes import random_without_data, without_data
from .work import PeakWork, ShapeOnlyError, Tally, count_work

DEFAULT_RTOL = 2e-5


class TaskError(Exception):
    """The reference file is unusable (missing function, failing import, bad shapes)."""


class ReferenceRun:
    """A case's reference outputs, computed once, by a run that may also count the reference's work."""

    def __init__(self, call: Callable[[Callable[[Any], Any]], Any], by_shapes: bool = False):
        self._call = call  # runs the reference on the case's inputs, each passed through the wrapper given
        self._outputs: list[np.ndarray] | None = None
        self._lock = threading.Lock()  # the profiler may compute a case's reference in a thread of its own
        self.by_shapes = by_shapes  # its inputs were drawn without data (shapes.py): it can only be counted

    def outputs(self) -> list[np.ndarray]:
        if self.by_shapes:
            raise TaskError("a case drawn by its shapes has no reference outputs")
        with self._lock:
            if self._outputs is None:
                self._outputs = _as_list(self._call(lambda value: value))
            return self._outputs

    def counted_work(self, shapes_only: bool = False) -> PeakWork | None:
        """The reference's NumPy work on this case; its outputs are kept for the check. None when the
        reference fails under counting (the check then runs it as it is and reports what it does).
        `shapes_only`: counted on the inputs' shapes, computing nothing (no outputs to keep), and on the
        data only where the reference's work depends on it (work.ShapeOnlyError) or it fails so."""
        if shapes_only or self.by_shapes:
            try:
                return count_work(self._call, shapes_only=True)[1]
            except Exception as exc:
                if self.by_shapes:  # no data to count on: the caller draws some
                    raise ShapeOnlyError(str(exc)) from exc
        with self._lock:
            try:
                result, work = count_work(self._call)
            except Exception:
                return None
            if self._outputs is None:
                self._outputs = _as_list(result)
            return work


@dataclass
class Case:
    """One seed of a task: the kernel's inputs, the reference outputs (computed on demand) and how
    to bring the kernel's outputs into the reference's layout."""

    inputs: list[np.ndarray]
    reference: Callable[[], list[np.ndarray]]
    convert: Callable[[list[np.ndarray]], list[np.ndarray]] = lambda outputs: outputs
    counted_work: Callable[..., PeakWork | None] = lambda shapes_only=False: None  # the reference's work on this case

    @staticmethod
    def of(inputs: list[np.ndarray], run: ReferenceRun) -> Case:
        return Case(inputs, run.outputs, counted_work=run.counted_work)


@dataclass
class Task:
    """A checkable task: `make_case(seed)` draws inputs; `peak_work(inputs)` gives the analytic work its
    reference declares, `counted_work()` the work the reference does when it declares none."""

    name: str
    make_case: Callable[[int], Case]
    rtol: float = DEFAULT_RTOL
    peak_work: Callable[[list[np.ndarray]], PeakWork] | None = None
    source_path: str | None = None
    family: str = ""  # tasks of one family share optimization lessons (e.g. "matmul")
    variants: tuple[str, ...] = ()  # size variants the reference defines, e.g. ("full", "small")
    kernel_args: dict[str, Any] = field(default_factory=dict)  # kernel parameters given Python values
    grid: tuple[int, ...] | None = None  # SPMD launch grid; None: launched without one
    # the reference's content and sizes when its NumPy work can be counted (no peak_work, not a torch module)
    count_key: str | None = None
    draw_shapes: Callable[[], Case] | None = None  # a case drawn without data (shapes.py); raises where it cannot

    @property
    def launch(self) -> Launch:
        return Launch(dict(self.kernel_args), self.grid)

    def shape_case(self) -> Case:
        """A case of this size for its inputs' shapes and the work counted on them: drawn without data
        (in no time and memory) where the reference allows, else drawn for real on seed 0."""
        if self.draw_shapes is not None:
            try:
                return self.draw_shapes()
            except Exception:
                pass
        return self.make_case(0)

    def counted_work(self, case: Case | None = None, shapes_only: bool = False) -> PeakWork | None:
        """The reference's own NumPy work at this task's size, counted once per process and reference
        version: on `case` when given (a case of this size the check runs anyway), else on seed 0;
        `shapes_only` where nothing else needs the reference's outputs (ReferenceRun.counted_work)."""
        if self.count_key is None:
            return None
        with _counted_lock:
            if self.count_key in _counted:
                return _counted[self.count_key]
        try:
            work = (case or self.make_case(0)).counted_work(shapes_only)
        except ShapeOnlyError:  # a case drawn by shapes, for a reference whose work needs its data
            work = self.make_case(0).counted_work()
        with _counted_lock:
            _counted[self.count_key] = work
        return work


_counted: dict[str, PeakWork | None] = {}
_counted_lock = threading.Lock()


def _as_list(value: Any) -> list[np.ndarray]:
    items = value if isinstance(value, (tuple, list)) else [value]
    return [_to_numpy(v) for v in items]


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return np.asarray(value)  # a base-class array, also for a counted run's outputs
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _import_reference(path: str) -> tuple[types.ModuleType, str]:
    """The reference module, executed, and its source text."""
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
    except OSError as exc:
        raise TaskError(f"cannot read reference {path}: {exc.strerror}") from None
    try:
        code = compile(source, path, "exec")
    except SyntaxError as exc:
        raise TaskError(f"{os.path.basename(path)}:{exc.lineno}: syntax error in reference: {exc.msg}") from None
    module = types.ModuleType(f"accelopt_reference_{abs(hash(path))}")
    module.__file__ = path
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    try:
        exec(code, module.__dict__)  # references are the user's own trusted files
    except Exception as exc:
        raise TaskError(f"{path}: importing the reference failed: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(folder)
    return module, source


def _user_call(path: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`function(*args, **kwargs)`, a function of the reference file at `path`; what it raises becomes a
    TaskError naming the reference's line it failed on: a broken reference is bad input, not a traceback."""
    try:
        return function(*args, **kwargs)
    except (TaskError, ShapeOnlyError):  # already said, or a count by shapes that needs the data
        raise
    except Exception as exc:
        raise TaskError(f"{_failing_line(path, exc)}: {function.__name__}() raised {type(exc).__name__}: {exc}") \
            from exc


def _failing_line(path: str, exc: BaseException) -> str:
    """`path:line` of the deepest frame of `exc` that runs in the reference file (the call's line when
    the failure is deeper, in NumPy), or just `path`."""
    where = os.path.abspath(path)
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if os.path.abspath(frame.filename) == where]
    return f"{path}:{lines[-1]}" if lines else path


def _uses_torch(module: types.ModuleType) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and any(v is torch for v in vars(module).values())


def _seed_everything(module: types.ModuleType, seed: int) -> None:
    np.random.seed(seed % 2**32)
    if _uses_torch(module):
        sys.modules["torch"].manual_seed(seed)


def _count_key(module: types.ModuleType, path: str, source: str, sizes: dict[str, Any]) -> str | None:
    """Who the counted work belongs to: the reference's path, content and sizes; None when nothing is to be
    counted (the reference declares its peak_work) or cannot be (its work runs in torch, unseen by NumPy)."""
    if callable(getattr(module, "peak_work", None)) or _uses_torch(module):
        return None
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]
    return f"{os.path.abspath(path)}#{digest}#{json.dumps(sizes, sort_keys=True, default=str)}"


def load_reference(path: str, name: str | None = None, variant: str | None = None) -> Task:
    """Read a reference file in either format. A native reference may define size `VARIANTS`
    (e.g. {"full": {...}, "small": {...}}): `make_inputs(rng, **sizes)` then gets the chosen one."""
    module, source = _import_reference(path)
    task_name = name or default_task_name(path) + (f":{variant}" if variant else "")
    rtol = float(getattr(module, "RTOL", DEFAULT_RTOL))
    sizes = _variant_sizes(module, path, variant)
    family = str(getattr(module, "FAMILY", name or default_task_name(path)))
    peak = getattr(module, "peak_work", None)
    peak_fn = (lambda inputs: peak(*inputs)) if callable(peak) else None
    common = {"kernel_args": kernel_arguments(module, path, sizes), "grid": launch_grid(module, path, sizes),
              "count_key": _count_key(module, path, source, sizes)}
    if callable(getattr(module, "make_inputs", None)) and callable(getattr(module, "reference", None)):
        def native_case(seed: int) -> Case:
            inputs = _as_list(_user_call(path, module.make_inputs, np.random.default_rng(seed), **sizes))
            return Case.of(inputs, ReferenceRun(
                lambda wrap: _user_call(path, module.reference, *[wrap(np.array(a, copy=True)) for a in inputs])))

        def native_shapes() -> Case:
            with random_without_data(Tally(shapes_only=True)) as rng:
                inputs = _as_list(without_data(module.make_inputs(rng, **sizes)))
            return Case.of(inputs, ReferenceRun(lambda wrap: module.reference(*[wrap(a) for a in inputs]), True))

        return Task(task_name, native_case, rtol, peak_fn, path, family, tuple(getattr(module, "VARIANTS", ())),
                    draw_shapes=native_shapes, **common)
    missing = [f for f in ("get_inputs", "forward") if not callable(getattr(module, f, None))]
    if missing:
        raise TaskError(f"{path}: a reference needs make_inputs() and reference() (native form) or "
                        f"get_inputs() and forward() (NKIBench form); missing {', '.join(missing)}")
    to_nki = getattr(module, "transform_to_nki_inputs", None)
    from_nki = getattr(module, "transform_nki_outputs", None)

    def bench_case(seed: int) -> Case:
        _seed_everything(module, seed)
        originals = _user_call(path, module.get_inputs)
        originals = list(originals) if isinstance(originals, (tuple, list)) else [originals]
        inputs = _as_list(_user_call(path, to_nki, originals) if callable(to_nki) else originals)
        case = Case.of(inputs, ReferenceRun(
            lambda wrap: _user_call(path, module.forward, *[wrap(o) for o in originals])))
        if callable(from_nki):
            # `reference`, not `case`: a cycle through the case would keep every case's arrays until the
            # collector's next full pass, which the profiler's paused stretches put off for many checks
            reference = case.reference

            def convert(outputs: list[np.ndarray]) -> list[np.ndarray]:
                ref = reference()
                return _as_list(_user_call(path, from_nki, outputs[0] if len(outputs) == 1 else outputs,
                                           ref[0] if len(ref) == 1 else ref))
            case.convert = convert
        return case

    def bench_shapes() -> Case:
        with random_without_data(Tally(shapes_only=True)):
            drawn = module.get_inputs()
            originals = list(drawn) if isinstance(drawn, (tuple, list)) else [drawn]
            inputs = _as_list(without_data(to_nki(originals) if callable(to_nki) else originals))
        return Case.of(inputs, ReferenceRun(lambda wrap: module.forward(*[wrap(o) for o in originals]), True))

    return Task(task_name, bench_case, rtol, peak_fn, path, family, draw_shapes=bench_shapes, **common)


def _sized(module: types.ModuleType, attribute: str, sizes: dict[str, Any]) -> Any:
    value = getattr(module, attribute, None)
    return value(**sizes) if callable(value) else value


def kernel_arguments(module: types.ModuleType, path: str, sizes: dict[str, Any]) -> dict[str, Any]:
    """The reference's KERNEL_ARGS (kernel parameter names with their Python values) and
    KERNEL_ARG_EXPRESSIONS (names with Python expressions evaluated in the kernel's module)."""
    values = _parameter_map(module, path, "KERNEL_ARGS", sizes)
    expressions = _parameter_map(module, path, "KERNEL_ARG_EXPRESSIONS", sizes)
    if not all(isinstance(text, str) for text in expressions.values()):
        raise TaskError(f"{path}: KERNEL_ARG_EXPRESSIONS values must be Python expressions as text, "
                        f"got {expressions!r}")
    both = sorted(set(values) & set(expressions))
    if both:
        raise TaskError(f"{path}: {', '.join(both)} given in both KERNEL_ARGS and KERNEL_ARG_EXPRESSIONS")
    return values | {name: KernelExpression(text) for name, text in expressions.items()}


def _parameter_map(module: types.ModuleType, path: str, attribute: str, sizes: dict[str, Any]) -> dict[str, Any]:
    values = _sized(module, attribute, sizes)
    if values is None:
        return {}
    if not isinstance(values, dict) or not all(isinstance(k, str) and k.isidentifier() for k in values):
        raise TaskError(f"{path}: {attribute} must map kernel parameter names to values, got {values!r}")
    return dict(values)


def launch_grid(module: types.ModuleType, path: str, sizes: dict[str, Any]) -> tuple[int, ...] | None:
    """The reference's GRID (an int or a tuple of positive ints), or None."""
    value = _sized(module, "GRID", sizes)
    if value is None:
        return None
    try:
        return parse_grid(value)
    except ValueError as exc:
        raise TaskError(f"{path}: GRID {exc}") from None


def parse_grid(value: Any) -> tuple[int, ...]:
    """A launch grid from `2`, `(2, 2)` or the command line's `2x2`; ValueError says what is wrong."""
    if isinstance(value, str):
        items: Any = value.lower().split("x")
    else:
        items = value if isinstance(value, (tuple, list)) else (value,)
    try:
        grid = tuple(int(item) for item in items)
    except (TypeError, ValueError):
        raise ValueError(f"must be positive integers such as 4 or (2, 2) or 2x2, got {value!r}") from None
    if not grid or min(grid) < 1:
        raise ValueError(f"must be positive integers such as 4 or (2, 2) or 2x2, got {value!r}")
    return grid


def _variant_sizes(module: types.ModuleType, path: str, variant: str | None) -> dict[str, int]:
    variants = getattr(module, "VARIANTS", None)
    if not variants:
        if variant:
            raise TaskError(f"{path} defines no size variants (asked for {variant!r})")
        return {}
    chosen = variant or next(iter(variants))
    if chosen not in variants:
        raise TaskError(f"{path}: unknown variant {chosen!r}; variants: {', '.join(variants)}")
    return dict(variants[chosen])
