"""What a sandboxed worker executes: run the kernel, trace-only, at every size the trusted side asks
for, and hand back each run's recorded trace (its tape, nki/tape.py) as plain data. Nothing else.

The worker sees the inputs' shapes and dtypes (and the values of 0-d scalar inputs, which reach the
kernel as Python numbers), never their data: it computes no outputs, no timing and no facts for the
guards. The trusted side replays each tape on its own inputs, judges the outputs and times the
replay's trace (verdict.py), so nothing this process says decides its own verdict, and a kernel has no
data to encode an answer from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..nki import Kernel, NkiError, TensorSpec, run_kernel
from ..nki.runner import Launch
from ..nki.tape import TapeError, TapeWriter
from ..nki.trace import Trace
from .errors import describe_kernel_exception
from .handback import OPTIONAL_INT, OPTIONAL_TEXT, MalformedResultError, TapeFile, save_array, typed


@dataclass(frozen=True)
class Run:
    """One recording the trusted side asks for: the inputs' shapes (a TensorSpec each) and the launch."""

    specs: tuple[TensorSpec, ...]
    launch: Launch = field(default_factory=Launch)


@dataclass
class Recording:
    """What the worker hands back: the file of each run's tape (in the job folder), or the kernel's error."""

    traces: list[str] = field(default_factory=list)
    error: str | None = None
    error_line: int | None = None

    def plain(self) -> dict[str, Any]:
        return {"traces": self.traces, "error": self.error, "error_line": self.error_line}

    @staticmethod
    def from_plain(data: dict[str, Any]) -> Recording:
        """A child's result (handback.read_result) with every field of the type it must have."""
        fields = typed(data, {"traces": (list,), "error": OPTIONAL_TEXT, "error_line": OPTIONAL_INT})
        if not all(isinstance(name, str) for name in fields.get("traces", [])):
            raise MalformedResultError("a trace file name is not text")
        return Recording(**fields)


def record(kernel: Kernel, runs: Sequence[Run], hardware: str, output_dir: str) -> Recording:
    """Run the kernel trace-only once per run, recording, and leave each tape in `output_dir`, written as
    it is recorded (the trusted side may replay it meanwhile)."""
    result = Recording()
    try:
        for index, run in enumerate(runs):
            stream = _TapeStream(output_dir, index)
            try:
                traced = run_kernel(kernel, list(run.specs), run.launch.kernel_args, numeric=False, hardware=hardware,
                                    grid=run.launch.grid, record=True, on_call=stream.after_call)
                stream.finish(traced.trace)
            finally:
                stream.file.close()
            result.traces.append(stream.file.name)
    except NkiError as exc:
        result.traces, result.error, result.error_line = [], str(exc), exc.line
    except TapeError as exc:  # an argument no trace can carry: the kernel cannot be checked
        result.traces, result.error = [], f"the kernel's trace cannot be recorded: {exc}"
    except Exception as exc:  # a Python error in the kernel's own code
        result.traces = []
        result.error, result.error_line = describe_kernel_exception(exc, kernel.func)
    return result


CHUNK_ENTRIES = 2048  # tape entries per chunk: the trusted side's replay trails the recording by one at most


class _TapeStream:
    """One run's tape, written to its file a chunk at a time while the kernel runs."""

    def __init__(self, folder: str, index: int):
        self.file = TapeFile(folder, index)
        self.writer: TapeWriter | None = None
        self.failed: TapeError | None = None  # raised at the end, not into the kernel's code

    def after_call(self, trace: Trace) -> None:
        if self.writer is None:
            self.writer = TapeWriter(trace)
        if self.failed is None and self.writer.pending() >= CHUNK_ENTRIES:
            try:
                self.file.write(self.writer.chunk())
            except TapeError as exc:
                self.failed = exc

    def finish(self, trace: Trace) -> None:
        if self.failed is not None:
            raise self.failed
        self.file.write((self.writer or TapeWriter(trace)).chunk(last=True))


def spill(outputs: Sequence[np.ndarray], folder: str, case: int) -> list[dict[str, Any]]:
    """Write one case's outputs as plain .npy files (handback.py); their descriptors go into the result
    (the neuron backend, whose outputs come from the device)."""
    return [save_array(folder, f"out-{case}-{i}.npy", np.asarray(array)) for i, array in enumerate(outputs)]
