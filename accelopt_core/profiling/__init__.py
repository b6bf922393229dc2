"""Profiling a kernel: check it against its task and time it on a backend (the simulator for now)."""

from .result import ProfileResult
from .simulator import profile_kernel

__all__ = ["ProfileResult", "profile_kernel"]
