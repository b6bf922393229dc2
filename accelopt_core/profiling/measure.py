"""Running a kernel for a profile: its outputs on each case's inputs, the timing of one trace, and
the facts the anti-cheating guards need. This is what a sandboxed worker executes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..hardware import load_hardware
from ..nki import Kernel, NkiError, RunResult, TensorSpec, Trace, run_kernel
from ..nki.runner import Launch, storage_root
from ..perfmodel import estimate
from .errors import describe_kernel_exception
from .handback import OPTIONAL_INT, OPTIONAL_TEXT, MalformedResultError, save_array, typed


@dataclass
class Measurement:
    """What one kernel did: outputs per case, performance-model report, trace facts, or an error."""

    outputs: list[list[Any]] = field(default_factory=list)  # per case: arrays (descriptors in a sandbox child)
    report: dict[str, Any] | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_line: int | None = None


    def plain(self) -> dict[str, Any]:
        """The fields as JSON for the trusted side (the outputs already spilled as descriptors)."""
        return {"outputs": self.outputs, "report": self.report, "facts": self.facts, "error": self.error,
                "error_line": self.error_line}

    @staticmethod
    def from_plain(data: dict[str, Any]) -> Measurement:
        """A child's result (handback.read_result) with every field of the type it must have."""
        fields = typed(data, {"outputs": (list,), "report": (dict, type(None)), "facts": (dict,),
                              "error": OPTIONAL_TEXT, "error_line": OPTIONAL_INT})
        facts = fields.get("facts", {})
        if not all(isinstance(v, (int, float, type(None))) for v in facts.values()):
            raise MalformedResultError("a trace fact is not a number")
        return Measurement(**fields)


PLAIN_LAUNCH = Launch()  # no Python arguments, no grid


def trace_facts(run: RunResult) -> dict[str, Any]:
    """Counts the guards compare with a task's analytic minimum, and misuse the trace reveals."""
    summary = run.trace.summary()
    return {
        "instruction_count": summary["instruction_count"],
        "hardware_flops": summary["hardware_flops"],
        "transpose_flops": summary["transpose_flops"],
        "hbm_read_bytes": summary["hbm_read_bytes"],
        "hbm_write_bytes": summary["hbm_write_bytes"],
        "returned_input": run.returned_input,
        "uninitialized_read": first_uninitialized_read(run.trace, run.input_ids),
    }


def first_uninitialized_read(trace: Trace, input_ids: set[int]) -> int | None:
    """Line of the first read of a kernel-allocated HBM tensor (e.g. its own output) before any write.
    Reshaped views count as the tensor they view."""
    written: set[int] = set()
    for inst in trace.instructions:
        for access in inst.reads:
            root = storage_root(trace, access.tensor)
            if access.buffer == "hbm" and root not in input_ids and root not in written:
                info = trace.tensors.get(root)
                if info is not None and info.name != "constant":
                    return inst.line
        for access in inst.writes:
            written.add(storage_root(trace, access.tensor))
    return None


def spill(outputs: Sequence[np.ndarray], folder: str, case: int) -> list[dict[str, Any]]:
    """Write one case's outputs as plain .npy files (handback.py); their descriptors go into the result."""
    return [save_array(folder, f"out-{case}-{i}.npy", np.asarray(array)) for i, array in enumerate(outputs)]


def measure(kernel: Kernel, check_inputs: Sequence[Sequence[np.ndarray]], timing_specs: Sequence[TensorSpec],
            hardware: str, output_dir: str | None = None, check_launch: Launch = PLAIN_LAUNCH,
            timing_launch: Launch = PLAIN_LAUNCH) -> Measurement:
    """Run numerically on every case, then time the trace of the timing shapes (reusing the first
    numeric run when the shapes and the launch are the same, else a trace-only run)."""
    result = Measurement()
    try:
        timing_run: RunResult | None = None
        for inputs in check_inputs:
            run = run_kernel(kernel, [np.array(a, copy=True) for a in inputs], check_launch.kernel_args,
                             numeric=True, hardware=hardware, grid=check_launch.grid)
            produced = [o for o in run.outputs if o is not None]
            result.outputs.append(spill(produced, output_dir, len(result.outputs)) if output_dir else produced)
            run.outputs = []  # outputs of large tasks are gigabytes: keep at most one case in memory
            if (timing_run is None and check_launch == timing_launch
                    and [TensorSpec.of(a) for a in inputs] == list(timing_specs)):
                timing_run = run
        if timing_run is None:
            timing_run = run_kernel(kernel, list(timing_specs), timing_launch.kernel_args, numeric=False,
                                    hardware=hardware, grid=timing_launch.grid)
    except NkiError as exc:
        result.error, result.error_line = str(exc), exc.line
        return result
    except Exception as exc:  # a Python error in the kernel's own code
        result.error, result.error_line = describe_kernel_exception(exc, kernel.func)
        return result
    result.facts = trace_facts(timing_run)
    result.report = estimate(timing_run.trace, load_hardware(hardware)).to_dict()
    if timing_run.trace.launches:
        result.report["spmd"] = spmd_summary(timing_run.trace)
    return result


def spmd_summary(trace: Trace) -> dict[str, Any]:
    """What the profile says about SPMD launches: their grids and how the programs were scheduled."""
    programs = len(trace.program_starts)
    return {"grids": [list(grid) for grid in trace.launches], "programs": programs,
            "schedule": f"{programs} SPMD programs run one after another on one NeuronCore"}
