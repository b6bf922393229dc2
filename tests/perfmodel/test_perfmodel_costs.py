"""Per-instruction costs against the ISA formulas of the fact sheet (B.8, A.3, A.5)."""

from __future__ import annotations

import pytest
from perf_trace_builder import TraceBuilder

from accelopt_core.hardware import HardwareProfile, load_hardware
from accelopt_core.nki.trace import Instruction
from accelopt_core.perfmodel import CostModel

TRN1 = load_hardware("trn1")
TRN2 = load_hardware("trn2")


def cycles(hw: HardwareProfile, inst: Instruction) -> float:
    """The ISA formula's cycles: the engine's occupancy less the static overhead every instruction pays."""
    engine = inst.engine
    if engine == "tensor":
        return CostModel(hw).occupancy(inst) * hw.tensor.clock_hz
    spec = hw.compute_engine(engine)
    return CostModel(hw).occupancy(inst) * spec.clock_hz - spec.static_overhead_cycles


def test_the_static_overhead_occupies_the_engine() -> None:
    """Calibration set (2025, trn1): Scalar active time is ~512 + 130 cycles per 512-element op."""
    b = TraceBuilder()
    x, y = b.tensor("x", "sbuf", (128, 512)), b.tensor("y", "sbuf", (128, 512))
    inst = b.compute("scalar", "activation", [x], [y], attrs={"func": "exp"})
    spec = TRN1.scalar
    assert CostModel(TRN1).occupancy(inst) == pytest.approx((512 + spec.static_overhead_cycles) / spec.clock_hz)


@pytest.mark.parametrize(("dtype", "m", "n", "expected"), [
    ("bfloat16", 128, 512, 512),  # max(min(64, 128), 512)
    ("float32", 128, 512, 4 * 512),  # FP32 is 4x
    ("bfloat16", 128, 1, 64),  # short moving operand: fast weight load bound
    ("bfloat16", 32, 16, 32),  # short stationary: min(64, 32)
])
def test_matmul_cost(dtype: str, m: int, n: int, expected: int) -> None:
    b = TraceBuilder()
    st = b.tensor("st", "sbuf", (128, m), dtype=dtype)
    mv = b.tensor("mv", "sbuf", (128, n), dtype=dtype)
    mm = b.matmul(st, mv, b.tensor("acc", "psum", (m, n)))
    assert cycles(TRN1, mm) == pytest.approx(expected)


def test_matmul_peak_rate_matches_the_fact_sheet() -> None:
    b = TraceBuilder()
    st = b.tensor("st", "sbuf", (128, 128), dtype="bfloat16")
    mv = b.tensor("mv", "sbuf", (128, 512), dtype="bfloat16")
    mm = b.matmul(st, mv, b.tensor("acc", "psum", (128, 512)))
    seconds = CostModel(TRN1).occupancy(mm)
    assert seconds == pytest.approx(183e-9, rel=0.01)  # A.3: 512 cycles at 2.8 GHz
    assert mm.flops / seconds == pytest.approx(TRN1.peak.tensor_flops)


def test_zero_one_operand_doubles_fp32_matmul_speed() -> None:
    b = TraceBuilder()
    st = b.tensor("st", "sbuf", (128, 128))
    mv = b.tensor("mv", "sbuf", (128, 512))
    mm = b.matmul(st, mv, b.tensor("acc", "psum", (128, 512)))
    assert mm.attrs is not None
    mm.attrs["onezero"] = True
    assert cycles(TRN1, mm) == pytest.approx(2 * 512)


def test_fp32_transpose_is_faster_on_trn2_only() -> None:
    b = TraceBuilder()
    st = b.tensor("st", "sbuf", (128, 128))
    ident = b.tensor("id", "sbuf", (128, 128))
    tr = b.matmul(st, ident, b.tensor("acc", "psum", (128, 128)), is_transpose=True)
    assert cycles(TRN1, tr) == pytest.approx(4 * 128)
    assert cycles(TRN2, tr) == pytest.approx(2 * 128)


@pytest.mark.parametrize(("engine", "op", "free", "reads_psum", "expected"), [
    ("vector", "tensor_scalar", 512, False, 512),
    ("vector", "tensor_scalar", 8, False, 64),  # MIN_II floor
    ("vector", "tensor_copy", 1024, False, 1024),
    ("vector", "tensor_tensor", 512, False, 512),  # two SBUF inputs: N with the 2025 compiler (trn1.toml), B.8 says 2N
    ("vector", "tensor_tensor", 512, True, 512),  # one input in PSUM: N
    ("vector", "tensor_tensor_scan", 512, False, 1024),
    ("vector", "reciprocal", 512, False, 4 * 512),  # calibrated on trn1 counters (trn1.toml), not B.8's 8N
    ("vector", "bn_aggr", 300, False, 1300),
    ("vector", "tensor_reduce", 512, False, 512),
    ("scalar", "activation", 512, False, 512),
    ("gpsimd", "iota", 512, False, 150 + 512),
])
def test_compute_costs(engine: str, op: str, free: int, reads_psum: bool, expected: float) -> None:
    b = TraceBuilder()
    first = b.tensor("a", "psum" if reads_psum else "sbuf", (128, free))
    second = b.tensor("b", "sbuf", (128, free))
    out = b.tensor("o", "sbuf", (128, free))
    reads = [first, second] if op == "tensor_tensor" else [first]
    inst = b.compute(engine, op, reads, [out])
    assert cycles(TRN1, inst) == pytest.approx(expected)


def test_activation_with_reduce_pays_the_accumulator_read() -> None:
    b = TraceBuilder()
    x, y = b.tensor("x", "sbuf", (128, 512)), b.tensor("y", "sbuf", (128, 512))
    inst = b.compute("scalar", "activation", [x], [y], attrs={"func": "exp", "reduce": True})
    assert cycles(TRN1, inst) == pytest.approx(512 + 64)


def test_trn2_vector_performance_mode_for_16_bit_copies() -> None:
    b = TraceBuilder()
    x = b.tensor("x", "sbuf", (128, 1024), dtype="bfloat16")
    y = b.tensor("y", "sbuf", (128, 1024), dtype="bfloat16")
    copy = b.compute("vector", "tensor_copy", [x], [y], dtype="bfloat16")
    assert cycles(TRN2, copy) == pytest.approx(1024 / 4)
    assert cycles(TRN1, copy) == pytest.approx(1024)
    fp32 = TraceBuilder()
    a, c = fp32.tensor("a", "sbuf", (128, 1024)), fp32.tensor("c", "sbuf", (128, 1024))
    assert cycles(TRN2, fp32.compute("vector", "tensor_copy", [a], [c])) == pytest.approx(1024)


def test_standalone_time_adds_the_dependency_tail() -> None:
    b = TraceBuilder()
    x, y = b.tensor("x", "sbuf", (128, 512)), b.tensor("y", "sbuf", (128, 512))
    inst = b.compute("vector", "tensor_copy", [x], [y])
    costs = CostModel(TRN1)
    spec = TRN1.vector
    tail = spec.access_start_cycles / spec.clock_hz
    assert costs.standalone(inst) == pytest.approx(costs.occupancy(inst) + tail)


def test_two_byte_dma_moves_at_the_full_byte_rate() -> None:
    # trn1.toml engine_element_rate: the 2025 compiler moved the tutorial matmul's BF16 tiles at >= 208 GB/s
    # (shared/calibration/autocomp 2_gemm/00), not the half rate of the 2024 tutorial runs; 1-byte data
    # stays element-bound (UNCERTAIN)
    b = TraceBuilder()
    src32 = b.tensor("a", "hbm", (128, 1024))
    src16 = b.tensor("b", "hbm", (128, 2048), dtype="bfloat16")
    fp32 = b.dma(src32, b.tensor("x", "sbuf", (128, 1024)))  # 4 KiB per partition
    bf16 = b.dma(src16, b.tensor("y", "sbuf", (128, 2048), dtype="bfloat16"))  # the same bytes
    costs = CostModel(TRN1)
    assert costs.dma(fp32).payload == costs.dma(bf16).payload
    assert costs.dma(bf16).work_bytes == pytest.approx(costs.dma(fp32).work_bytes)
    assert TRN1.dma.width_penalty(4) == 1.0
    assert TRN1.dma.width_penalty(2) == 1.0
    assert TRN1.dma.width_penalty(1) == pytest.approx(2.0)


@pytest.mark.parametrize("ops, dtype, expected", [
    (("subtract", "multiply"), "bfloat16", 512),  # B.8: the 16-bit subtract-then-multiply form runs at N
    (("subtract", "add"), "bfloat16", 2 * 512),
    (("subtract", "multiply"), "float32", 2 * 512),
])
def test_scalar_tensor_tensor_fast_form(ops: tuple[str, str], dtype: str, expected: int) -> None:
    """The per-partition operand0 may be FP32 (a loaded [P, 1] scalar) without losing the fast form."""
    b = TraceBuilder()
    data, other = (b.tensor(name, "sbuf", (128, 512), dtype=dtype) for name in ("data", "other"))
    scalar = b.tensor("scalar", "sbuf", (128, 1))
    out = b.tensor("o", "sbuf", (128, 512), dtype=dtype)
    inst = b.compute("vector", "scalar_tensor_tensor", [data, other, scalar], [out], attrs={"ops": ops}, dtype=dtype)
    assert cycles(TRN1, inst) == pytest.approx(expected)


def test_trn2_performance_mode_doubles_a_sixteen_bit_tensor_tensor() -> None:
    """trainium2_arch, VectorE performance mode: tensor_tensor with both inputs in SBUF and every tile in
    BF16/FP16 runs at twice NeuronCore-v2's rate."""
    b = TraceBuilder()
    first, second, out = (b.tensor(name, "sbuf", (128, 2048), dtype="bfloat16") for name in ("a", "b", "o"))
    inst = b.compute("vector", "tensor_tensor", [first, second], [out], attrs={"op": "add"}, dtype="bfloat16")
    assert cycles(TRN2, inst) == pytest.approx(cycles(TRN1, inst) / 2)
