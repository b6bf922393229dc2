"""The result of profiling one kernel: the contract every backend, the CLI, the search, the
language server and the service share (shared/design.md, "Contracts")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ProfileResult:
    """One kernel on one hardware generation. Timing fields are None when the kernel did not run;
    `correct` is None when it was not checked."""

    kernel: str
    task: str | None
    hardware: str
    backend: str
    correct: bool | None = None
    latency_ms: float | None = None
    peak_percent: float | None = None
    bottleneck: str | None = None
    bound: str | None = None  # what limits the task at peak: "matmul", "vector" or "memory"
    rel_l2_error: float | None = None
    max_abs_error: float | None = None
    seeds: list[int] = field(default_factory=list)
    check_message: str | None = None
    profile: dict[str, Any] = field(default_factory=dict)  # neuron-profile summary field names
    lines: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    error_line: int | None = None
    # the inputs' shapes the kernel ran with: "timed" (the timing size), "checked" (the check size, if checked)
    input_shapes: dict[str, list[list[int]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON object: our fields, then the neuron-profile summary fields, then `lines`."""
        head = {
            "kernel": self.kernel,
            "task": self.task,
            "hardware": self.hardware,
            "backend": self.backend,
            "latency_ms": self.latency_ms,
            "correct": self.correct,
            "peak_percent": self.peak_percent,
            "bottleneck": self.bottleneck,
            "bound": self.bound,
            "rel_l2_error": self.rel_l2_error,
            "max_abs_error": self.max_abs_error,
            "seeds": self.seeds,
            "check_message": self.check_message,
            "error": self.error,
            "error_line": self.error_line,
            "input_shapes": self.input_shapes,
        }
        return {**head, **self.profile, "lines": self.lines}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ProfileResult:
        own = {k: data.get(k) for k in ("kernel", "task", "hardware", "backend", "latency_ms", "correct",
                                         "peak_percent", "bottleneck", "bound", "rel_l2_error", "max_abs_error",
                                         "check_message", "error", "error_line")}
        skip = set(own) | {"seeds", "lines", "input_shapes"}
        return ProfileResult(**own, seeds=list(data.get("seeds") or []), lines=list(data.get("lines") or []),
                             input_shapes=dict(data.get("input_shapes") or {}),
                             profile={k: v for k, v in data.items() if k not in skip})
