"""PSUM holds 16 KiB per partition on trn1 whatever a kernel declares (allocator mechanism 5): accumulation
results live beyond that are spilled and reloaded, as autocomp attention 02 (all of Q @ K^T kept in PSUM,
1.57 ms on trn1 against 1.02 ms for the same work recomputed block by block) showed."""

from __future__ import annotations

import dataclasses

import pytest
from perf_trace_builder import TraceBuilder

from accelopt_core.hardware import HardwareProfile, load_hardware
from accelopt_core.nki.trace import Trace
from accelopt_core.perfmodel import estimate
from accelopt_core.perfmodel.allocator import plan_allocation


@pytest.fixture
def trn1() -> HardwareProfile:
    return load_hardware("trn1")


def _psum_blocks(blocks: int, read_at_once: bool) -> Trace:
    """Matmuls fill a PSUM block tensor [blocks, 128, 512] fp32 (2 KiB per partition a block); a Vector
    reduce reads every block: all after the last matmul, or each right after its own."""
    b = TraceBuilder()
    st = b.tensor("st", "sbuf", (128, 128), dtype="bfloat16")
    mv = b.tensor("mv", "sbuf", (128, 512), dtype="bfloat16")
    acc = b.tensor("acc", "psum", (blocks, 128, 512), partition_axis=1)
    out = b.tensor("out", "sbuf", (128, blocks))

    def reduce(i: int) -> None:
        block = b.access(acc, ((i, i + 1), (0, 128), (0, 512)))
        b.compute("vector", "tensor_reduce", [block], [b.access(out, ((0, 128), (i, i + 1)))], line=3)

    for i in range(blocks):
        b.matmul(st, mv, acc, psum_region=((i, i + 1), (0, 128), (0, 512)), line=2)
        if not read_at_once:
            reduce(i)
    if read_at_once:
        for i in range(blocks):
            reduce(i)
    return b.build()


def _plan(trace: Trace, hw: HardwareProfile):
    memory = hw.memory
    return plan_allocation(trace, memory.sbuf_usable_bytes_per_partition, memory.psum_bytes_per_partition,
                           memory.rotating_buffers)


def test_psum_results_beyond_its_capacity_are_spilled_and_reloaded(trn1: HardwareProfile) -> None:
    plan = _plan(_psum_blocks(16, read_at_once=True), trn1)  # 32 KiB per partition live at once
    assert plan.psum_peak_bytes_per_partition == 16 * 2048 > trn1.memory.psum_bytes_per_partition
    block_bytes = 128 * 2048
    assert sum(plan.save) == sum(plan.reload) == 8 * block_bytes  # the eight blocks that do not fit
    # a DMA moves between HBM and SBUF only: each block saved is first copied to SBUF by an engine
    assert [copy for copies in plan.psum_copies.values() for copy in copies] == [(128, 512, "float32")] * 8
    report = estimate(_psum_blocks(16, read_at_once=True), trn1)
    assert report.spill_save_bytes == report.spill_reload_bytes == 8 * block_bytes
    assert report.latency >= report.physical_floor_time
    assert not report.model_below_floor
    assert any("live PSUM peaks at 32768 B/partition" in note for note in report.notes)


def test_psum_that_fits_is_not_spilled(trn1: HardwareProfile) -> None:
    fits = _plan(_psum_blocks(8, read_at_once=True), trn1)  # 16 KiB: exactly the eight banks
    assert fits.psum_peak_bytes_per_partition == trn1.memory.psum_bytes_per_partition
    assert not fits.spills
    streamed = _plan(_psum_blocks(64, read_at_once=False), trn1)  # each block read before the next is written
    assert streamed.psum_peak_bytes_per_partition == 2048
    assert not streamed.spills


def test_a_psum_spill_costs_time(trn1: HardwareProfile) -> None:
    """The same work with a PSUM large enough for every block is faster: the spill moves data through DMA."""
    roomy = dataclasses.replace(trn1, memory=dataclasses.replace(trn1.memory, psum_bytes_per_partition=1 << 20))
    spilled = estimate(_psum_blocks(64, read_at_once=True), trn1)
    kept = estimate(_psum_blocks(64, read_at_once=True), roomy)
    assert kept.spill_save_bytes == 0
    assert spilled.latency > kept.latency
    copies = spilled.vector_engine_active_time + spilled.scalar_engine_active_time
    assert copies > kept.vector_engine_active_time + kept.scalar_engine_active_time  # the copies out of PSUM
    assert spilled.hbm_write_bytes == kept.hbm_write_bytes + spilled.spill_save_bytes


def test_zeroing_folded_into_the_first_matmul_takes_no_psum(trn1: HardwareProfile) -> None:
    """The legacy idiom `nl.zeros(..., buffer=nl.psum)` declares and zeroes every block up front; the zeroing
    folds into each block's first matmul, so a block takes PSUM from that matmul on (calibration matmul:
    3.75 MiB per partition of PSUM blocks zeroed at the top, no spill on trn1)."""
    blocks = 64
    b = TraceBuilder()
    st = b.tensor("st", "sbuf", (128, 128), dtype="bfloat16")
    mv = b.tensor("mv", "sbuf", (128, 512), dtype="bfloat16")
    acc = b.tensor("acc", "psum", (blocks, 128, 512), partition_axis=1)
    out = b.tensor("out", "sbuf", (128, blocks))
    boxes = [((i, i + 1), (0, 128), (0, 512)) for i in range(blocks)]
    for box in boxes:
        b.compute("vector", "memset", [], [b.access(acc, box)], attrs={"value": 0})
    for i, box in enumerate(boxes):
        b.matmul(st, mv, acc, accumulate=True, psum_region=box)
        b.compute("vector", "tensor_reduce", [b.access(acc, box)], [b.access(out, ((0, 128), (i, i + 1)))])
    plan = _plan(b.build(), trn1)
    assert plan.psum_peak_bytes_per_partition == 2048
    assert not plan.spills
