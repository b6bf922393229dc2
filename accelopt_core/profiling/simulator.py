"""The simulator backend: run the kernel on the CPU NKI implementation, check it, time its trace
with the Trainium performance model."""

from __future__ import annotations

import os
import traceback
from collections.abc import Sequence

from ..hardware import HardwareProfile, load_hardware
from ..nki import Kernel, NkiError, TensorSpec, Trace, run_kernel
from ..perfmodel import estimate, peak_percent
from ..tasks import Task
from ..tasks.check import check_kernel
from .result import ProfileResult


def profile_kernel(kernel: Kernel, task: Task, hardware: str = "trn1", check: bool = True,
                   seeds: Sequence[int] | None = None, rtol: float | None = None,
                   kernel_label: str = "") -> ProfileResult:
    """Check (numeric mode, several seeds) then time (the trace of one run) a loaded kernel."""
    label = kernel_label or kernel.__name__
    result = ProfileResult(label, task.name, hardware, "simulator")
    hw = load_hardware(hardware)
    try:
        if check:
            checked = check_kernel(kernel, task, seeds, hardware, rtol)
            result.correct = checked.correct
            result.seeds = checked.seeds
            result.rel_l2_error = checked.rel_l2_error
            result.max_abs_error = checked.max_abs_error
            result.check_message = checked.message
            trace = checked.run.trace if checked.run else _trace_only(kernel, task, hardware)
        else:
            trace = _trace_only(kernel, task, hardware)
    except NkiError as exc:
        result.error = str(exc)
        result.error_line = exc.line
        return result
    except Exception as exc:  # a Python error inside the kernel's own code
        result.error, result.error_line = describe_kernel_exception(exc, kernel.func)
        return result
    _fill_timing(result, trace, task, hw)
    return result


def describe_kernel_exception(exc: BaseException, func: object) -> tuple[str, int | None]:
    """One line naming the kernel line where a Python exception was raised."""
    code = getattr(func, "__code__", None)
    filename = code.co_filename if code else None
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == filename:
            line = lineno
    where = f"{os.path.basename(filename)}:{line}: " if filename and line else ""
    return f"{where}{type(exc).__name__}: {exc}", line


def _trace_only(kernel: Kernel, task: Task, hardware: str) -> Trace:
    specs = [TensorSpec.of(a) for a in task.make_case(0).inputs]
    return run_kernel(kernel, specs, numeric=False, hardware=hardware).trace


def _fill_timing(result: ProfileResult, trace: Trace, task: Task, hw: HardwareProfile) -> None:
    report = estimate(trace, hw)
    data = report.to_dict()
    result.latency_ms = data.pop("latency_ms", None)
    result.bottleneck = data.pop("bottleneck", None)
    result.lines = data.pop("lines", [])
    result.profile = data
    if task.peak_work is not None:
        work = task.peak_work(task.make_case(0).inputs)
        result.peak_percent = peak_percent(report, work.mm_flops, work.vec_flops, work.hbm_bytes, hw)
