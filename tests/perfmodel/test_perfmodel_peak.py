"""The NKIBench "% of peak" computation, pinned on known tasks."""

from __future__ import annotations

import dataclasses

import pytest
from perf_trace_builder import TraceBuilder

from accelopt_core.hardware import load_hardware
from accelopt_core.perfmodel import estimate, peak_percent

TRN1 = load_hardware("trn1")
M, K, N = 4096, 5120, 12288


def test_matmul_task_on_trn1_is_bound_by_matmul_time() -> None:
    mm_flops = 2 * M * N * K
    hbm_bytes = 4 * (M * N + N * K + M * K)
    mm_time = 2 * M * N * K / 23.75e12
    assert mm_time == pytest.approx(21.70e-3, rel=1e-3)
    assert peak_percent(mm_time, mm_flops, 0, hbm_bytes, TRN1) == pytest.approx(100.0)
    assert peak_percent(2 * mm_time, mm_flops, 0, hbm_bytes, TRN1) == pytest.approx(50.0)


def test_a_report_can_be_passed_directly() -> None:
    b = TraceBuilder()
    x, y = b.tensor("x", "sbuf", (128, 512)), b.tensor("y", "sbuf", (128, 512))
    b.compute("vector", "tensor_copy", [x], [y])
    report = dataclasses.replace(estimate(b.build(), TRN1), latency=2 * M * N * K / 23.75e12 * 4)
    assert peak_percent(report, 2 * M * N * K, 0, 4 * (M * N + N * K + M * K), TRN1) == pytest.approx(25.0)


def test_memory_bound_task_uses_hbm_time() -> None:
    m, n = 4096, 7168  # silu
    vec_time = 3 * m * n / (2 * 128 * 1.12e9)
    mem_time = 8 * m * n / (410 * 2**30)
    assert mem_time > vec_time
    assert peak_percent(mem_time * 2, 0, 3 * m * n, 8 * m * n, TRN1) == pytest.approx(50.0)


def test_vector_bound_task_uses_vector_time() -> None:
    vec_flops, hbm_bytes = 1e9, 1e6
    latency = vec_flops / TRN1.peak.vector_flops
    assert peak_percent(latency, 0, vec_flops, hbm_bytes, TRN1) == pytest.approx(100.0)


def test_trn2_uses_its_own_peaks() -> None:
    trn2 = load_hardware("trn2")
    latency = 0.03
    expected = 100 * (2 * M * N * K / trn2.peak.matmul_flops) / latency
    assert peak_percent(latency, 2 * M * N * K, 0, 0, trn2) == pytest.approx(expected)
    assert expected != pytest.approx(peak_percent(latency, 2 * M * N * K, 0, 0, TRN1))


def test_zero_latency_is_rejected() -> None:
    with pytest.raises(ValueError):
        peak_percent(0.0, 1, 1, 1, TRN1)
