"""The result of profiling one kernel: the contract every backend, the CLI, the search, the
language server and the service share (docs/architecture.md, "Contracts")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..hardware import HardwareProfileError, load_hardware

# The version of the dict `to_dict` writes. 2: every `*_percent` field of `profile` is a fraction (0.739 means
# 73.9 %), the scale of neuron-profile's summary, whichever backend measured. Dicts without it are version 1,
# where the simulator wrote those fields in percent and the Neuron backend its `benchmark_spread_percent`.
# `peak_percent` (our own field, the NKIBench metric) is in percent in both.
RESULT_FORMAT = 2
PERCENT_SUFFIX = "_percent"
CANCELLED = "evaluation cancelled"  # the error of a run stopped on request: no verdict on the kernel


def as_percent(fraction: float | None) -> float | None:
    """A `*_percent` field (a fraction) in percent, for text people read."""
    return None if fraction is None else 100.0 * fraction


def measured_on(result: ProfileResult) -> str:
    """Where the result's numbers come from, from its own backend: "simulated trn1" (the performance model;
    "simulated trn3, uncalibrated" when no measurement backs that profile) or "measured on trn1 (host)" (a
    Trainium host's NeuronCore, also when a profiling service measured it)."""
    if result.backend == "simulator":
        return f"simulated {result.hardware}" + ("" if result.calibrated is not False else ", uncalibrated")
    if result.backend == "neuron":
        return f"measured on {result.hardware} (host)"
    return f"{result.hardware}, {result.backend} backend"  # a remote job that failed before any backend ran


def _fractions_from_format_1(profile: dict[str, Any], backend: str | None) -> dict[str, Any]:
    """A version-1 profile with its percent-scaled `*_percent` fields brought to fractions."""
    def scaled(name: str) -> bool:
        return name.endswith(PERCENT_SUFFIX) and (backend == "simulator" or name == "benchmark_spread_percent")

    def fraction(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: fraction(v) for k, v in value.items()}
        return value / 100.0 if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    return {name: fraction(value) if scaled(name) else value for name, value in profile.items()}


@dataclass
class ProfileResult:
    """One kernel on one hardware generation. Timing fields are None when the kernel did not run;
    `correct` is None when it was not checked."""

    kernel: str
    task: str | None
    hardware: str
    backend: str
    function: str | None = None  # the kernel function that ran, when the file has several and one was named
    correct: bool | None = None
    latency_ms: float | None = None
    peak_percent: float | None = None
    bottleneck: str | None = None
    bound: str | None = None  # what limits the task at peak: "matmul", "vector" or "memory"
    # the work the peak is computed from: {mm_flops, vec_flops, hbm_bytes, counted}, counted when it is the
    # reference's own NumPy work rather than a peak_work it declares
    peak_work: dict[str, Any] | None = None
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
    nki_api: str | None = None  # the NKI the kernel is written for, read from its source ("NKI 0.7+ (...)")
    # why the kernel is not checked although it did nothing wrong: the trusted side ran out of its own limit
    # (`the check needs more than 300 s here`); `unchecked_limit` names it, "seconds" or "memory"
    unchecked: str | None = None
    unchecked_limit: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def cancelled(self) -> bool:
        """Stopped on request before a verdict: says nothing about the kernel."""
        return self.error == CANCELLED

    @property
    def calibrated(self) -> bool | None:
        """Whether the simulator priced this result with a calibrated hardware profile; None for numbers a
        device measured, or a profile that cannot be read here."""
        if self.backend != "simulator":
            return None
        try:
            return load_hardware(self.hardware).calibrated
        except HardwareProfileError:
            return None

    @property
    def peak_counted(self) -> bool:
        """The peak comes from the reference's own NumPy work, counted while it ran (no declared peak_work)."""
        return bool(self.peak_work and self.peak_work.get("counted"))

    def unchecked_text(self, seconds_knob: str, memory_knob: str) -> str:
        """`unchecked: the check needs more than 60 s here (raise it with --seconds)`, naming the knob of the
        front end that shows it; empty when the kernel is not unchecked for a limit of ours."""
        if not self.unchecked:
            return ""
        knob = memory_knob if self.unchecked_limit == "memory" else seconds_knob
        return f"unchecked: {self.unchecked} (raise it with {knob})"

    def bound_text(self) -> str:
        """`the task is matmul-bound at peak`, and where its work came from when it was counted; for people."""
        if not self.bound:
            return ""
        counted = ", its work counted from the reference's NumPy" if self.peak_counted else ""
        return f"the task is {self.bound}-bound at peak{counted}"

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON object: our fields, then the neuron-profile summary fields, then `lines`."""
        head = {
            "result_format": RESULT_FORMAT,
            "kernel": self.kernel,
            "function": self.function,
            "task": self.task,
            "hardware": self.hardware,
            "backend": self.backend,
            "calibrated": self.calibrated,
            "latency_ms": self.latency_ms,
            "correct": self.correct,
            "peak_percent": self.peak_percent,
            "bottleneck": self.bottleneck,
            "bound": self.bound,
            "peak_work": self.peak_work,
            "rel_l2_error": self.rel_l2_error,
            "max_abs_error": self.max_abs_error,
            "seeds": self.seeds,
            "check_message": self.check_message,
            "error": self.error,
            "error_line": self.error_line,
            "input_shapes": self.input_shapes,
            "nki_api": self.nki_api,
            "unchecked": self.unchecked,
            "unchecked_limit": self.unchecked_limit,
        }
        return {**head, **self.profile, "lines": self.lines}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ProfileResult:
        own = {k: data.get(k) for k in ("kernel", "function", "task", "hardware", "backend", "latency_ms", "correct",
                                         "peak_percent", "bottleneck", "bound", "peak_work", "rel_l2_error",
                                         "max_abs_error",
                                         "check_message", "error", "error_line", "nki_api", "unchecked",
                                         "unchecked_limit")}
        skip = set(own) | {"seeds", "lines", "input_shapes", "result_format", "calibrated"}
        profile = {k: v for k, v in data.items() if k not in skip}
        version = data.get("result_format")
        if not isinstance(version, int) or version < 2:
            profile = _fractions_from_format_1(profile, own["backend"])
        return ProfileResult(**own, seeds=list(data.get("seeds") or []), lines=list(data.get("lines") or []),
                             input_shapes=dict(data.get("input_shapes") or {}), profile=profile)
