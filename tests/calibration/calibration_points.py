"""Published Trainium measurements and the model's predictions for our own kernels of the same shape.

Shared by tests/calibration/test_calibration.py (one assertion per point) and
benchmarks/calibration.py (the whole table, rank correlation and median error). The kernels in
kernels/ were written for this calibration from the tutorials' prose descriptions; only the
measured latencies come from the publications (fact sheet docs/fact-sheet.md, section D.2).

Every prediction is a trace-only simulator run (no data) followed by `estimate` on trn1, memoised
so a test module or the benchmark pays for each kernel once.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
from accelopt_core.perfmodel import PerfReport, estimate

KERNELS = Path(__file__).resolve().parent / "kernels"
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)

# Matmul tutorial (fact sheet D.2): trn1, one NeuronCore, BF16, lhsT [K, M] and rhs [K, N].
MATMUL_K, MATMUL_M, MATMUL_N = 8192, 4096, 8192
# Fused Mamba tutorial (fact sheet D.2): batch 1, state 16; hardware probably trn1 (UNCERTAIN).
MAMBA_STATES = 16


@dataclass(frozen=True)
class Point:
    """One published latency and the kernel and shape that reproduce it here."""

    name: str  # short label: "matmul v0", "mamba v2 seq 8192", ...
    kernel: str  # file stem in kernels/
    shape: tuple[int, ...]  # matmul: (K, M, N); mamba: (channels, seq)
    measured_ms: float
    source: str
    published: str = ""  # the function of the tutorial's own file that was measured ("": none of its own)

    @property
    def family(self) -> str:
        """The tutorial the point comes from: "matmul" or "mamba"."""
        return self.kernel.split("_")[0]

    @property
    def shape_label(self) -> str:
        if self.kernel.startswith("matmul"):
            k, m, n = self.shape
            return f"K{k} M{m} N{n} bf16"
        channels, seq = self.shape
        return f"ch{channels} seq{seq} fp32"


_MM = "matmul tutorial, trn1 BF16 (fact sheet D.2)"
_MAMBA = "fused Mamba tutorial, probably trn1 (fact sheet D.2)"
_SCALING = "fused Mamba tutorial seq-scaling table (fact sheet D.2)"
_MM_SHAPE = (MATMUL_K, MATMUL_M, MATMUL_N)

MATMUL_POINTS: tuple[Point, ...] = (
    Point("matmul v0 naive", "matmul_v0_naive", _MM_SHAPE, 51.80, _MM, "nki_matmul_tiled_"),
    Point("matmul v1 hoisted", "matmul_v1_hoisted", _MM_SHAPE, 42.96, _MM, "nki_matmul_hoist_load_"),
    Point("matmul v2 blocked free dims", "matmul_v2_blocked", _MM_SHAPE, 22.07, _MM,
          "nki_matmul_block_free_dimension_"),
    Point("matmul v3 blocked K", "matmul_v3_blocked_k", _MM_SHAPE, 6.97, _MM, "nki_matmul_fully_optimized_"),
)

MAMBA_POINTS: tuple[Point, ...] = (
    Point("mamba v1 ch256", "mamba_v1", (256, 512), 0.17293, _MAMBA, "mamba_v1"),
    Point("mamba v1 ch4096", "mamba_v1", (4096, 512), 2.34, _MAMBA, "mamba_v1"),
    Point("mamba v2 seq512", "mamba_v2", (4096, 512), 1.61, _MAMBA, "mamba_v2"),
    Point("mamba v2 seq8192", "mamba_v2", (4096, 8192), 53.33, _MAMBA, "mamba_v2"),
    Point("mamba v3 seq8192", "mamba_v3", (4096, 8192), 27.8, _MAMBA, "mamba_v3"),
)

# The scaling table (channels 4096); seq 512 and v3/v2 at 8192 duplicate the points above
# (the table rounds them: 1.6, 52.2, 27.8), so only the other rows are listed.
_SCALING_ROWS = ((1024, 4.4, 3.3), (2048, 8.9, 6.6), (3072, 13.1, 10.1), (4096, 17.6, 13.3),
                 (5120, 23.7, 17.3), (6144, 27.5, 19.6), (7168, 41.3, 24.2))
SCALING_POINTS: tuple[Point, ...] = (
    Point("mamba v3 seq512", "mamba_v3", (4096, 512), 1.6, _SCALING, "mamba_v3"),
    *(Point(f"mamba {version} seq{seq}", f"mamba_{version}", (4096, seq), ms, _SCALING, f"mamba_{version}")
      for seq, v2_ms, v3_ms in _SCALING_ROWS
      for version, ms in (("v2", v2_ms), ("v3", v3_ms))),
)

ALL_POINTS: tuple[Point, ...] = MATMUL_POINTS + MAMBA_POINTS + SCALING_POINTS

# The tutorial tables were measured with the 2024 compiler (Neuron SDK 2.20). Points the calibration set
# (docs/calibration.md, trn1, 2025 compiler) contradicts are printed by benchmarks/calibration.py but no
# longer pinned by tests/calibration; each says which measurement of the calibration set overrides it.
_TWO_SBUF_OPERANDS = ("2024 compiler: mamba v2 past seq 512 was slow from two-SBUF-operand tensor_tensor at 2N "
                      "and broadcast copies on Vector; the calibration set (silu, adamw, matmul; 2025) measures "
                      "those at N and on Scalar (trn1.toml)")
SUPERSEDED: dict[str, str] = {
    "matmul v0 naive": ("2024 compiler: v0 reloads the same operand tiles in every iteration; the calibration "
                        "set's add_rmsnorm_matmul (2025) shows the compiler loads such repeats once "
                        "(perfmodel/allocator.py)"),
    **{name: ("2024 compiler: BF16 DMA at half the byte rate; the 2025 compiler moved the same tutorial's BF16 "
                    "tiles at >= 208 GB/s (shared/calibration/autocomp 2_gemm/00: 20.99 ms for the code the 2024 "
                    "table gives 51.80 ms; trn1.toml engine_element_rate)")
       for name in ("matmul v1 hoisted", "matmul v2 blocked free dims")},
    "mamba v1 ch256": ("2024 compiler: two channel tiles of tensor_tensor-bound work, 2N in the 2024 ISA table, "
                       "N in the calibration set (silu, adamw; trn1.toml)"),
    **{name: _TWO_SBUF_OPERANDS for name in (
        "mamba v2 seq8192", "mamba v2 seq1024", "mamba v2 seq2048", "mamba v2 seq3072", "mamba v2 seq4096",
        "mamba v2 seq5120", "mamba v2 seq6144", "mamba v2 seq7168")},
}

# The tutorials' own files (aws-neuron/nki-samples), where the `published` functions of the points live
PUBLISHED_FILES = {
    "matmul": "src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py",
    "mamba": "src/nki_samples/tutorials/fused_mamba/mamba_nki_kernels.py",
}

# perf guide Opt #5a (fact sheet A.5): dependent 1-element ScalarE instructions issue 264 cycles apart
SCALAR_CHAIN_INTERVAL_CYCLES = 264


def input_specs(point: Point) -> list[TensorSpec]:
    if point.kernel.startswith("matmul"):
        k, m, n = point.shape
        return [TensorSpec((k, m), BF16), TensorSpec((k, n), BF16)]
    channels, seq = point.shape
    states = MAMBA_STATES
    return [TensorSpec((1, channels, seq), F32), TensorSpec((1, channels, seq), F32),
            TensorSpec((channels, states), F32), TensorSpec((1, states, seq), F32),
            TensorSpec((1, states, seq), F32)]


def _estimate(point: Point, path: Path, function: str | None, hardware: str) -> PerfReport:
    """The model's report for `function` of the file at `path`, run trace-only at the point's shape."""
    kernel = load_kernel(str(path), function)
    trace = run_kernel(kernel, input_specs(point), numeric=False).trace
    return estimate(trace, load_hardware(hardware))


@functools.cache
def report(point: Point, hardware: str = "trn1") -> PerfReport:
    """The model's report for the point's kernel (trace-only run, memoised)."""
    return _estimate(point, KERNELS / f"{point.kernel}.py", None, hardware)


def published_file(point: Point) -> str:
    """The tutorial file, relative to the samples repository, that holds the point's published kernel."""
    return PUBLISHED_FILES[point.family]


def published_report(point: Point, checkout: Path, hardware: str = "trn1") -> PerfReport:
    """The model's report for the tutorial's own kernel of the point, as its authors wrote it, read from
    `checkout` (a copy of the samples repository); trace-only like `report`."""
    return _estimate(point, checkout / published_file(point), point.published, hardware)


def predicted_ms(point: Point) -> float:
    return report(point).latency_ms


def error_percent(point: Point) -> float:
    """Signed relative error of the prediction, in percent of the measurement."""
    return 100.0 * (predicted_ms(point) - point.measured_ms) / point.measured_ms


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2.0
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy) if sx and sy else 0.0
