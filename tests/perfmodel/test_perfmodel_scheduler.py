"""Scheduler behaviour on small hand-made traces, with expectations derived from the cost model."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
from perf_trace_builder import TraceBuilder

from accelopt_core.hardware import HardwareProfile, load_hardware
from accelopt_core.nki.trace import Instruction, LoopKind, Trace
from accelopt_core.perfmodel import CostModel, estimate
from accelopt_core.perfmodel.allocator import plan_allocation
from accelopt_core.perfmodel.scheduler import Schedule, _ListScheduler, schedule


@pytest.fixture
def trn1() -> HardwareProfile:
    return load_hardware("trn1")


def run(trace: Trace, hw: HardwareProfile) -> Schedule:
    return schedule(trace, hw, CostModel(hw))


def times(hw: HardwareProfile, inst: Instruction) -> tuple[float, float]:
    """(occupancy, tail) of a compute instruction."""
    costs = CostModel(hw)
    return costs.occupancy(inst), costs.tail(inst.engine)


# ------------------------------------------------------------------------------- compute engines
def test_independent_engines_overlap(trn1: HardwareProfile) -> None:
    b = TraceBuilder()
    x, y, z, w = (b.tensor(n, "sbuf", (128, 512)) for n in "xyzw")
    v = b.compute("vector", "tensor_scalar", [x], [y])
    s = b.compute("scalar", "activation", [z], [w], attrs={"func": "exp"})
    report = estimate(b.build(), trn1)
    v_occ, v_tail = times(trn1, v)
    s_occ, s_tail = times(trn1, s)
    assert report.latency == pytest.approx(max(v_occ + v_tail, s_occ + s_tail))
    assert report.latency < v_occ + v_tail + s_occ + s_tail


def test_dependency_serialises(trn1: HardwareProfile) -> None:
    b = TraceBuilder()
    x, y, z = (b.tensor(n, "sbuf", (128, 512)) for n in "xyz")
    v = b.compute("vector", "tensor_scalar", [x], [y])
    s = b.compute("scalar", "activation", [y], [z], attrs={"func": "exp"})
    sched = run(b.build(), trn1)
    v_occ, v_tail = times(trn1, v)
    s_occ, s_tail = times(trn1, s)
    assert sched.start[1] == pytest.approx(v_occ + v_tail)
    assert sched.latency == pytest.approx(v_occ + v_tail + s_occ + s_tail)
    assert sched.pred[1] == 0


def test_one_engine_runs_in_program_order_back_to_back(trn1: HardwareProfile) -> None:
    b = TraceBuilder()
    x, y, z, w = (b.tensor(n, "sbuf", (128, 512)) for n in "xyzw")
    first = b.compute("vector", "tensor_copy", [x], [y])
    b.compute("vector", "tensor_copy", [z], [w])
    sched = run(b.build(), trn1)
    occ, tail = times(trn1, first)
    setup = CostModel(trn1).setup(first)
    # independent and queued: its static overhead overlaps the first one's streaming
    assert sched.start[1] == pytest.approx(occ - setup)
    assert sched.latency == pytest.approx(2 * occ - setup + tail)
    assert sched.busy[0] + sched.busy[1] == pytest.approx(2 * occ - setup)  # active time counts the overlap once


def test_an_instruction_that_waited_for_its_data_pays_its_static_overhead(trn1: HardwareProfile) -> None:
    b = TraceBuilder()
    x, y, z, w = (b.tensor(n, "sbuf", (128, 512)) for n in "xyzw")
    first = b.compute("vector", "tensor_copy", [x], [y])
    b.compute("scalar", "activation", [y], [z], attrs={"func": "exp"})
    b.compute("vector", "tensor_copy", [z], [w])  # waits for the Scalar result: the Vector engine is idle
    sched = run(b.build(), trn1)
    assert sched.end[2] - sched.start[2] == pytest.approx(times(trn1, first)[0])
    assert sched.start[2] == pytest.approx(sched.ready[1])


def test_an_instruction_placed_in_an_idle_gap_overlaps_its_setup_like_one_appended(trn1: HardwareProfile) -> None:
    """Scalar runs `first`, then `waiting` waits for a long Vector op; `ready`, later in program order but with
    its data there, runs in the idle stretch between them, queued behind `first`: its static overhead overlaps
    `first`'s streaming as it would at the end of the engine's queue (autocomp attention 08 on trn1: the next
    exponential runs while the Scalar engine's PSUM copy still waits for its transpose)."""
    b = TraceBuilder()
    x, y, big, big_out, z, p, q = (b.tensor(n, "sbuf", (128, 4096 if n.startswith("big") else 512))
                                   for n in ("x", "y", "big", "big_out", "z", "p", "q"))
    first = b.compute("scalar", "activation", [x], [y], attrs={"func": "exp"})
    b.compute("vector", "tensor_scalar", [big], [big_out])
    b.compute("scalar", "activation", [big_out], [z], attrs={"func": "exp"})
    b.compute("scalar", "activation", [p], [q], attrs={"func": "exp"})
    sched = run(b.build(), trn1)
    occupancy, setup = CostModel(trn1).occupancy(first), CostModel(trn1).setup(first)
    assert sched.start[3] < sched.start[2]  # it ran in the gap, before the instruction that waited
    assert sched.start[3] == pytest.approx(sched.end[0] - setup)
    assert sched.busy[3] == pytest.approx(occupancy - setup)  # active time counts the overlap once


def test_dependent_chain_pays_overhead_like_the_perf_guide(trn1: HardwareProfile) -> None:
    # perf guide Opt #5a: dependent 1-element ScalarE instructions issue about 264 cycles apart
    b = TraceBuilder()
    tiles = [b.tensor(f"t{i}", "sbuf", (128, 1)) for i in range(4)]
    for src, dst in itertools.pairwise(tiles):
        b.compute("scalar", "activation", [src], [dst], attrs={"func": "exp"})
    sched = run(b.build(), trn1)
    interval_cycles = (sched.start[2] - sched.start[1]) * trn1.scalar.clock_hz
    assert interval_cycles == pytest.approx(264)


# ------------------------------------------------------------------------------------------- DMA
def _loads(hw: HardwareProfile, count: int, partitions: int, free: int) -> tuple[Schedule, CostModel, Trace]:
    b = TraceBuilder()
    for i in range(count):
        src = b.tensor(f"in{i}", "hbm", (partitions, free))
        dst = b.tensor(f"t{i}", "sbuf", (partitions, free))
        b.dma(src, dst)
    trace = b.build()
    return run(trace, hw), CostModel(hw), trace


def test_dma_bandwidth_is_shared_across_queues(trn1: HardwareProfile) -> None:
    one, costs, trace = _loads(trn1, 1, 128, 2048)
    cost = costs.dma(trace.instructions[0])
    assert cost.engines == 16
    assert one.latency == pytest.approx(cost.fixed + cost.work_bytes / costs.aggregate_dma_rate)
    two, _, _ = _loads(trn1, 2, 128, 2048)
    # both start at once on separate queues but the bytes go through one pipe
    assert two.start[0] == two.start[1] == 0.0
    expected = cost.fixed + 2 * cost.work_bytes / costs.aggregate_dma_rate
    assert two.latency == pytest.approx(expected, rel=0.02)


def test_narrow_transfers_use_few_engines_and_run_side_by_side(trn1: HardwareProfile) -> None:
    one, costs, trace = _loads(trn1, 1, 8, 8192)
    cost = costs.dma(trace.instructions[0])
    assert cost.engines == 1
    assert cost.rate == pytest.approx(trn1.dma.engine_bandwidth)
    four, _, _ = _loads(trn1, 4, 8, 8192)
    assert four.latency == pytest.approx(one.latency, rel=1e-6)


def test_dma_queues_limit_transfers_in_flight(trn1: HardwareProfile) -> None:
    queues = trn1.dma.queues_per_engine
    sched, _, _ = _loads(trn1, queues + 1, 1, 1)
    assert all(s == 0.0 for s in sched.start[:queues])
    assert sched.start[queues] == pytest.approx(min(sched.end[:queues]))


def test_small_strided_and_transposed_transfers_cost_more_per_byte(trn1: HardwareProfile) -> None:
    costs = CostModel(trn1)
    b = TraceBuilder()
    rows = b.tensor("rows", "hbm", (128, 512))
    narrow = b.tensor("narrow", "hbm", (128, 64))
    plain = b.dma(rows, b.tensor("d0", "sbuf", (128, 512)))  # 2 KiB contiguous per partition
    strided = b.dma(rows, b.tensor("d1", "sbuf", (128, 512)))
    tiny = b.dma(narrow, b.tensor("d2", "sbuf", (128, 1)), src_region=((0, 128), (0, 1)))
    transposed = b.dma(rows, b.tensor("d3", "sbuf", (128, 512)), transpose=True)

    def per_byte(inst: Instruction) -> float:
        cost = costs.dma(inst)
        return cost.work_bytes / cost.payload

    assert per_byte(plain) == pytest.approx(1 / trn1.dma.efficiency(2048))
    assert per_byte(tiny) > 10 * per_byte(plain)
    assert per_byte(transposed) > per_byte(plain)
    # the same load from a layout where every element is its own 4-byte run (e.g. a column read)
    strided.reads = (dataclasses.replace(strided.reads[0], contiguous_bytes=4),)
    assert per_byte(strided) > 10 * per_byte(plain)


# ------------------------------------------------------------------------------------------ loops
def _pipeline(kind: str, iterations: int = 4, reuse_buffer: bool = False) -> Trace:
    """load -> exp -> store per iteration, over one HBM input and output."""
    b = TraceBuilder()
    src = b.tensor("src", "hbm", (128, 512 * iterations))
    dst = b.tensor("dst", "hbm", (128, 512 * iterations))
    loop = b.loop(kind, iterations, line=5)
    shared = b.tensor("buf", "sbuf", (128, 512)) if reuse_buffer else None
    for i in range(iterations):
        b.enter((loop, i))
        cols = (512 * i, 512 * (i + 1))
        buf = shared if shared is not None else b.tensor(f"buf{i}", "sbuf", (128, 512), line=6)
        res = b.tensor(f"res{i}", "sbuf", (128, 512), line=7)
        b.dma(src, buf, src_region=((0, 128), cols), line=6)
        b.compute("scalar", "activation", [buf], [res], line=7, attrs={"func": "exp"})
        b.dma(res, dst, dst_region=((0, 128), cols), line=8)
    b.leave()
    return b.build()


def test_loop_kind_adds_no_ordering_of_its_own(trn1: HardwareProfile) -> None:
    # calibration change (matmul tutorial v3, fact sheet D.2): sequential_range iterations used to
    # wait for the whole previous iteration; they are now ordered by data like affine ones.
    affine = run(_pipeline(LoopKind.AFFINE), trn1)
    static = run(_pipeline(LoopKind.STATIC), trn1)
    sequential = run(_pipeline(LoopKind.SEQUENTIAL), trn1)
    single = run(_pipeline(LoopKind.SEQUENTIAL, iterations=1), trn1)
    assert static.latency == pytest.approx(affine.latency)
    assert sequential.latency == pytest.approx(affine.latency)
    # double-buffered tiles (trn1.toml rotating_buffers): iterations overlap, two at a time
    assert sequential.latency < 0.75 * 4 * single.latency
    # the next iteration's load starts before the previous iteration's store has finished
    assert sequential.start[3] < sequential.ready[2]


def _carried(kind: str, iterations: int = 4) -> Trace:
    """load -> exp -> acc = acc + exp per iteration: a real loop-carried dependency through acc."""
    b = TraceBuilder()
    src = b.tensor("src", "hbm", (128, 512 * iterations))
    acc = b.tensor("acc", "sbuf", (128, 512))
    loop = b.loop(kind, iterations, line=5)
    for i in range(iterations):
        b.enter((loop, i))
        buf = b.tensor(f"buf{i}", "sbuf", (128, 512))
        res = b.tensor(f"res{i}", "sbuf", (128, 512))
        b.dma(src, buf, src_region=((0, 128), (512 * i, 512 * (i + 1))), line=6)
        b.compute("scalar", "activation", [buf], [res], line=7, attrs={"func": "exp"})
        b.compute("vector", "tensor_tensor", [acc, res], [acc], line=8, attrs={"op": "add"})
    b.leave()
    return b.build()


def test_loop_carried_dependency_serialises_through_data(trn1: HardwareProfile) -> None:
    sequential = run(_carried(LoopKind.SEQUENTIAL), trn1)
    affine = run(_carried(LoopKind.AFFINE), trn1)
    assert sequential.latency == pytest.approx(affine.latency)
    for i in range(1, 4):  # each accumulate waits for the previous one's result, loads run ahead
        assert sequential.start[3 * i + 2] >= sequential.ready[3 * i - 1] - 1e-15
        assert sequential.start[3 * i] < sequential.ready[3 * i - 1]


def test_war_on_buffer_reuse_delays_the_next_load(trn1: HardwareProfile) -> None:
    reused = run(_pipeline(LoopKind.AFFINE, reuse_buffer=True), trn1)
    fresh = run(_pipeline(LoopKind.AFFINE), trn1)
    for i in range(1, 4):
        load, previous_reader = 3 * i, 3 * (i - 1) + 1
        assert reused.start[load] >= reused.end[previous_reader] - 1e-15
    assert reused.latency > fresh.latency


def test_a_tile_declared_in_a_loop_rotates_through_two_buffers(trn1: HardwareProfile) -> None:
    """A tile of a loop body is a fresh tensor every iteration, but the compiler gives the
    statement only `rotating_buffers` physical buffers: a load waits until the tile two iterations
    back is dead, so DMA cannot run arbitrarily far ahead of compute."""
    assert trn1.memory.rotating_buffers == 2
    sched = run(_pipeline(LoopKind.AFFINE, iterations=6), trn1)
    for i in range(2, 6):
        load, reader_two_back = 3 * i, 3 * (i - 2) + 1
        assert sched.start[load] >= sched.end[reader_two_back] - 1e-15
    roomy = dataclasses.replace(trn1, memory=dataclasses.replace(trn1.memory, rotating_buffers=6))
    assert run(_pipeline(LoopKind.AFFINE, iterations=6), roomy).latency <= sched.latency


# ------------------------------------------------------------------------------------------- PSUM
def test_psum_accumulation_chain_streams_back_to_back(trn1: HardwareProfile) -> None:
    b = TraceBuilder()
    stationary = [b.tensor(f"s{k}", "sbuf", (128, 128)) for k in range(4)]
    moving = [b.tensor(f"m{k}", "sbuf", (128, 512)) for k in range(4)]
    acc = b.tensor("acc", "psum", (128, 512))
    out = b.tensor("out", "sbuf", (128, 512))
    matmuls = [b.matmul(stationary[k], moving[k], acc, accumulate=k > 0) for k in range(4)]
    b.compute("vector", "tensor_copy", [acc], [out])
    sched = run(b.build(), trn1)
    occ, tail = times(trn1, matmuls[0])
    assert occ == pytest.approx(4 * 512 / trn1.tensor.clock_hz)  # fp32: 4 x max(min(64, 128), 512)
    for k in range(1, 4):
        assert sched.start[k] == pytest.approx(sched.end[k - 1])
    assert sched.start[4] == pytest.approx(4 * occ + tail)


def test_psum_bank_reuse_waits_for_the_previous_group_to_be_read(trn1: HardwareProfile) -> None:
    b = TraceBuilder()
    st = b.tensor("st", "sbuf", (128, 128), dtype="bfloat16")
    mv = b.tensor("mv", "sbuf", (128, 512), dtype="bfloat16")
    banks = trn1.memory.psum_banks
    for j in range(banks + 1):
        acc = b.tensor(f"acc{j}", "psum", (128, 512))
        b.matmul(st, mv, acc)
        # a slow read-out (13N/3 cycles) so the Tensor engine would otherwise run far ahead
        b.compute("vector", "bn_aggr", [acc], [b.tensor(f"r{j}", "sbuf", (128, 512))])
    sched = run(b.build(), trn1)
    mm = [2 * j for j in range(banks + 1)]
    for j in range(1, banks):
        assert sched.start[mm[j]] == pytest.approx(sched.end[mm[j - 1]])
    assert sched.start[mm[banks]] >= sched.end[1] - 1e-15  # bank 0 again: after acc0's read-out
    assert sched.start[mm[banks]] > sched.end[mm[banks - 1]]


def _multi_bank_kernel(read_block: int) -> Schedule:
    """A 4-bank accumulator, a slow read of one of its blocks, then a tile that reuses bank 0."""
    hw = load_hardware("trn1")
    b = TraceBuilder()
    st = b.tensor("st", "sbuf", (128, 128), dtype="bfloat16")
    mv = b.tensor("mv", "sbuf", (128, 512), dtype="bfloat16")
    big = b.tensor("big", "psum", (128, 2048))  # 8 KiB per partition: banks 0-3
    for block in range(2):
        b.matmul(st, mv, big, psum_region=((0, 128), (512 * block, 512 * (block + 1))))
    cols = (512 * read_block, 512 * (read_block + 1))
    b.compute("vector", "bn_aggr", [b.access(big, ((0, 128), cols))], [b.tensor("r", "sbuf", (128, 512))])
    for j in range(5):  # banks 4-7, then bank 0 again
        b.matmul(st, mv, b.tensor(f"t{j}", "psum", (128, 512)))
    return run(b.build(), hw)


def test_psum_banks_follow_the_bytes_an_access_touches() -> None:
    other_bank = _multi_bank_kernel(read_block=1)
    same_bank = _multi_bank_kernel(read_block=0)
    last = len(other_bank.start) - 1
    assert other_bank.start[last] == pytest.approx(other_bank.end[last - 1])
    assert same_bank.start[last] >= same_bank.end[2] - 1e-15
    assert same_bank.start[last] > same_bank.end[last - 1]


# ------------------------------------------------------------------------------------------ spill
def _block_kernel(blocks: int, computed: bool = False) -> Trace:
    """Fill a block tensor [blocks, 128, 1024] fp32 (loaded from HBM, or computed from loaded tiles),
    then read every block back."""
    b = TraceBuilder()
    src = b.tensor("src", "hbm", (blocks, 128, 1024))
    block = b.tensor("block", "sbuf", (blocks, 128, 1024), partition_axis=1)
    for i in range(blocks):
        box = ((i, i + 1), (0, 128), (0, 1024))
        if computed:
            tile = b.tensor(f"t{i}", "sbuf", (128, 1024))
            b.dma(src, tile, src_region=box, line=2)
            b.compute("vector", "tensor_scalar", [tile], [b.access(block, box)], line=3)
        else:
            b.dma(src, block, src_region=box, dst_region=box, line=2)
    for i in range(blocks):
        box = ((i, i + 1), (0, 128), (0, 1024))
        b.compute("vector", "tensor_scalar", [b.access(block, box)], [b.tensor(f"o{i}", "sbuf", (128, 1024))],
                  line=4)
    return b.build()


def _roomy(trn1: HardwareProfile) -> HardwareProfile:
    return dataclasses.replace(trn1, memory=dataclasses.replace(trn1.memory, sbuf_usable_bytes_per_partition=1 << 30))


def test_loaded_blocks_beyond_sbuf_are_loaded_again_not_spilled(trn1: HardwareProfile) -> None:
    """The calibration matmul (9.06 GB read, 0 spill): data that only came from HBM is not saved
    when it does not fit; its load statement is issued again at the uses."""
    fits = estimate(_block_kernel(32), trn1)  # 128 KiB per partition: fits in 176 KiB
    assert fits.spill_save_bytes == 0 and fits.spill_reload_bytes == 0
    trace_reads = sum(a.nbytes for i in _block_kernel(64).instructions for a in i.reads if a.buffer == "hbm")
    assert fits.hbm_read_bytes == trace_reads // 2
    over = estimate(_block_kernel(64), trn1)  # 256 KiB per partition: does not
    assert over.sbuf_peak_live_bytes_per_partition > trn1.memory.sbuf_usable_bytes_per_partition
    assert over.spill_save_bytes == 0 and over.spill_reload_bytes == 0
    assert over.hbm_read_bytes > trace_reads
    assert over.latency > estimate(_block_kernel(64), _roomy(trn1)).latency
    assert any("loaded again" in note for note in over.notes)


def test_computed_blocks_beyond_sbuf_spill(trn1: HardwareProfile) -> None:
    spills = estimate(_block_kernel(64, computed=True), trn1)
    assert spills.sbuf_peak_live_bytes_per_partition > trn1.memory.sbuf_usable_bytes_per_partition
    assert spills.spill_save_bytes > 0 and spills.spill_reload_bytes == spills.spill_save_bytes
    trace_reads = sum(a.nbytes for i in _block_kernel(64, True).instructions for a in i.reads if a.buffer == "hbm")
    assert spills.hbm_read_bytes == trace_reads + spills.spill_reload_bytes
    no_spill = estimate(_block_kernel(64, computed=True), _roomy(trn1))
    assert no_spill.spill_reload_bytes == 0
    assert spills.latency > no_spill.latency
    assert any("spill" in note for note in spills.notes)


def _streamed_block_kernel(blocks: int) -> Trace:
    """The same 256 KiB-per-partition block tensor, but each block is read right after its load."""
    b = TraceBuilder()
    src = b.tensor("src", "hbm", (blocks, 128, 1024))
    block = b.tensor("block", "sbuf", (blocks, 128, 1024), partition_axis=1)
    for i in range(blocks):
        box = ((i, i + 1), (0, 128), (0, 1024))
        b.dma(src, block, src_region=box, dst_region=box)
        b.compute("vector", "tensor_scalar", [b.access(block, box)], [b.tensor(f"o{i}", "sbuf", (128, 1024))])
    return b.build()


def test_block_is_dead_after_its_last_access(trn1: HardwareProfile) -> None:
    """The compiler allocates block by block, so a block tensor larger than SBUF whose
    blocks are each used once, in turn, never has more than a few blocks live: no spill."""
    report = estimate(_streamed_block_kernel(64), trn1)
    assert report.spill_save_bytes == 0 and report.spill_reload_bytes == 0
    assert report.sbuf_peak_live_bytes_per_partition <= 2 * (8 * 1024 + 4 * 1024)
    assert not any("spill" in note for note in report.notes)


# ----------------------------------------------------------------------------------------- report
def _small_matmul_kernel() -> Trace:
    b = TraceBuilder()
    a = b.tensor("a", "hbm", (128, 128))
    w = b.tensor("w", "hbm", (128, 512))
    c = b.tensor("c", "hbm", (128, 512))
    loop = b.loop(LoopKind.AFFINE, 8, line=3)
    for i in range(8):
        b.enter((loop, i))
        st = b.tensor(f"st{i}", "sbuf", (128, 128))
        mv = b.tensor(f"mv{i}", "sbuf", (128, 512))
        acc = b.tensor(f"acc{i}", "psum", (128, 512))
        res = b.tensor(f"res{i}", "sbuf", (128, 512))
        b.dma(a, st, line=4)
        b.dma(w, mv, line=5)
        b.matmul(st, mv, acc, line=6)
        b.compute("vector", "tensor_copy", [acc], [res], line=7)
        b.dma(res, c, line=8)
    b.leave()
    return b.build()


def test_report_has_the_profile_fields_and_serialises(trn1: HardwareProfile) -> None:
    report = estimate(_small_matmul_kernel(), trn1)
    data = report.to_dict()
    json.dumps(data)
    for key in ("latency", "latency_ms", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes",
                "sbuf_write_bytes", "psum_read_bytes", "psum_write_bytes", "spill_save_bytes",
                "spill_reload_bytes", "hardware_flops", "transpose_flops", "hfu_estimated_percent",
                "mm_arithmetic_intensity", "dma_transfer_count", "dma_transfer_average_bytes",
                "tensor_engine_active_time_percent", "vector_engine_active_time_percent",
                "scalar_engine_active_time_percent", "gpsimd_engine_active_time_percent",
                "dma_active_time_percent", "tensor_engine_instruction_count", "vector_engine_instruction_count",
                "scalar_engine_instruction_count", "gpsimd_engine_instruction_count", "matmul_instruction_count",
                "bottleneck", "lines", "loops"):
        assert key in data, key
    assert report.matmul_instruction_count == 8
    assert report.dma_instruction_count == 24
    # neuron-profile counts an FP32 matmul twice (trn1.toml fp32_counted_flops_factor, calibration set)
    assert report.hardware_flops == trn1.tensor.fp32_counted_flops_factor * 8 * 2 * 128 * 128 * 512
    # every iteration loads the same `a` and `w`: the compiler loads them once and keeps them
    assert report.hbm_read_bytes == (128 * 128 + 128 * 512) * 4
    assert report.hbm_write_bytes == 8 * 128 * 512 * 4
    # `*_percent` fields are fractions, as neuron-profile writes them (0.739 = 73.9 %)
    assert report.hfu_estimated_percent == pytest.approx(
        report.hardware_flops / trn1.peak.tensor_flops / report.latency)
    # each 128-partition transfer splits over 16 engines; 14 of the 24 loads are the repeats not executed
    assert report.dma_transfer_count == (24 - 14) * 16
    assert 0 < report.dma_active_time_percent <= 1
    assert report.latency_ms == pytest.approx(report.latency * 1e3)


def test_lines_and_loops_attribute_busy_time(trn1: HardwareProfile) -> None:
    report = estimate(_small_matmul_kernel(), trn1)
    by_line = {entry["line"]: entry for entry in report.lines}
    assert set(by_line) == {4, 5, 6, 7, 8}
    assert by_line[6]["engine"] == "tensor" and by_line[6]["instructions"] == 8
    assert by_line[7]["engine"] == "vector"
    assert by_line[5]["engine"] == "dma"
    times_ms = [entry["time_ms"] for entry in report.lines]
    assert times_ms == sorted(times_ms, reverse=True)
    assert report.tensor_engine_active_time * 1e3 == pytest.approx(by_line[6]["time_ms"])
    (loop,) = report.loops
    assert loop["line"] == 3 and loop["kind"] == "affine"
    assert loop["iterations"] == 8 and loop["executions"] == 1 and loop["instructions"] == 40
    assert loop["time_ms"] == pytest.approx(sum(times_ms))
    assert 0 < loop["span_ms"] <= report.latency_ms + 1e-12


def test_bottleneck_names_the_engine_on_the_critical_path(trn1: HardwareProfile) -> None:
    assert estimate(_pipeline(LoopKind.AFFINE, iterations=8), trn1).bottleneck == "dma"
    b = TraceBuilder()
    st = b.tensor("st", "sbuf", (128, 128))
    mv = b.tensor("mv", "sbuf", (128, 512))
    for j in range(64):
        b.matmul(st, mv, b.tensor(f"acc{j}", "psum", (128, 512)))
    report = estimate(b.build(), trn1)
    assert report.bottleneck == "tensor"
    assert report.tensor_engine_active_time_percent > 0.9
    assert report.idle_percent["vector"] == pytest.approx(1.0)
    assert "tensor-bound" in report.bottleneck_summary


def test_estimate_is_deterministic(trn1: HardwareProfile) -> None:
    trace = _small_matmul_kernel()
    assert estimate(trace, trn1).to_dict() == estimate(trace, trn1).to_dict()


def test_empty_trace(trn1: HardwareProfile) -> None:
    report = estimate(Trace(), trn1)
    assert report.latency == 0.0
    assert report.bottleneck == "none"
    assert report.lines == [] and report.loops == []


def test_unknown_engine_is_a_clear_error(trn1: HardwareProfile) -> None:
    b = TraceBuilder()
    x = b.tensor("x", "sbuf", (128, 4))
    b.compute("sync", "barrier", [x], [x])
    with pytest.raises(ValueError, match="unknown engine 'sync'"):
        estimate(b.build(), trn1)


def test_unknown_op_is_a_clear_error(trn1: HardwareProfile) -> None:
    """A name that is no instruction (a typo) is refused where the trace enters the model, naming the
    instructions there are, instead of being priced as a guess."""
    b = TraceBuilder()
    x, y = b.tensor("x", "sbuf", (128, 512)), b.tensor("y", "sbuf", (128, 512))
    b.compute("vector", "tensor_tensr", [x], [y])
    with pytest.raises(ValueError, match=r"instruction 0: 'tensor_tensr' is not an instruction.*tensor_tensor"):
        estimate(b.build(), trn1)


def test_an_instruction_without_a_documented_cost_on_its_engine_is_priced_and_noted(trn1: HardwareProfile) -> None:
    b = TraceBuilder()
    x, y = b.tensor("x", "sbuf", (128, 512)), b.tensor("y", "sbuf", (128, 512))
    b.compute("vector", "iota", [x], [y])
    report = estimate(b.build(), trn1)
    assert report.latency > 0
    assert any("'iota'" in note and "vector" in note for note in report.notes)


def test_zeroing_a_psum_accumulator_is_folded_into_the_first_matmul(trn1: HardwareProfile) -> None:
    # nl.zeros(psum) + "+=" matmuls: the compiler sets the start-of-group flag instead of a memset
    b = TraceBuilder()
    busy_in = b.tensor("busy_in", "sbuf", (128, 4096))
    b.compute("vector", "reciprocal", [busy_in], [b.tensor("busy_out", "sbuf", (128, 4096))])
    st = b.tensor("st", "sbuf", (128, 128), dtype="bfloat16")
    mv = b.tensor("mv", "sbuf", (128, 512), dtype="bfloat16")
    acc = b.tensor("acc", "psum", (128, 512))
    b.compute("vector", "memset", [], [acc], attrs={"value": 0.0})
    b.matmul(st, mv, acc, accumulate=True)
    report = estimate(b.build(), trn1)
    sched = run(b.build(), trn1)
    assert sched.busy[1] == 0.0
    assert sched.start[2] == 0.0  # the matmul does not wait behind the busy Vector engine
    assert report.vector_engine_active_time == pytest.approx(sched.busy[0])
    ones = TraceBuilder()
    acc = ones.tensor("acc", "psum", (128, 512))
    ones.compute("vector", "memset", [], [acc], attrs={"value": 1.0})
    assert run(ones.build(), trn1).busy[0] > 0  # a real fill is still priced


def test_spill_reloads_are_issued_ahead_not_before_their_save(trn1: HardwareProfile) -> None:
    """2025 compiler (calibration set: bmm_softmax, gqa_full run at their engines' pace while they
    reload ~1 GB): a reload is prefetched into rotating buffers, so most reloading instructions start
    without waiting; the data goes back only after it was saved."""
    trace = _block_kernel(64, computed=True)
    sched = run(trace, trn1)
    reloaded = [i for i, count in enumerate(sched.plan.reload) if count]
    assert reloaded and all(sched.plan.reload_after[i] >= 0 for i in reloaded)
    costs = CostModel(trn1)
    serial = sum(costs.spill_dma(sched.plan.reload[i], 128).standalone + sched.busy[i] for i in reloaded)
    assert sched.end[reloaded[-1]] - sched.start[reloaded[0]] < 0.8 * serial  # reloads overlap the work


def test_reloads_run_ahead_only_as_far_as_the_free_sbuf_holds(trn1: HardwareProfile) -> None:
    """Each reload in flight ahead of its use needs a buffer of its own: where the live blocks leave no
    SBUF free, the reloads wait for their uses one by one instead of running `stream_buffers` deep."""
    trace = _block_kernel(64, computed=True)
    costs = CostModel(trn1)
    memory = trn1.memory
    plans = [plan_allocation(trace, memory.sbuf_usable_bytes_per_partition, memory.psum_bytes_per_partition,
                             memory.rotating_buffers) for _ in range(2)]
    assert plans[0].room  # the allocator noted what each reload leaves free
    plans[0].room = {i: memory.sbuf_usable_bytes_per_partition for i in plans[0].room}  # room for every buffer
    plans[1].room = dict.fromkeys(plans[1].room, 0)  # room for none ahead
    ample, none = (_ListScheduler(trace, trn1, costs, plan).run() for plan in plans)
    assert max(none.end) > max(ample.end)


def test_vector_and_gpsimd_take_turns_on_the_sbuf_port_on_trn1() -> None:
    """NC-v2 (fact sheet A.4): Vector and GpSimd cannot use SBUF at the same time; NC-v3 lifts that."""
    b = TraceBuilder()
    x, y, z, w = (b.tensor(n, "sbuf", (128, 512)) for n in "xyzw")
    b.compute("vector", "tensor_tensor", [x, x], [y], attrs={"op": "add"})
    b.compute("gpsimd", "tensor_tensor", [z, z], [w], attrs={"op": "add"})
    trace = b.build()
    one, two = load_hardware("trn1"), load_hardware("trn2")
    costs = CostModel(one)
    streaming = sum(costs.occupancy(inst) - costs.setup(inst) for inst in trace.instructions)
    assert estimate(trace, one).latency >= streaming  # their accesses serialised on the shared port
    assert estimate(trace, two).latency < sum(times(two, inst)[0] + times(two, inst)[1]
                                              for inst in trace.instructions)  # overlapped on trn2


def test_vector_and_scalar_take_turns_on_psum_on_trn1() -> None:
    """NC-v2 (fact sheet A.4): Vector and Scalar cannot use PSUM at the same time, so two independent
    reads of PSUM, one on each, run one after the other; outside PSUM, and on NC-v3, they overlap."""
    def two_reads(buffer: str) -> Trace:
        b = TraceBuilder()
        x, y = (b.tensor(n, buffer, (128, 512)) for n in "xy")
        u, v = (b.tensor(n, "sbuf", (128, 512)) for n in "uv")
        b.compute("vector", "tensor_copy", [x], [u])
        b.compute("scalar", "activation", [y], [v], attrs={"op": "exp"})
        return b.build()

    one, two = load_hardware("trn1"), load_hardware("trn2")
    in_psum = two_reads("psum")
    costs = CostModel(one)
    streaming = sum(costs.occupancy(inst) - costs.setup(inst) for inst in in_psum.instructions)
    assert estimate(in_psum, one).latency >= streaming  # their PSUM accesses serialised
    assert estimate(two_reads("sbuf"), one).latency < streaming  # SBUF: no such turn-taking
    assert estimate(in_psum, two).latency < sum(times(two, inst)[0] for inst in in_psum.instructions)


def test_a_gpsimd_access_waiting_for_its_input_does_not_hold_up_vectors_independent_work() -> None:
    """The shared SBUF port keeps the two engines' accesses apart in time, not in program order: a Vector
    instruction written after a GpSimd one that waits for a long Scalar result runs meanwhile."""
    b = TraceBuilder()
    x, a = (b.tensor(n, "sbuf", (128, 8192)) for n in "xa")  # Scalar's long instruction
    c, d, e = (b.tensor(n, "sbuf", (128, 2048)) for n in "cde")
    b.compute("scalar", "activation", [x], [a], attrs={"op": "exp"})
    b.compute("gpsimd", "tensor_tensor", [a, a], [e], attrs={"op": "add"})  # waits for it; 2048 wide
    b.compute("vector", "tensor_tensor", [c, c], [d], attrs={"op": "add"})
    trace = b.build()
    trn1 = load_hardware("trn1")
    scalar, gpsimd, vector = (times(trn1, inst)[0] for inst in trace.instructions)
    assert estimate(trace, trn1).latency < scalar + gpsimd + 0.5 * vector


def test_a_port_wait_that_rounds_short_of_the_blockers_end_still_ends() -> None:
    """`clear - setup + setup` can land one ulp below `clear` (3.9e-7 - 1.25e-7 + 1.25e-7 does): the wait
    loop once asked the port again from that start for ever (a random trace hung the property tests)."""
    from accelopt_core.perfmodel.scheduler import _Lane, _Port

    port, lane = _Port(), _Lane()
    port.book(0.0, 3.9e-7, 0)
    start, waited = port.place(lane, 0.0, 2.392857142857143e-7, 1.25e-7, 1)
    assert start == pytest.approx(2.65e-7) and waited == 0
