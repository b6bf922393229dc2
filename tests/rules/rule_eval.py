"""Helpers for the rule tests: run a kernel given as source numerically, time it with the
performance model (trace only), and build the ProfileResult a rule plans from, all in process."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import TensorSpec, find_kernel, load_module, run_kernel
from accelopt_core.perfmodel import estimate
from accelopt_core.profiling import ProfileResult

_counter = itertools.count()


def _kernel(source: str, tmp: Path, function: str | None = None):
    path = tmp / f"kernel_{next(_counter)}.py"
    path.write_text(source)
    return find_kernel(load_module(source, str(path), name=f"rule_test_kernel_{next(_counter)}"), function)


def outputs(source: str, arrays: Sequence[np.ndarray], tmp: Path) -> list[np.ndarray]:
    """The kernel's outputs on these inputs (numeric simulation)."""
    result = run_kernel(_kernel(textwrap.dedent(source), tmp), [a.copy() for a in arrays])
    return [np.asarray(o) for o in result.outputs]


def trace(source: str, shapes: Sequence[tuple[int, ...]], tmp: Path):
    """The instruction trace of a trace-only run at `shapes` (FP32 inputs)."""
    specs = [TensorSpec(tuple(s), np.dtype("float32")) for s in shapes]
    return run_kernel(_kernel(textwrap.dedent(source), tmp), specs, numeric=False).trace


def profile(source: str, shapes: Sequence[tuple[int, ...]], tmp: Path, task: str | None = None,
            hardware: str = "trn1", checked: Sequence[tuple[int, ...]] | None = None,
            function: str | None = None) -> ProfileResult:
    """The profile a rule sees: the performance model's report of a trace-only run (FP32 inputs) at
    `shapes`, as if checked at `checked` (the search checks on a task's small size); `function`: the
    kernel, named in a file of several."""
    specs = [TensorSpec(tuple(s), np.dtype("float32")) for s in shapes]
    run = run_kernel(_kernel(textwrap.dedent(source), tmp, function), specs, numeric=False)
    report = estimate(run.trace, load_hardware(hardware)).to_dict()
    result = ProfileResult("kernel.py", task, hardware, "simulator", correct=True, function=function)
    result.input_shapes = {"timed": [list(s) for s in shapes]}
    if checked:
        result.input_shapes["checked"] = [list(s) for s in checked]
    result.latency_ms = report.pop("latency_ms", None)
    result.bottleneck = report.pop("bottleneck", None)
    result.lines = report.pop("lines", [])
    result.profile = report
    return result


def assert_same(before: str, after: str, arrays: Sequence[np.ndarray], tmp: Path, rtol: float = 2e-5) -> None:
    """Both kernels give the same outputs on `arrays` (relative L2 within the task tolerance)."""
    for a, b in zip(outputs(before, arrays, tmp), outputs(after, arrays, tmp), strict=True):
        error = np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(a.astype(np.float64)), 1e-30)
        assert error <= rtol, f"relative L2 error {error:.3g}"
