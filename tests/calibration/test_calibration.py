"""The trn1 performance model against published Trainium measurements (fact sheet D.2, A.5, A.6).

Each test names the measured value and its source, computes the model's prediction for our own
kernel of the same shape (trace-only simulator run, see calibration_points.py) and checks the
relative error against a stated tolerance: 25% unless a docstring says why a point needs more.
The ordering tests check that the model ranks each optimisation chain the way the hardware did,
which is what the search relies on. `python benchmarks/calibration.py` prints the full table.
"""

from __future__ import annotations

import itertools

import pytest
from calibration_points import (
    F32,
    KERNELS,
    MAMBA_POINTS,
    MATMUL_POINTS,
    SCALAR_CHAIN_INTERVAL_CYCLES,
    SCALING_POINTS,
    SUPERSEDED,
    Point,
    predicted_ms,
    report,
)

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
from accelopt_core.nki.trace import Access, Instruction, Op, TensorInfo, Trace
from accelopt_core.perfmodel import CostModel, estimate
from accelopt_core.perfmodel.scheduler import schedule

TOLERANCE = 0.25


def _point(points: tuple[Point, ...], name: str) -> Point:
    return next(p for p in points if p.name == name)


def _check(point: Point, tolerance: float = TOLERANCE) -> float:
    predicted = predicted_ms(point)
    if point.name in SUPERSEDED:
        # measured with the 2024 compiler, which was slower where the reason says; the model prices the
        # 2025 compiler of the calibration set, so it must come out faster than that measurement
        assert predicted < point.measured_ms, f"{point.name}: {SUPERSEDED[point.name]}; predicted {predicted:.3f} ms"
        return predicted
    error = (predicted - point.measured_ms) / point.measured_ms
    assert abs(error) <= tolerance, (
        f"{point.name} ({point.shape_label}): measured {point.measured_ms} ms ({point.source}), "
        f"predicted {predicted:.3f} ms, error {100 * error:+.1f}% exceeds {100 * tolerance:.0f}%")
    return predicted


# ------------------------------------------------------------------ matmul tutorial (trn1, BF16)
def test_matmul_v0_naive() -> None:
    """Measured 51.80 ms: both operand tiles loaded inside the K loop; DMA-bound."""
    _check(_point(MATMUL_POINTS, "matmul v0 naive"))


def test_matmul_v1_hoisted() -> None:
    """Measured 42.96 ms: stationary lhsT column block loaded once per M tile; still DMA-bound."""
    _check(_point(MATMUL_POINTS, "matmul v1 hoisted"))


def test_matmul_v2_blocked_free_dims() -> None:
    """Measured 22.07 ms: 2x2 tiles per block (BLOCK_M 256, BLOCK_N 1024); half the rhs traffic."""
    _check(_point(MATMUL_POINTS, "matmul v2 blocked free dims"))


def test_matmul_v3_blocked_k() -> None:
    """Measured 6.97 ms (85% HFU): 16 x 2 x 8 tiles per block, K blocks in a sequential_range loop
    with the partial result accumulated in SBUF. Only right if the K blocks overlap their loads,
    matmuls and read-outs (no whole-iteration barrier for sequential_range)."""
    _check(_point(MATMUL_POINTS, "matmul v3 blocked K"))


def test_matmul_chain_is_ranked_like_the_hardware() -> None:
    """Each tutorial optimisation made the kernel faster: v0 > v1 > v2 > v3 in latency. v0 is left out:
    with the 2025 compiler keeping its repeated loads it is v1 (SUPERSEDED says why); v1 and v2 are ranked
    though their 2024 times are superseded too (BF16 DMA then ran at half rate)."""
    latencies = [predicted_ms(p) for p in MATMUL_POINTS if p.name != "matmul v0 naive"]
    assert len(latencies) == 3 and latencies == sorted(latencies, reverse=True), latencies


# ------------------------------------------------------------------ fused Mamba tutorial
def test_mamba_v1_small() -> None:
    """Measured 172.93 us at channels 256, seq 512 (VectorE 98.7% active). Two channel tiles only,
    so pipeline fill and drain weigh more than at full size."""
    _check(_point(MAMBA_POINTS, "mamba v1 ch256"))


def test_mamba_v1() -> None:
    """Measured 2.34 ms at channels 4096, seq 512 (VectorE 92% active)."""
    _check(_point(MAMBA_POINTS, "mamba v1 ch4096"))


def test_mamba_v2() -> None:
    """Measured 1.61 ms at channels 4096, seq 512 (VectorE 99.6% active)."""
    _check(_point(MAMBA_POINTS, "mamba v2 seq512"))


def test_mamba_v2_long_sequence() -> None:
    """Measured 53.33 ms at seq 8192 with the 2024 compiler, where v2's whole-sequence tiles overflowed
    SBUF and spilled (VectorE only 58.9% active). The model prices the 2025 compiler, which allocates
    them per block (no spill): faster than that measurement (SUPERSEDED)."""
    point = _point(MAMBA_POINTS, "mamba v2 seq8192")
    _check(point)
    assert not _spilled(point)


def test_mamba_v3_tiles_the_sequence() -> None:
    """Measured 27.8 ms at seq 8192: the sequence in 512-column tiles, scan carry via `initial`,
    no spills (VectorE 94.9% active)."""
    point = _point(MAMBA_POINTS, "mamba v3 seq8192")
    _check(point)
    assert not _spilled(point)


def test_mamba_reorder_beats_v1() -> None:
    """v2 (loads hoisted, loops reordered) beat v1 at seq 512: 1.61 vs 2.34 ms."""
    v1, v2 = _point(MAMBA_POINTS, "mamba v1 ch4096"), _point(MAMBA_POINTS, "mamba v2 seq512")
    assert predicted_ms(v2) < predicted_ms(v1)


# A subset of the scaling table keeps this file fast; benchmarks/calibration.py runs every row.
_SCALING_SUBSET = ("mamba v2 seq1024", "mamba v3 seq1024", "mamba v2 seq2048", "mamba v3 seq2048",
                   "mamba v2 seq4096", "mamba v2 seq7168")


@pytest.mark.parametrize("name", _SCALING_SUBSET)
def test_mamba_sequence_scaling(name: str) -> None:
    """Rows of the tutorial's scaling table (channels 4096; 4.4 / 3.3 ms at seq 1024, 8.9 / 6.6 at
    2048, 17.6 at 4096, 41.3 at 7168 for v2 / v3). The hardware's v2 is ~38% slower
    per element than at seq 512 from seq 1024 on, before any spill; here that comes from the B and C
    broadcasts no longer fitting one PSUM bank (staged in SBUF, two SBUF operands per multiply)."""
    _check(_point(SCALING_POINTS, name))


def _spilled(point: Point) -> bool:
    rep = report(point)
    return rep.spill_reload_bytes > 0 and rep.spill_save_bytes > 0


# ------------------------------------------------------------------ ScalarE dependent chain
def test_scalar_dependent_instruction_interval() -> None:
    """Measured: dependent 1-element ScalarE instructions start 264 cycles (189 ns) apart on NC-v2
    (perf guide Opt #5a, fact sheet A.5). The model must reproduce it within 5%."""
    hw = load_hardware("trn1")
    trace = run_kernel(load_kernel(str(KERNELS / "scalar_chain.py")), [TensorSpec((128, 1), F32)],
                       numeric=False).trace
    sched = schedule(trace, hw, CostModel(hw))
    starts = [sched.start[i] for i, inst in enumerate(trace.instructions) if inst.engine == "scalar"]
    intervals = [(b - a) * hw.scalar.clock_hz for a, b in itertools.pairwise(starts)]
    assert len(intervals) >= 4
    for cycles in intervals:
        assert cycles == pytest.approx(SCALAR_CHAIN_INTERVAL_CYCLES, rel=0.05)


# ------------------------------------------------------------------ DMA facts (fact sheet A.6)
def _loads(count: int, partitions: int, free: int, dtype: str = "float32") -> Trace:
    """`count` independent HBM->SBUF loads of [partitions, free] tiles, each from its own tensor."""
    size = {"float32": 4, "bfloat16": 2}[dtype]
    trace = Trace()
    for i in range(count):
        src, dst = 2 * i + 1, 2 * i + 2
        shape = (partitions, free)
        trace.tensors[src] = TensorInfo(src, f"in{i}", "hbm", shape, dtype, -1, 0, 1, ())
        trace.tensors[dst] = TensorInfo(dst, f"t{i}", "sbuf", shape, dtype, 0, free * size, 1, ())
        box = ((0, partitions), (0, free))
        nbytes = partitions * free * size
        trace.instructions.append(Instruction(
            i, "dma", Op.DMA_COPY, (Access(src, "hbm", dtype, shape, box, nbytes, nbytes),),
            (Access(dst, "sbuf", dtype, shape, box, nbytes, free * size),), partitions, free, 0, 1, (),
            {"direction": "hbm_to_sbuf", "transpose": False}, dtype))
    return trace


def _stream_rate(hardware: str, partitions: int, free: int, count: int = 64, dtype: str = "float32") -> float:
    rep = estimate(_loads(count, partitions, free, dtype), load_hardware(hardware))
    return rep.hbm_read_bytes / rep.latency


def test_dma_fixed_cost_dominates_a_tiny_transfer() -> None:
    """~1300 ns to set up a DMA (bandwidth guide): a lone 512 B load takes about that long."""
    rep = estimate(_loads(1, 128, 1), load_hardware("trn1"))
    assert rep.latency == pytest.approx(1.3e-6, rel=0.1)


def test_dma_large_transfers_reach_the_engine_ceiling_not_hbm_peak() -> None:
    """16 engines x 17 B/ns = 272 GB/s per NeuronCore (bandwidth-guide table) for >= 4 KiB per
    partition; the model keeps that ceiling although HBM's peak is 410 GiB/s, so a memory-bound
    kernel tops out near 62% of NKIBench's peak (MBU >= 60% is what the perf guide calls good)."""
    hw = load_hardware("trn1")
    ceiling = hw.dma.engines * hw.dma.engine_bandwidth
    rate = _stream_rate("trn1", 128, 2048)  # 8 KiB per partition
    assert 0.9 * ceiling <= rate <= ceiling * 1.0001
    assert rate / hw.peak.hbm_bandwidth < 0.62


def test_dma_small_transfers_are_overhead_bound() -> None:
    """Under 256 B per partition DMAs are heavily overhead-bound; 2 KiB is the recommended minimum
    and 4 KiB saturates (bandwidth guide)."""
    tiny = _stream_rate("trn1", 128, 32)  # 128 B per partition
    medium = _stream_rate("trn1", 128, 512)  # 2 KiB
    large = _stream_rate("trn1", 128, 1024)  # 4 KiB
    assert tiny < 0.5 * large
    assert 0.8 * large <= medium < large


def test_dma_bf16_moves_at_the_fp32_byte_rate() -> None:
    """The 2025 compiler moved the tutorial matmul's BF16 tiles at >= 208 GB/s (autocomp 2_gemm/00 on trn1),
    where the 2024 tutorial runs moved ~100 GB/s: BF16 streams as fast as FP32 of the same bytes."""
    fp32 = _stream_rate("trn1", 128, 1024)
    bf16 = _stream_rate("trn1", 128, 2048, dtype="bfloat16")  # same 4 KiB per partition
    assert bf16 == pytest.approx(fp32, rel=0.02)


def test_dma_trn2_32_kib_per_engine_in_1416_ns() -> None:
    """trn2: one engine moved 32 KiB HBM->SBUF in 1416 ns (~23 B/ns, overhead included). A stream of
    loads giving every engine 32 KiB (128 x 1024 FP32) finishes one per ~1416 ns in steady state,
    the setup of each overlapped by the queues' other transfers."""
    count = 64
    rep = estimate(_loads(count, 128, 1024), load_hardware("trn2"))
    per_transfer = rep.latency / count
    assert per_transfer == pytest.approx(1416e-9, rel=0.1)
