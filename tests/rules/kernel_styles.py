"""Small kernels of our own in the styles other people write, shared by the rule tests (files in
tests/rules/kernels/, read as text; the rules never import them).

- compiler style (`compiler_*.py`): every tensor declared up front with block dimensions in front
  of the partition dimension, `v12`-style names, full `nl.arange` index expressions, `mask=` on
  every instruction, ISA calls with `engine=nki.isa.unknown_engine` and constants written as
  `np.dtype(np.float32).type(c)`, one long line per instruction;
- the NKI tutorials' style (`tutorial_*.py`): tiles bound per iteration by `nl.load`, slices
  `r * 128:(r + 1) * 128`, nested `nl.*` calls;
- the newer `nki` API (`modern_*.py`): every ISA call writes `dst=`, `nisa.dma_copy` moves data.
"""

from __future__ import annotations

from pathlib import Path

KERNELS = Path(__file__).resolve().parent / "kernels"

SHAPES = {
    "compiler_swish": [(256, 1024)],
    "compiler_momentum": [(200, 512), (200, 512)],
    "tutorial_swish": [(256, 1024)],
    "modern_scale": [(256, 512), (128, 512)],
    "compiler_two_nests": [(256, 1024)],
    "tutorial_buffered": [(256, 512)],
    "compiler_matmul": [(256, 256), (256, 1024)],
    "tutorial_matmul": [(256, 256), (256, 1024)],  # a_t is [K, M]
    "compiler_attention": [(128, 256), (128, 512), (512, 128)],  # q and k transposed, v
    "tutorial_attention": [(128, 256), (128, 512), (512, 128)],
    "compiler_rotary": [(2, 64, 2048), (64, 2048), (64, 2048)],  # x as two halves, cos, sin: 64 rows
    "tutorial_rotary": [(64, 4096)] * 4,
}


def source(name: str) -> str:
    """The text of tests/rules/kernels/NAME.py."""
    return (KERNELS / f"{name}.py").read_text()
