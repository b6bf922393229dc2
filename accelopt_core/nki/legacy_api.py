"""`neuronxcc.nki` (legacy NKI): decorators and entry points that run kernels on the simulator."""

from __future__ import annotations

from typing import Any

from . import compiler, isa, language, typing
from .errors import missing_api
from .runner import Kernel, jit_decorator, run_kernel

jit = jit_decorator("legacy")
trace = jit
baremetal = jit
benchmark = jit
profile = jit
simulate = jit


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a kernel on NumPy inputs and return its NumPy outputs."""
    kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel, "legacy")
    outputs = run_kernel(kernel, args, kwargs, numeric=True).outputs
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


tensor = typing.tensor  # `def kernel(x: nki.tensor)`: an annotation only

__getattr__ = missing_api("nki")


__all__ = [
    "baremetal",
    "benchmark",
    "compiler",
    "isa",
    "jit",
    "language",
    "profile",
    "simulate",
    "simulate_kernel",
    "tensor",
    "trace",
    "typing",
]
