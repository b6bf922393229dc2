"""The newer top-level `nki` package: `nisa.*` take `dst=` first and `nisa.dma_copy` moves data."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import compiler, typing
from ..errors import missing_api
from ..runner import Kernel, jit_decorator, run_kernel
from . import isa, language, lnc

jit = jit_decorator("modern")
baremetal = jit
benchmark = jit
profile = jit


def simulate(kernel: Any) -> Any:
    """`nki.simulate(kernel)(*arrays)`: run on NumPy inputs, return NumPy outputs."""
    kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel, "modern")

    def run(*args: Any, **kwargs: Any) -> Any:
        outputs = run_kernel(kernel, args, kwargs, numeric=True, api="modern").outputs
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    return run


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    return simulate(kernel)(*args, **kwargs)


tensor = typing.tensor  # `def kernel(x: nki.tensor)`: an annotation only
dtype = np.dtype  # `data_type: nki.dtype` (library dataclass fields); the simulator's dtypes are NumPy's

__getattr__ = missing_api("nki")


__all__ = [
    "baremetal",
    "benchmark",
    "compiler",
    "dtype",
    "isa",
    "jit",
    "language",
    "lnc",
    "profile",
    "simulate",
    "simulate_kernel",
    "tensor",
    "typing",
]
