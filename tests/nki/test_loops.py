"""Loops: every instruction carries its loop nest (loop kind and iteration index, outermost first)."""

from __future__ import annotations

import numpy as np

from accelopt_core.nki import LoopKind

LEGACY = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""

MODERN = """
import nki
import nki.language as nl
import nki.isa as nisa
"""


def _nests(both, op="dma_copy"):
    return [tuple((loop.kind, index) for loop, index in inst.loops) for inst in both.instructions if inst.op == op]


def test_loop_kinds_and_indices(run, rng):
    a = rng.standard_normal((2, 3, 128, 8)).astype(np.float32)
    both = run(LEGACY + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        for j in nl.sequential_range(3):
            t = nl.load(a[i, j])  # LOAD
            nl.store(out[i, j], value=t)
    return out
""", a)
    np.testing.assert_array_equal(both.out, a)
    loads = [i for i in both.instructions if i.line == both.line_of("LOAD")]
    assert [tuple((loop.kind, idx) for loop, idx in inst.loops) for inst in loads] == [
        ((LoopKind.AFFINE, i), (LoopKind.SEQUENTIAL, j)) for i in range(2) for j in range(3)]
    outer, inner = loads[0].loops[0][0], loads[0].loops[1][0]
    assert (outer.trip_count, inner.trip_count) == (2, 3)
    assert inner.parent is outer and outer.parent is None
    # one Loop object per execution of the inner `for`: a fresh one for each outer iteration
    assert loads[0].loops[1][0] is not loads[3].loops[1][0]
    assert loads[0].loops[1][0] is loads[2].loops[1][0]
    assert [loop.kind for loop in both.numeric.trace.loops] == [LoopKind.AFFINE] + [LoopKind.SEQUENTIAL] * 2


def test_static_range_and_range_arguments(run):
    both = run(LEGACY + """
@nki.jit
def kernel():
    out = nl.ndarray((128, 10), dtype=nl.float32, buffer=nl.shared_hbm)
    for k in nl.static_range(1, 10, 4):
        t = nl.full((128, 1), k, dtype=nl.float32)
        nl.store(out[:, k:k + 1], value=t)
    return out
""")
    assert _nests(both) == [((LoopKind.STATIC, k),) for k in (1, 5, 9)]
    np.testing.assert_array_equal(both.out[:, [1, 5, 9]], np.tile([1.0, 5.0, 9.0], (128, 1)))
    assert both.numeric.trace.loops[0].trip_count == 3


def test_python_range_in_a_legacy_kernel_is_sequential(run):
    both = run(LEGACY + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in range(2):
        "a bare string statement inside a loop does nothing"
        nl.store(out[i * 128:(i + 1) * 128], value=nl.load(a[i * 128:(i + 1) * 128]))
    return out
""", np.ones((256, 4), np.float32))
    assert _nests(both) == [((LoopKind.SEQUENTIAL, i),) for i in (0, 0, 1, 1)]
    np.testing.assert_array_equal(both.out, np.ones((256, 4), np.float32))


def test_range_outside_a_kernel_run_is_plain_python(load):
    module, _, _ = load(LEGACY + """
STEPS = [i * 2 for i in range(4)]

@nki.jit
def kernel(a):
    return a
""")
    assert module.STEPS == [0, 2, 4, 6]
    assert list(reversed(module.range(3))) == [2, 1, 0]
    assert len(module.range(5)) == 5 and 3 in module.range(5)


def test_new_api_loops_are_static(run, rng):
    # In the new `nki` package the range helpers are deprecated aliases of Python's `range`, all
    # unrolled at trace time (docs/fact-sheet.md, API generations); only dynamic_range is a
    # device loop.
    a = rng.standard_normal((256, 8)).astype(np.float32)
    both = run(MODERN + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        for j in range(1):
            for k in nl.sequential_range(1):
                t = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=a[i * 128:(i + 1) * 128, :])
                nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
    for m in nl.dynamic_range(1):
        u = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=a[0:128, :])
    return out
""", a)
    np.testing.assert_array_equal(both.out, a)
    nests = _nests(both)
    assert nests[:4] == [((LoopKind.STATIC, i), (LoopKind.STATIC, 0), (LoopKind.STATIC, 0))
                         for i in (0, 0, 1, 1)]
    assert nests[4] == ((LoopKind.SEQUENTIAL, 0),)


def test_instructions_outside_loops_have_an_empty_nest(run):
    both = run(LEGACY + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out
""", np.zeros((4, 4), np.float32))
    assert all(inst.loops == () for inst in both.instructions)


def test_loop_iterations_share_one_nest_tuple(run):
    both = run(LEGACY + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.load(a[i])
        nl.store(out[i], value=nl.exp(t))
    return out
""", np.zeros((2, 4, 4), np.float32))
    first = [inst for inst in both.instructions if inst.loops[0][1] == 0]
    assert len(first) == 3
    assert first[0].loops is first[1].loops is first[2].loops


def test_float_loop_bounds_are_rejected(fails):
    err = fails(LEGACY + """
@nki.jit
def kernel(a):
    for i in nl.affine_range(a.shape[0] / 128):  # ERR
        t = nl.load(a[i * 128:(i + 1) * 128])
    return a
""", np.zeros((300, 4), np.float32))
    assert "integers" in err.message and "2.34375" in err.message
