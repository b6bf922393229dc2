"""Profiling a kernel: check it against its task and time it, with the kernel in a sandbox."""

from .profiler import Profiler, SimulatorProfiler, TaskRef
from .remote import RemoteProfiler
from .result import ProfileResult, as_percent, measured_on
from .sandbox import SandboxLimits

__all__ = ["ProfileResult", "Profiler", "RemoteProfiler", "SandboxLimits", "SimulatorProfiler", "TaskRef", "as_percent",
           "measured_on"]
