"""Properties any sane schedule must have, on random traces (hypothesis).

* appending an instruction never makes the kernel faster (the scheduler is greedy in program order,
  so nothing placed earlier can move);
* the latency never exceeds running every instruction alone, one after the other.

The random kernels stay far below SBUF capacity, so no spill traffic is involved.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from perf_trace_builder import TraceBuilder

from accelopt_core.hardware import load_hardware
from accelopt_core.nki.trace import Loop, LoopKind, Trace
from accelopt_core.perfmodel import CostModel, estimate

HARDWARE = [load_hardware("trn1"), load_hardware("trn2")]
UNARY = [("vector", "tensor_scalar"), ("vector", "tensor_copy"), ("vector", "reciprocal"),
         ("vector", "tensor_reduce"), ("scalar", "activation"), ("scalar", "tensor_copy"),
         ("gpsimd", "tensor_scalar"), ("gpsimd", "iota"), ("vector", "memset")]


@dataclass(frozen=True)
class Op:
    kind: str  # load, store, unary, binary, matmul, evict
    a: int
    b: int
    c: int
    lo: int
    width: int
    rows: int
    flag: bool
    context: str  # "none", "affine" or "sequential"
    next_iteration: bool


ops = st.builds(
    Op,
    kind=st.sampled_from(["load", "store", "unary", "binary", "matmul", "evict"]),
    a=st.integers(0, 3), b=st.integers(0, 3), c=st.integers(0, len(UNARY) - 1),
    lo=st.integers(0, 3), width=st.sampled_from([1, 2, 4]), rows=st.sampled_from([1, 32, 128]),
    flag=st.booleans(), context=st.sampled_from(["none", "affine", "sequential"]),
    next_iteration=st.booleans(),
)


def build(program: list[Op]) -> Trace:
    b = TraceBuilder()
    inputs = [b.tensor("in0", "hbm", (128, 512)), b.tensor("in1", "hbm", (128, 512))]
    output = b.tensor("out", "hbm", (128, 512))
    sbuf = [b.tensor(f"s{i}", "sbuf", (128, 512)) for i in range(4)]
    stationary = b.tensor("st", "sbuf", (128, 128))
    psum = [b.tensor(f"p{i}", "psum", (128, 512)) for i in range(2)]
    loops: dict[str, Loop] = {"affine": b.loop(LoopKind.AFFINE, 1, line=2),
                              "sequential": b.loop(LoopKind.SEQUENTIAL, 1, line=3)}
    iteration = {"affine": 0, "sequential": 0}
    for line, op in enumerate(program, start=10):
        if op.context == "none":
            b.leave()
        else:
            if op.next_iteration:
                iteration[op.context] += 1
            b.enter((loops[op.context], iteration[op.context]))
        cols = (op.lo * 128, min(512, (op.lo + op.width) * 128))
        box = ((0, op.rows), cols)
        if op.kind == "load":
            b.dma(inputs[op.a % 2], sbuf[op.b], src_region=box, dst_region=box, line=line, transpose=op.flag)
        elif op.kind == "store":
            b.dma(sbuf[op.a], output, src_region=box, dst_region=box, line=line)
        elif op.kind == "unary":
            engine, name = UNARY[op.c]
            b.compute(engine, name, [b.access(sbuf[op.a], box)], [b.access(sbuf[op.b], box)], line=line,
                      attrs={"reduce": op.flag})
        elif op.kind == "binary":
            b.compute("vector", "tensor_tensor", [b.access(sbuf[op.a], box), b.access(sbuf[op.b], box)],
                      [b.access(sbuf[(op.a + op.b) % 4], box)], line=line, attrs={"op": "add"})
        elif op.kind == "matmul":
            b.matmul(stationary, sbuf[op.a], psum[op.b % 2], accumulate=op.flag,
                     moving_region=((0, 128), cols), psum_region=((0, 128), cols), line=line)
        else:
            b.compute("vector", "tensor_copy", [b.access(psum[op.a % 2], box)], [b.access(sbuf[op.b], box)],
                      line=line)
    for kind, loop in loops.items():
        loop.trip_count = iteration[kind] + 1
    return b.build()


def prefix(trace: Trace, count: int) -> Trace:
    return Trace(instructions=trace.instructions[:count], tensors=trace.tensors, loops=trace.loops)


@settings(max_examples=120, deadline=None)
@given(program=st.lists(ops, min_size=1, max_size=24), generation=st.integers(0, 1))
def test_appending_an_instruction_never_lowers_latency(program: list[Op], generation: int) -> None:
    hw = HARDWARE[generation]
    trace = build(program)
    latencies = [estimate(prefix(trace, k), hw).latency for k in range(len(trace.instructions) + 1)]
    for before, after in itertools.pairwise(latencies):
        assert after >= before


@settings(max_examples=120, deadline=None)
@given(program=st.lists(ops, min_size=1, max_size=40), generation=st.integers(0, 1))
def test_latency_never_exceeds_running_everything_alone_in_turn(program: list[Op], generation: int) -> None:
    hw = HARDWARE[generation]
    trace = build(program)
    costs = CostModel(hw)
    serial = sum(costs.standalone(inst) for inst in trace.instructions)
    report = estimate(trace, hw)
    assert 0 < report.latency <= serial * (1 + 1e-9)
    # and never less than the busiest compute engine's own work
    assert report.latency >= max(report.engine_busy_time[e] for e in ("tensor", "vector", "scalar", "gpsimd"))
