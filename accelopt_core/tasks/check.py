"""The correctness check: run the kernel on several seeds and compare with the reference in full."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..nki import Kernel, RunResult, run_kernel
from .task import Task

DEFAULT_SEED_COUNT = 5


@dataclass
class CheckResult:
    """Worst errors over all seeds; `message` explains the first failure."""

    correct: bool
    seeds: list[int]
    rel_l2_error: float | None = None
    max_abs_error: float | None = None
    message: str | None = None
    run: RunResult | None = field(default=None, repr=False)


def fresh_seeds(count: int = DEFAULT_SEED_COUNT) -> list[int]:
    """Seeds the kernel cannot know in advance."""
    return [secrets.randbelow(2**31) for _ in range(count)]


def compare(outputs: Sequence[np.ndarray | None], expected: Sequence[np.ndarray], rtol: float
            ) -> tuple[float, float, str | None]:
    """Relative L2 error of the whole output (NKIBench's metric), max abs error, and why it fails."""
    if len(outputs) != len(expected):
        return np.inf, np.inf, f"kernel returned {len(outputs)} outputs, reference has {len(expected)}"
    worst_rel = worst_abs = 0.0
    for i, (out, ref) in enumerate(zip(outputs, expected, strict=True)):
        if out is None:
            return np.inf, np.inf, f"output {i} was not produced"
        if out.shape != ref.shape:
            return np.inf, np.inf, f"output {i} has shape {out.shape}, reference {ref.shape}"
        out64, ref64 = out.astype(np.float64), ref.astype(np.float64)
        if not np.all(np.isfinite(out64)):
            bad = int(np.size(out64) - np.count_nonzero(np.isfinite(out64)))
            return np.inf, np.inf, f"output {i} has {bad} NaN/inf values (uninitialised or overflowed)"
        diff = out64 - ref64
        norm = float(np.linalg.norm(ref64))
        rel = float(np.linalg.norm(diff)) / norm if norm > 0 else float(np.linalg.norm(diff))
        worst_rel = max(worst_rel, rel)
        worst_abs = max(worst_abs, float(np.abs(diff).max(initial=0.0)))
    if worst_rel > rtol:
        return worst_rel, worst_abs, f"relative L2 error {worst_rel:.3g} exceeds tolerance {rtol:.3g}"
    return worst_rel, worst_abs, None


def check_kernel(kernel: Kernel, task: Task, seeds: Sequence[int] | None = None, hardware: str = "trn1",
                 rtol: float | None = None) -> CheckResult:
    """Run `kernel` on each seed's inputs and compare with the reference. Stops at the first failure."""
    seeds = list(seeds) if seeds is not None else fresh_seeds()
    tolerance = task.rtol if rtol is None else rtol
    result = CheckResult(True, seeds, 0.0, 0.0)
    for seed in seeds:
        case = task.make_case(seed)
        run = run_kernel(kernel, [np.array(a, copy=True) for a in case.inputs], numeric=True, hardware=hardware)
        result.run = result.run or run
        rel, abs_err, problem = compare(case.convert(run.outputs), case.reference(), tolerance)
        result.rel_l2_error = max(result.rel_l2_error or 0.0, rel)
        result.max_abs_error = max(result.max_abs_error or 0.0, abs_err)
        if problem:
            result.correct = False
            result.message = f"seed {seed}: {problem}"
            break
    return result
