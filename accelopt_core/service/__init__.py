"""The remote profiling service: an HTTP API (FastAPI) over worker processes or Ray tasks that check
and profile kernels on a Trainium host's NeuronCores or on the simulator.

FastAPI, uvicorn and Ray are optional dependencies: nothing here imports them until used.
"""

from __future__ import annotations

from typing import Any

from .spec import EvaluatorConfig, JobSpec, SpecError, validate_spec

__all__ = ["EvaluatorConfig", "JobSpec", "RayProfiler", "SpecError", "create_app", "serve", "validate_spec"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "serve":
        from .server import serve

        return serve
    if name == "RayProfiler":
        from .ray_backend import RayProfiler

        return RayProfiler
    raise AttributeError(name)
