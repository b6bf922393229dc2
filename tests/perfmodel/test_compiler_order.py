"""The order the allocator walks a kernel in, as the 2025 compiler runs it (allocator.py, mechanism 4),
and what the spill counters count, on small kernels in the compiler's block-tensor style.

A producer loop fills a 256 KiB-per-partition block tensor (more than SBUF's 176 KiB) and consumer
loops read it back. Where the consumer reads block j in its iteration j, the two loops fuse and only a
block or two is ever live; where it reads them in reverse, nothing may fuse and the blocks spill.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accelopt_core.hardware import HardwareProfile, load_hardware
from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
from accelopt_core.nki.replay import replay
from accelopt_core.nki.tape import tape_to_plain
from accelopt_core.nki.trace import Trace
from accelopt_core.perfmodel import estimate
from accelopt_core.perfmodel.allocator import _BlockIndex, _fused_order

BLOCKS = 64
BLOCK_BYTES = 128 * 1024 * 4
HEADER = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x, y):
    out = nl.ndarray((64, 128, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    h = nl.ndarray((64, nl.par_dim(128), 1024), dtype=np.float32, buffer=nl.sbuf)
    for i in nl.affine_range(64):
        t = nl.load(x[i])
        h[i] = nl.exp(t)
"""


def _consumer(read: str, scale: float) -> str:
    return f"""    for j in nl.affine_range(64):
        nl.store(out[j], value=nl.multiply(h[{read}], {scale}))
"""


SPEC = TensorSpec((BLOCKS, 128, 1024), np.dtype(np.float32))


def _trace(tmp_path: Path, body: str, record: bool = False) -> Trace:
    path = tmp_path / "kernel.py"
    path.write_text(HEADER + body + "    return out\n")
    return run_kernel(load_kernel(str(path)), [SPEC, SPEC], {}, numeric=False, record=record).trace


@pytest.fixture(scope="module")
def trn1() -> HardwareProfile:
    return load_hardware("trn1")


def test_a_consumer_loop_in_step_with_its_producer_fuses_and_nothing_spills(tmp_path: Path,
                                                                            trn1: HardwareProfile) -> None:
    report = estimate(_trace(tmp_path, _consumer("j", 2.0)), trn1)
    assert report.spill_save_bytes == report.spill_reload_bytes == 0
    assert report.sbuf_peak_live_bytes_per_partition < trn1.memory.sbuf_usable_bytes_per_partition


def test_the_trusted_sides_replay_is_priced_as_the_recording(tmp_path: Path, trn1: HardwareProfile) -> None:
    """A trace-only profile prices the trace the trusted side replays from the tape: it must hold the same
    loop statements, or the compiler's order (fusion) is lost there and the product says another number."""
    recorded = _trace(tmp_path, _consumer("j", 2.0), record=True)
    replayed = replay(tape_to_plain(recorded), [SPEC, SPEC], "trn1", numeric=False).trace
    assert [(loop.kind, loop.trip_count, loop.line) for loop in replayed.loops] == [
        (loop.kind, loop.trip_count, loop.line) for loop in recorded.loops]
    assert estimate(replayed, trn1) == estimate(recorded, trn1)
    assert estimate(replayed, trn1).spill_save_bytes == 0


def test_a_consumer_out_of_step_does_not_fuse_and_the_blocks_spill(tmp_path: Path, trn1: HardwareProfile) -> None:
    trace = _trace(tmp_path, _consumer("63 - j", 2.0))
    assert _fused_order(trace, _BlockIndex(trace), [False] * len(trace)) is None
    report = estimate(trace, trn1)
    assert report.sbuf_peak_live_bytes_per_partition > trn1.memory.sbuf_usable_bytes_per_partition
    assert report.spill_save_bytes > 0 and report.spill_reload_bytes == report.spill_save_bytes


def test_loops_that_share_nothing_keep_their_order(tmp_path: Path) -> None:
    """Only a consumer fuses: a loop over the other input does not join the producer."""
    other = """    for j in nl.affine_range(64):
        nl.store(out[j], value=nl.load(y[j]))
"""
    trace = _trace(tmp_path, other + _consumer("63 - j", 2.0))
    assert _fused_order(trace, _BlockIndex(trace), [False] * len(trace)) is None


def test_what_lies_between_moves_out_of_the_way(tmp_path: Path) -> None:
    """A loop between producer and consumer that neither reads nor writes what the producer does runs
    before the fused pair; the order keeps every instruction once."""
    between = """    for j in nl.affine_range(64):
        nl.store(out[j], value=nl.load(y[j]))
"""
    trace = _trace(tmp_path, between + _consumer("j", 2.0))
    order = _fused_order(trace, _BlockIndex(trace), [False] * len(trace))
    assert order is not None and sorted(order) == list(range(len(trace)))
    loop_of = [inst.loops[0][0].line for inst in trace.instructions]
    producer, between_loop, consumer = dict.fromkeys(loop_of)  # in program order
    walked = [loop_of[i] for i in order]
    moved = walked.count(between_loop)
    assert walked[:moved] == [between_loop] * moved
    assert walked.index(consumer) < len(walked) - walked[::-1].index(producer)  # interleaved, not after it


def test_a_block_reloaded_and_not_written_since_is_not_saved_again(tmp_path: Path, trn1: HardwareProfile) -> None:
    """Two out-of-step consumers: the blocks come back twice, but each is saved once."""
    report = estimate(_trace(tmp_path, _consumer("63 - j", 2.0) + _consumer("63 - j", 3.0)), trn1)
    assert 0 < report.spill_save_bytes <= BLOCKS * BLOCK_BYTES
    assert report.spill_reload_bytes > report.spill_save_bytes


def test_the_kernels_own_scratch_hbm_counts_as_spill_not_as_overflow(tmp_path: Path, trn1: HardwareProfile) -> None:
    """neuron-profile counts traffic to a kernel's private HBM buffer (a compiler-style `_spill` tensor in
    `nl.hbm`) as spill: trn1's swiglu counters hold its 50.3 MB `_spill_163` in both directions. The HBM
    totals count it once, and the SBUF does not overflow for it."""
    scratch = """    s = nl.ndarray((64, 128, 1024), dtype=np.float32, buffer=nl.hbm)
    for j in nl.affine_range(64):
        nl.store(s[j], value=nl.load(y[j]))
    for j in nl.affine_range(64):
        nl.store(out[j], value=nl.load(s[j]))
"""
    report = estimate(_trace(tmp_path, scratch), trn1)
    assert report.spill_save_bytes == report.spill_reload_bytes == BLOCKS * BLOCK_BYTES
    assert report.hbm_write_bytes == 2 * BLOCKS * BLOCK_BYTES  # the scratch and the output
    assert report.sbuf_peak_live_bytes_per_partition < trn1.memory.sbuf_usable_bytes_per_partition
