"""Performance-model speed on synthetic tiled-matmul traces.

The trace imitates a naive tiled fp32 matmul C = A @ B: for every 128x512 output tile, K/128 pairs
of loads (a 128x128 stationary tile of A^T and a 128x512 moving tile of B) each followed by a
matmul accumulating into PSUM, then a PSUM->SBUF copy and a store. At 4096x5120 @ 5120x12288 that
is about 94k instructions, the size of trace a real NKIBench kernel produces; the largest size is about 1M.

A second family is what an untrusted kernel can send the model: N one-element loads of the same element,
each on a source line of its own (the allocator's reuse analysis and the per-line report see N lines). The
time of both must grow about linearly; the last lines give the exponent of each family's growth.

Each size prints the best wall time and the best CPU time of the process: on a machine shared with
other work the wall time grows with the load, the CPU time much less, so pairs of runs compare
better by it.

Usage: python3 benchmarks/perfmodel_speed.py [--hardware trn1] [--repeat 3]  (the 1M case runs once)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accelopt_core.hardware import HardwareProfile, load_hardware
from accelopt_core.nki.trace import Access, Instruction, Loop, LoopKind, Op, TensorInfo, Trace
from accelopt_core.perfmodel import PerfReport, estimate

SIZES: tuple[tuple[int, int, int], ...] = ((1024, 2048, 3072), (2048, 5120, 6144), (4096, 5120, 12288),
                                           (8192, 14336, 24576))
LINES = (2500, 5000, 10000, 20000)
TILE_M, TILE_K, TILE_N = 128, 128, 512


def matmul_trace(m: int, k: int, n: int) -> Trace:
    """The instruction trace of a naive tiled fp32 matmul with loads inside the k loop."""
    trace = Trace(kernel_file="synthetic_matmul.py", kernel_name="matmul")

    def tensor(name: str, buffer: str, shape: tuple[int, ...], nest: tuple[tuple[Loop, int], ...]) -> int:
        tid = len(trace.tensors) + 1
        per_partition = 0 if buffer == "hbm" else 4 * shape[1]
        trace.tensors[tid] = TensorInfo(tid, name, buffer, shape, "float32", 0 if buffer != "hbm" else -1,
                                        per_partition, 1, nest)
        return tid

    def access(tid: int, region: tuple[tuple[int, int], ...], contiguous: int) -> Access:
        info = trace.tensors[tid]
        shape = tuple(hi - lo for lo, hi in region)
        return Access(tid, info.buffer, "float32", shape, region, 4 * shape[0] * shape[1], contiguous)

    def emit(engine: str, op: Op, reads: tuple[Access, ...], writes: tuple[Access, ...], free: int, flops: int,
             line: int, nest: tuple[tuple[Loop, int], ...], attrs: dict[str, object]) -> None:
        trace.instructions.append(Instruction(len(trace.instructions), engine, op, reads, writes, 128, free, flops,
                                              line, nest, attrs, "float32"))

    a_t = tensor("a_t", "hbm", (k, m), ())
    b = tensor("b", "hbm", (k, n), ())
    c = tensor("c", "hbm", (m, n), ())
    m_loop = Loop(1, LoopKind.AFFINE, m // TILE_M, 10, None)
    trace.loops.append(m_loop)
    for mi in range(m // TILE_M):
        n_loop = Loop(len(trace.loops) + 1, LoopKind.AFFINE, n // TILE_N, 11, m_loop)
        trace.loops.append(n_loop)
        for ni in range(n // TILE_N):
            outer = ((m_loop, mi), (n_loop, ni))
            psum = tensor("acc", "psum", (TILE_M, TILE_N), outer)
            psum_box = ((0, TILE_M), (0, TILE_N))
            k_loop = Loop(len(trace.loops) + 1, LoopKind.AFFINE, k // TILE_K, 13, n_loop)
            trace.loops.append(k_loop)
            for ki in range(k // TILE_K):
                nest = (*outer, (k_loop, ki))
                rows = (ki * TILE_K, (ki + 1) * TILE_K)
                lhs = tensor("lhsT", "sbuf", (TILE_K, TILE_M), nest)
                rhs = tensor("rhs", "sbuf", (TILE_K, TILE_N), nest)
                lhs_box = ((0, TILE_K), (0, TILE_M))
                rhs_box = ((0, TILE_K), (0, TILE_N))
                emit("dma", Op.DMA_COPY, (access(a_t, (rows, (mi * TILE_M, (mi + 1) * TILE_M)), 4 * TILE_M),),
                     (access(lhs, lhs_box, 4 * TILE_M),), TILE_M, 0, 14, nest,
                     {"direction": "hbm_to_sbuf", "transpose": False})
                emit("dma", Op.DMA_COPY, (access(b, (rows, (ni * TILE_N, (ni + 1) * TILE_N)), 4 * TILE_N),),
                     (access(rhs, rhs_box, 4 * TILE_N),), TILE_N, 0, 15, nest,
                     {"direction": "hbm_to_sbuf", "transpose": False})
                reads = (access(lhs, lhs_box, 4 * TILE_M), access(rhs, rhs_box, 4 * TILE_N))
                if ki:
                    reads = (*reads, access(psum, psum_box, 4 * TILE_N))
                emit("tensor", Op.NC_MATMUL, reads, (access(psum, psum_box, 4 * TILE_N),), TILE_N,
                     2 * TILE_K * TILE_M * TILE_N, 16, nest,
                     {"stationary_free": TILE_M, "moving_free": TILE_N, "contraction": TILE_K,
                      "accumulate": ki > 0, "is_transpose": False})
            res = tensor("res", "sbuf", (TILE_M, TILE_N), outer)
            res_box = ((0, TILE_M), (0, TILE_N))
            emit("vector", Op.TENSOR_COPY, (access(psum, psum_box, 4 * TILE_N),), (access(res, res_box, 4 * TILE_N),),
                 TILE_N, 0, 17, outer, {})
            out_box = ((mi * TILE_M, (mi + 1) * TILE_M), (ni * TILE_N, (ni + 1) * TILE_N))
            emit("dma", Op.DMA_COPY, (access(res, res_box, 4 * TILE_N),), (access(c, out_box, 4 * TILE_N),), TILE_N, 0,
                 18, outer, {"direction": "sbuf_to_hbm", "transpose": False})
    return trace


def repeated_loads_trace(count: int) -> Trace:
    """`count` loads of the same element, each on its own source line, into tiles of their own; one store."""
    trace = Trace(kernel_file="synthetic_lines.py", kernel_name="lines")
    trace.tensors[1] = TensorInfo(1, "x", "hbm", (128, 1), "float32", -1, 0, 1, ())
    trace.tensors[2] = TensorInfo(2, "out", "hbm", (1, 1), "float32", -1, 0, 1, ())
    box = ((0, 1), (0, 1))
    for i in range(count):
        tid = len(trace.tensors) + 1
        trace.tensors[tid] = TensorInfo(tid, f"t{i}", "sbuf", (1, 1), "float32", 0, 4, 1, ())
        trace.instructions.append(Instruction(i, "dma", Op.DMA_COPY, (Access(1, "hbm", "float32", (1, 1), box, 4, 4),),
                                              (Access(tid, "sbuf", "float32", (1, 1), box, 4, 4),), 1, 0, 0, 10 + i,
                                              (), {"direction": "hbm_to_sbuf", "transpose": False}, "float32"))
    last = Access(len(trace.tensors), "sbuf", "float32", (1, 1), box, 4, 4)
    trace.instructions.append(Instruction(count, "dma", Op.DMA_COPY, (last,), (Access(2, "hbm", "float32", (1, 1), box,
                                                                                      4, 4),),
                                          1, 0, 0, 10 + count, (), {"direction": "sbuf_to_hbm", "transpose": False},
                                          "float32"))
    return trace


def timed(trace: Trace, hardware: HardwareProfile, repeat: int) -> tuple[float, float, PerfReport]:
    """The best wall and CPU seconds of `repeat` runs of the model on `trace`, and its report."""
    best = best_cpu = float("inf")
    report = None
    for _ in range(max(1, repeat)):
        began, began_cpu = time.perf_counter(), time.process_time()
        report = estimate(trace, hardware)
        best = min(best, time.perf_counter() - began)
        best_cpu = min(best_cpu, time.process_time() - began_cpu)
    assert report is not None
    return best, best_cpu, report


def growth(points: list[tuple[int, float]]) -> str:
    """The exponent e of time ~ size**e between the smallest and the largest case (1: linear)."""
    (n0, t0), (n1, t1) = points[0], points[-1]
    return f"{math.log(t1 / t0) / math.log(n1 / n0):.2f}" if t0 > 0 and n1 > n0 else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="trn1")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per size; the best is reported")
    args = parser.parse_args()
    hardware = load_hardware(args.hardware)
    print(f"{'size (MxKxN)':>22} {'instructions':>12} {'seconds':>8} {'cpu s':>6} {'instr/s':>10} {'model latency':>14}"
          " bottleneck")
    families: dict[str, list[tuple[int, float]]] = {"tiled matmul": [], "one load a line": []}
    cases = [(f"{m}x{k}x{n}", "tiled matmul", lambda m=m, k=k, n=n: matmul_trace(m, k, n)) for m, k, n in SIZES]
    cases += [(f"{count} lines", "one load a line", lambda count=count: repeated_loads_trace(count)) for count in LINES]
    for label, family, make in cases:
        trace = make()
        best, best_cpu, report = timed(trace, hardware, 1 if len(trace.instructions) > 500_000 else args.repeat)
        count = len(trace.instructions)
        families[family].append((count, best_cpu))
        print(f"{label:>22} {count:>12} {best:>8.3f} {best_cpu:>6.3f} {count / best:>10.0f} "
              f"{report.latency_ms:>11.3f} ms {report.bottleneck}")
    for family, points in families.items():
        print(f"{family}: CPU time grows as instructions^{growth(points)}")


if __name__ == "__main__":
    main()
