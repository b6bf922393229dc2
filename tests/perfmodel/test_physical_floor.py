"""The physical floor of the executed work (perfmodel/floor.py) and the reuse that may not go below it.

Each attack is plain NKI written to look fast, as a reviewer tried it: pieces of one load sharing a bounding
box, a write through a reshaped view read back. None may get a latency below what the kernel executes, nor
priced HBM traffic below the distinct bytes its DMAs move."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from accelopt_core.hardware import HardwareProfile, load_hardware
from accelopt_core.nki import load_kernel, run_kernel
from accelopt_core.nki.trace import Trace
from accelopt_core.perfmodel import estimate, peak_percent
from accelopt_core.perfmodel.floor import ByteUnion, box_runs, distinct_hbm_bytes, physical_floor

HEADER = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 1024), dtype=np.float32, buffer=nl.shared_hbm)
"""
TENSOR_BYTES = 128 * 1024 * 4


@pytest.fixture(scope="module")
def trn1() -> HardwareProfile:
    return load_hardware("trn1")


def _run(tmp_path: Path, body: str) -> tuple[Trace, np.ndarray, np.ndarray]:
    path = tmp_path / "kernel.py"
    path.write_text(HEADER + body + "    return out\n")
    x = np.random.default_rng(1).random((128, 1024), dtype=np.float32)
    run = run_kernel(load_kernel(str(path)), [x], {}, numeric=True)
    return run.trace, x, run.outputs[0]


CHECKERBOARD = """
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    for k in nl.static_range(2):
        cols = 2 * i_f + (i_p + k) % 2  # piece k: every other element, both pieces over the whole tensor
        t = nl.load(x[i_p, cols])
        nl.store(out[i_p, cols], value=nl.exp(t))
"""


def test_disjoint_pieces_of_one_bounding_box_are_all_read(tmp_path, trn1) -> None:
    trace, x, out = _run(tmp_path, CHECKERBOARD)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)  # the kernel is right: only its price was wrong
    report = estimate(trace, trn1)
    assert report.hbm_distinct_read_bytes == TENSOR_BYTES
    assert report.hbm_read_bytes == TENSOR_BYTES  # was half: the second piece counted as a repeat of the first
    assert not report.model_below_floor


def test_the_same_elements_loaded_again_are_still_a_repeat(tmp_path, trn1) -> None:
    trace, x, out = _run(tmp_path, """
    a = nl.load(x[:, 0:1024:2])
    b = nl.load(x[:, 0:1024:2])
    nl.store(out[:, 0:1024:2], value=nl.add(a, b))
    nl.store(out[:, 1:1024:2], value=nl.exp(a))
""")
    np.testing.assert_allclose(out[:, 0::2], 2 * x[:, 0::2], rtol=1e-6)
    report = estimate(trace, trn1)
    assert report.hbm_read_bytes == report.hbm_distinct_read_bytes == TENSOR_BYTES // 2


def test_a_write_through_a_reshaped_view_makes_the_next_read_new_data(tmp_path, trn1) -> None:
    trace, x, out = _run(tmp_path, """
    nl.store(out, value=nl.load(x))
    first = nl.load(out)
    flat = out.reshape((64, 2048))
    nl.store(flat, value=nl.exp(nl.load(x.reshape((64, 2048)))))
    again = nl.load(out)  # the same elements as `first`, rewritten in between through `flat`
    nl.store(out, value=nl.add(first, again))
""")
    np.testing.assert_allclose(out, x + np.exp(x), rtol=1e-6)
    report = estimate(trace, trn1)
    assert report.hbm_read_bytes == 4 * TENSOR_BYTES  # x twice, out twice: the read-back is not a repeat


def test_distinct_bytes_count_each_element_once_through_any_view(tmp_path) -> None:
    trace, _, _ = _run(tmp_path, """
    for k in nl.static_range(3):
        nl.store(out, value=nl.load(x))
    t = nl.load(x.reshape((64, 2048))[0:32])
    nl.store(out.reshape((256, 512))[0:128], value=t.reshape((128, 512)))
""")
    assert distinct_hbm_bytes(trace) == (TENSOR_BYTES, TENSOR_BYTES)


def test_the_floor_is_the_slowest_resource_at_peak(tmp_path, trn1) -> None:
    trace, _, _ = _run(tmp_path, "    nl.store(out, value=nl.exp(nl.load(x)))\n")
    floor = physical_floor(trace, trn1)
    assert floor.times["hbm"] == pytest.approx(2 * TENSOR_BYTES / trn1.peak.hbm_bandwidth)
    # exp: 128 x 1024 elements over 128 lanes at one element per lane per cycle
    assert floor.times["scalar"] == pytest.approx(1024 / trn1.scalar.clock_hz)
    assert floor.times["tensor"] == floor.times["vector"] == 0.0
    assert floor.time == max(floor.times.values()) and floor.bound == "hbm"


def test_matmul_floor_is_its_flops_at_the_pe_peak_for_its_dtype(tmp_path, trn1) -> None:
    path = tmp_path / "mm.py"
    path.write_text("""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    ps = nl.matmul(nl.load(a), nl.load(b), transpose_x=True)
    nl.store(out, value=ps)
    return out
""")
    for dtype, factor in ((np.float32, 4), (np.float16, 1)):
        a, b = np.ones((128, 128), dtype), np.ones((128, 512), dtype)
        trace = run_kernel(load_kernel(str(path)), [a, b], {}, numeric=False).trace
        flops = 2 * 128 * 128 * 512
        assert physical_floor(trace, trn1).times["tensor"] == pytest.approx(
            flops * factor / (2 * 128 * 128 * trn1.tensor.clock_hz))


def test_a_model_below_the_floor_is_flagged_and_the_latency_is_the_floor(tmp_path, trn1) -> None:
    # a profile whose DMA engines outrun its own HBM: the schedule goes below what HBM can serve
    dma = dataclasses.replace(trn1.dma, engine_bandwidth=1e15, engine_element_rate=1e15, fixed_cost_s=0.0)
    fast = dataclasses.replace(trn1, dma=dma, memory=dataclasses.replace(trn1.memory, hbm_bandwidth=1e15))
    trace, _, _ = _run(tmp_path, "    nl.store(out, value=nl.load(x))\n")
    report = estimate(trace, fast)
    floor = physical_floor(trace, fast)
    assert report.model_below_floor
    assert report.latency == pytest.approx(floor.time) and report.physical_floor_bound == "hbm"
    assert any(note.startswith("model bug") for note in report.notes)
    # the task's work is what the kernel moves: % of peak is then at most 100
    assert peak_percent(report, 0.0, 0.0, 2 * TENSOR_BYTES, fast) <= 100.0 + 1e-9
    assert not estimate(trace, trn1).model_below_floor


def test_profile_json_carries_the_floor(tmp_path, trn1) -> None:
    trace, _, _ = _run(tmp_path, "    nl.store(out, value=nl.load(x))\n")
    fields = estimate(trace, trn1).to_dict()
    assert fields["physical_floor_time"] > 0 and fields["model_below_floor"] is False
    assert fields["hbm_distinct_read_bytes"] == fields["hbm_distinct_write_bytes"] == TENSOR_BYTES


def test_live_sizes_tracks_the_largest_total_as_spans_come_and_go() -> None:
    from accelopt_core.perfmodel.allocator import _LiveSizes

    rng = np.random.default_rng(3)
    n = 37
    live, brute = _LiveSizes(n), np.zeros(n)
    spans = []
    for _ in range(200):
        if spans and rng.random() < 0.3:
            first, last, size = spans.pop(int(rng.integers(len(spans))))
            size = -size
        else:
            first = int(rng.integers(n))
            last, size = int(rng.integers(first, n)), float(rng.integers(1, 100))
            spans.append((first, last, size))
        live.add(first, last, size)
        brute[first:last + 1] += size
        assert live.most() == pytest.approx(max(0.0, brute.max()) if spans else 0.0, abs=1e-9)


def test_repeated_loads_on_lines_of_their_own_are_each_a_repeat(tmp_path, trn1) -> None:
    lines = "".join(f"    t{i} = nl.load(x[0:1, 0:1])\n" for i in range(300))
    trace, _, _ = _run(tmp_path, lines + "    nl.store(out[0:1, 0:1], value=t0)\n")
    report = estimate(trace, trn1)
    assert report.hbm_read_bytes == report.hbm_distinct_read_bytes == 4


def test_work_the_compiler_places_on_vector_or_scalar_counts_on_both_together(tmp_path, trn1) -> None:
    trace, _, _ = _run(tmp_path, "    nl.store(out, value=nl.multiply(nl.load(x), 2.0))\n")
    assert trace.instructions[1].attrs["engines"]  # an affine tensor_scalar: the compiler picks the engine
    floor = physical_floor(trace, trn1)
    assert floor.times["vector"] == floor.times["scalar"] == 0.0
    faster = min(trn1.vector.clock_hz, trn1.scalar.clock_hz, key=lambda hz: 1024 / hz)
    assert floor.times["vector+scalar"] == pytest.approx(1024 / faster / 2)


def _copies_of_two_pieces(piece_elements: tuple) -> Trace:
    """A tile loaded whole, then copied twice from pieces with one bounding box (their exact elements given)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from perf_trace_builder import TraceBuilder

    b = TraceBuilder()
    x = b.tensor("x", "hbm", (128, 1024))
    t, u, v = b.tensor("t", "sbuf", (128, 1024)), b.tensor("u", "sbuf", (128, 512)), b.tensor("v", "sbuf", (128, 512))
    b.dma(x, t)
    for out, elements in zip((u, v), piece_elements, strict=True):
        read = dataclasses.replace(b.access(t), shape=(128, 512), nbytes=128 * 512 * 4, elements=elements)
        b.compute("vector", "tensor_copy", [read], [out])
    return b.build()


def test_copies_of_disjoint_on_chip_pieces_of_one_box_are_both_executed(trn1) -> None:
    from accelopt_core.perfmodel.allocator import plan_allocation

    disjoint = plan_allocation(_copies_of_two_pieces((("gather", 0), ("gather", 1))), 180224, 16384, 2)
    assert disjoint.same_as == [-1, -1, -1]
    # the same box read whole twice is the same value: the second copy is the compiler's to drop
    same = plan_allocation(_copies_of_two_pieces((None, None)), 180224, 16384, 2)
    assert same.same_as == [-1, -1, 1]


def test_an_access_is_keyed_by_its_set_of_elements(tmp_path) -> None:
    trace, _, _ = _run(tmp_path, """
    i_p = nl.arange(128)[:, None, None]
    whole = nl.load(x[i_p, 128 * nl.arange(8)[None, :, None] + nl.arange(128)[None, None, :]])  # every column
    half = nl.load(x[nl.arange(128)[:, None], 2 * nl.arange(512)[None, :] + (nl.arange(128)[:, None] % 2)])
    strided = nl.load(x[:, 0:1024:2])
    nl.store(out[:, 0:512], value=strided)
    nl.store(out[:, 512:1024], value=half)
""")
    loads = [inst.reads[0] for inst in trace.instructions if inst.reads and inst.reads[0].buffer == "hbm"]
    assert loads[0].elements is None  # a gather that covers its box is the box
    assert loads[1].elements[0] == "gather" and len(loads[1].gathered) == 128 * 512
    assert loads[2].elements == ((0, 128, 1), (0, 1024, 2))


def test_a_box_is_the_contiguous_runs_it_selects() -> None:
    starts, length = box_runs((4, 8), ((1, 3, 1), (2, 6, 1)))  # rows 1-2, columns 2-5
    assert starts.tolist() == [10, 18] and length == 4
    starts, length = box_runs((4, 8), ((1, 3, 1),))  # whole rows join into one run
    assert starts.tolist() == [8] and length == 16
    starts, length = box_runs((4, 8), (2, (0, 8, 2)))  # every other column of row 2
    assert starts.tolist() == [16, 18, 20, 22] and length == 1
    starts, length = box_runs((4, 8), ((3, None, -2), 5))  # rows 3 and 1 of column 5, a negative step
    assert starts.tolist() == [29, 13] and length == 1


def test_the_union_counts_overlapping_intervals_once_across_merges(monkeypatch) -> None:
    monkeypatch.setattr(ByteUnion, "MERGE_AT", 2)  # merge after every other batch
    union = ByteUnion()
    union.add(np.array([0, 100]), 10)
    union.add(np.array([5]), 10)  # overlaps [0, 10): [0, 15)
    union.add(np.array([15, 200]), 5)  # touches [0, 15): [0, 20)
    union.add(np.array([105]), 1)  # inside [100, 110)
    assert union.size() == 20 + 10 + 5
