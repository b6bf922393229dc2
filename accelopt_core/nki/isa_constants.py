"""`neuronxcc.nki.isa.constants` / `nki.isa.constants`: the ISA's configuration enums."""

from __future__ import annotations

from .errors import missing_api
from .isa import dge_mode, dma_engine, oob_mode  # noqa: F401  (re-exported NKI names)
from .modern.isa import matmul_perf_mode  # noqa: F401

__getattr__ = missing_api("nki.isa.constants")
