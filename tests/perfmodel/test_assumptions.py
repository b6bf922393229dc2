"""What the latency assumes the compiler does (perfmodel/assumptions.py), listed per source line.

A new user's tutorial matmul with two loops swapped was predicted faster than the tutorial's hand-blocked
versions because a load repeated in its inner loop was assumed removed, and nothing said so. Each decision
of the allocation plan is now an entry with its line and what it changes, in the profile, the text report
and the editor's hover."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from accelopt_core.hardware import HardwareProfile, load_hardware
from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
from accelopt_core.nki.trace import Trace
from accelopt_core.perfmodel import estimate
from accelopt_core.perfmodel.allocator import plan_allocation
from accelopt_core.perfmodel.assumptions import (
    DEAD,
    LOAD_REISSUED,
    LOOPS_MERGED,
    RELOADED,
    REPEATED_LOAD,
    REPEATED_TRANSPOSE,
    SPILLED,
    in_brief,
    on_line,
    plan_assumptions,
)

HEADER = """import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x, y):
"""
ROWS = 8
TILE_BYTES = 128 * 512 * 4
SMALL = [TensorSpec((ROWS, 128, 512), np.dtype(np.float32)), TensorSpec((128, 512), np.dtype(np.float32))]
BLOCKS = 64
BIG = [TensorSpec((BLOCKS, 128, 1024), np.dtype(np.float32))] * 2


@pytest.fixture(scope="module")
def trn1() -> HardwareProfile:
    return load_hardware("trn1")


def _trace(tmp_path: Path, body: str, specs: list[TensorSpec]) -> Trace:
    path = tmp_path / "kernel.py"
    path.write_text(HEADER + body)
    return run_kernel(load_kernel(str(path)), specs, {}, numeric=False).trace


def _line_of(trace: Trace, text: str, tmp_path: Path) -> int:
    lines = (tmp_path / "kernel.py").read_text().splitlines()
    return next(k for k, line in enumerate(lines, 1) if text in line)


REPEATED = """    out = nl.ndarray((8, 128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(8):
        w = nl.load(y)
        t = nl.load(x[i])
        nl.store(out[i], value=nl.multiply(t, w))
    return out
"""


def test_a_load_repeated_in_a_loop_that_does_not_need_it_is_an_assumption_on_its_line(
        tmp_path: Path, trn1: HardwareProfile) -> None:
    trace = _trace(tmp_path, REPEATED, SMALL)
    report = estimate(trace, trn1)
    line = _line_of(trace, "nl.load(y)", tmp_path)
    assert report.assumptions == [{
        "kind": REPEATED_LOAD, "line": line, "related_lines": [line], "instructions": ROWS - 1,
        "bytes_not_moved": (ROWS - 1) * TILE_BYTES, "bytes_added": 0,
        "description": report.assumptions[0]["description"]}]
    assert f"{(ROWS - 1) * TILE_BYTES:,} bytes not moved" in report.assumptions[0]["description"]
    # the bytes it says are not moved are the ones the HBM total leaves out
    assert report.hbm_read_bytes == (ROWS + 1) * TILE_BYTES


def test_a_kernel_whose_loads_all_differ_assumes_nothing(tmp_path: Path, trn1: HardwareProfile) -> None:
    body = REPEATED.replace("        w = nl.load(y)\n", "").replace("multiply(t, w)", "multiply(t, 2.0)")
    assert estimate(_trace(tmp_path, body, SMALL), trn1).assumptions == []


def test_a_repeated_transpose_names_the_transpose_it_reuses(tmp_path: Path, trn1: HardwareProfile) -> None:
    body = """    out = nl.ndarray((8, 128, 128), dtype=np.float32, buffer=nl.shared_hbm)
    w = nl.load(y[:, 0:128])
    for i in nl.affine_range(8):
        wt = nl.transpose(w)
        nl.store(out[i], value=nl.multiply(wt, 2.0))
    return out
"""
    trace = _trace(tmp_path, body, SMALL)
    kinds = {(a["kind"], a["line"], a["instructions"]) for a in estimate(trace, trn1).assumptions}
    assert kinds == {(REPEATED_TRANSPOSE, _line_of(trace, "nl.transpose(w)", tmp_path), ROWS - 1)}


def _producer(consumer_read: str) -> str:
    return f"""    out = nl.ndarray((64, 128, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    h = nl.ndarray((64, nl.par_dim(128), 1024), dtype=np.float32, buffer=nl.sbuf)
    for i in nl.affine_range(64):
        t = nl.load(x[i])
        h[i] = nl.exp(t)
    for j in nl.affine_range(64):
        nl.store(out[j], value=nl.multiply(h[{consumer_read}], 2.0))
    return out
"""


def test_loops_merged_are_an_assumption_on_each_loop_line(tmp_path: Path, trn1: HardwareProfile) -> None:
    """The producer's 256 KiB/partition of blocks fit only because its consumer runs in step with it."""
    trace = _trace(tmp_path, _producer("j"), BIG)
    report = estimate(trace, trn1)
    producer, consumer = _line_of(trace, "for i in", tmp_path), _line_of(trace, "for j in", tmp_path)
    merged = [(a["line"], a["related_lines"], a["instructions"]) for a in report.assumptions
              if a["kind"] == LOOPS_MERGED]
    assert merged == [(producer, [consumer], 1), (consumer, [producer], 1)]
    assert f"{report.sbuf_peak_live_bytes_per_partition:,} merged" in on_line(report.assumptions, producer)[0][
        "description"]


def test_spill_entries_add_up_to_the_spill_totals(tmp_path: Path, trn1: HardwareProfile) -> None:
    """A consumer out of step cannot merge: its blocks spill, and the entries say where and how much."""
    report = estimate(_trace(tmp_path, _producer("63 - j"), BIG), trn1)
    added = {kind: sum(a["bytes_added"] for a in report.assumptions if a["kind"] == kind)
             for kind in (SPILLED, RELOADED, LOOPS_MERGED)}
    assert added == {SPILLED: report.spill_save_bytes, RELOADED: report.spill_reload_bytes, LOOPS_MERGED: 0}
    assert report.spill_save_bytes > 0


def test_loads_issued_again_add_up_to_the_extra_hbm_reads(tmp_path: Path, trn1: HardwareProfile) -> None:
    """Loaded blocks that do not fit are not spilled: their load is issued again at each use."""
    body = """    out = nl.ndarray((64, 128, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    h = nl.ndarray((64, nl.par_dim(128), 1024), dtype=np.float32, buffer=nl.sbuf)
    for i in nl.affine_range(64):
        h[i] = nl.load(x[i])
    for j in nl.affine_range(64):
        nl.store(out[j], value=nl.multiply(h[63 - j], 2.0))
    return out
"""
    trace = _trace(tmp_path, body, BIG)
    memory = trn1.memory
    plan = plan_allocation(trace, memory.sbuf_usable_bytes_per_partition, memory.psum_bytes_per_partition, 2)
    again = [a for a in plan_assumptions(trace, plan) if a.kind == LOAD_REISSUED]
    assert again and sum(a.bytes_added for a in again) == sum(plan.refetch) > 0
    assert {a.line for a in again} == {_line_of(trace, "nl.load(x[i])", tmp_path)}


def test_an_instruction_only_feeding_removed_repeats_is_listed_as_dead(tmp_path: Path, trn1: HardwareProfile) -> None:
    trace = _trace(tmp_path, REPEATED, SMALL)
    memory = trn1.memory
    plan = plan_allocation(trace, memory.sbuf_usable_bytes_per_partition, memory.psum_bytes_per_partition, 2)
    multiply = next(i for i, inst in enumerate(trace.instructions) if inst.line == _line_of(trace, "store", tmp_path)
                    and inst.reads[0].buffer != "hbm")
    dead = [a for a in plan_assumptions(trace, dataclasses.replace(plan, dead=[multiply])) if a.kind == DEAD]
    assert [(a.line, a.instructions, a.bytes_not_moved) for a in dead] == [
        (trace.instructions[multiply].line, 1, sum(acc.nbytes for acc in trace.instructions[multiply].reads))]


def test_in_brief_names_each_kind_with_its_lines() -> None:
    listed = [{"kind": REPEATED_LOAD, "line": 10}, {"kind": LOOPS_MERGED, "line": 9},
              {"kind": LOOPS_MERGED, "line": 14}, {"kind": REPEATED_LOAD, "line": 10}]
    assert in_brief(listed) == f"{REPEATED_LOAD} (line 10) · {LOOPS_MERGED} (lines 9, 14)"
    assert in_brief([]) is None


def test_a_single_load_loaded_again_is_listed_on_the_line_that_uses_it(tmp_path: Path, trn1: HardwareProfile) -> None:
    """The plan keeps the load statement only for loads re-issued at every use; a block of a single load that
    gave way comes back before its next use, and the entry says so on that line."""
    trace = _trace(tmp_path, REPEATED, SMALL)
    memory = trn1.memory
    plan = plan_allocation(trace, memory.sbuf_usable_bytes_per_partition, memory.psum_bytes_per_partition, 2)
    use = len(trace.instructions) - 1
    refetch = [0] * use + [TILE_BYTES]
    again = [a for a in plan_assumptions(trace, dataclasses.replace(plan, refetch=refetch)) if a.kind == LOAD_REISSUED]
    assert [(a.line, a.related_lines, a.bytes_added) for a in again] == [
        (trace.instructions[use].line, (trace.instructions[use].line,), TILE_BYTES)]
    assert "assumed loaded again before this line" in again[0].description
