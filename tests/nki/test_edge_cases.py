"""Corner cases found while testing: in-place updates through views, SPMD helpers, idioms from
larger kernels (attention-style matmul -> softmax -> matmul)."""

from __future__ import annotations

import numpy as np

HEADER = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""


def test_in_place_update_of_a_view_then_copy_elsewhere(run, rng):
    a = rng.standard_normal((128, 4)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((2, 128, 4), dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.zeros((2, nl.par_dim(128), 4), dtype=nl.float32, buffer=nl.sbuf)
    t = buf[0]
    t += nl.load(a)      # in place into buf[0]
    buf[1] = t           # a real copy into buf[1]
    buf[0] = t           # same region: nothing to do (undocumented; we emit no instruction)
    nl.store(out[0], value=buf[0])
    nl.store(out[1], value=buf[1])
    return out
""", a)
    np.testing.assert_array_equal(both.out[0], a)
    np.testing.assert_array_equal(both.out[1], a)
    assert [op for _, op in both.ops()].count("tensor_copy") == 1


def test_attention_block(run, rng):
    q = rng.standard_normal((64, 256)).astype(np.float32)
    k = rng.standard_normal((64, 256)).astype(np.float32)
    v = rng.standard_normal((256, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(q, k, v):
    d, s = q.shape
    out = nl.ndarray((s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    q_t = nl.load(q)
    k_t = nl.load(k)
    for i in nl.affine_range(s // 128):
        scores = nl.matmul(q_t[:, i * 128:(i + 1) * 128], k_t, transpose_x=True)
        probs = nl.softmax(scores, axis=1)
        acc = nl.zeros((128, d), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range(s // 128):
            p_t = nl.copy(nl.transpose(probs[:, j * 128:(j + 1) * 128]))
            acc += nl.matmul(p_t, nl.load(v[j * 128:(j + 1) * 128, :]), transpose_x=True)
        res = nl.ndarray((nl.par_dim(128), d), dtype=q.dtype, buffer=nl.sbuf)
        res[...] = nl.copy(acc)
        nl.store(out[nl.ds(i * 128, 128), :], value=res)
    return out
""", q, k, v)
    s = q.T @ k
    e = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(both.out, (e / e.sum(axis=1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)


def test_nc_grid_helper(load, rng):
    module, _, _ = load(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i], value=nl.add(nl.load(a[i]), 1.0))
    return out
""")
    a = rng.standard_normal((2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(module.kernel[module.nl.nc(2)](a), a + 1)


def test_assign_scalar_is_a_memset(run):
    both = run(HEADER + """
@nki.jit
def kernel():
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    t[...] = 0
    t[:, 0:4] = 2.5
    nl.store(out, value=t)
    return out
""")
    want = np.zeros((128, 8), np.float32)
    want[:, :4] = 2.5
    np.testing.assert_array_equal(both.out, want)
    assert [op for _, op in both.ops()] == ["memset", "memset", "dma_copy"]


def test_sbuf_accumulation_by_reassignment(run, rng):
    a = rng.standard_normal((4, 128, 16)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(4):
        acc[...] = nl.add(acc, nl.load(a[i]))
    nl.store(out, value=acc)
    return out
""", a)
    np.testing.assert_allclose(both.out, a.sum(axis=0), rtol=1e-5)
    adds = [i for i in both.instructions if i.op == "tensor_tensor"]
    assert len(adds) == 4 and all(i.writes[0].tensor == i.reads[0].tensor for i in adds)


def test_tile_properties(run):
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.load(a)
    v = t[0:64, 8:16]
    info = [len(t), t.ndim, v.shape[0] + v.shape[1], int(t.dtype == nl.float32)]
    row = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
    for j in nl.static_range(4):
        row[0:1, j:j + 1] = info[j]
    nl.store(out, value=row)
    return out
""", np.zeros((128, 32), np.float32))
    np.testing.assert_array_equal(both.out, [[128, 2, 72, 1]])


def test_a_masked_copy_of_a_column_fills_a_two_dimensional_slice(run, rng):
    """cumsum's carry (nki-samples neuron-team-kernels): `init[:, :] = nl.copy(t[:, k], mask=...)`,
    a [P] value written into a [P, 1] region under the copy's mask."""
    source = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(x):
    out = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    carry = nl.zeros((128, 1), dtype=x.dtype)
    for j in nl.sequential_range(3):
        carry[:, :] = nl.copy(t[:, j], mask=j < 2)
    nl.store(out, carry)
    return out
"""
    x = rng.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(run(source, x).out, x[:, 1:2])


def test_a_value_kept_in_another_tile_is_still_read_after_its_producer(run, rng):
    """`keep[...] = t` makes t's load write keep; t's later readers read it there, after the load
    (they lost the dependency: the exp ran before its input was loaded)."""
    source = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    keep = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    keep[...] = t
    nl.store(out, value=nl.exp(t))
    return out
"""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(source, x)
    np.testing.assert_allclose(both.out, np.exp(x), rtol=1e-6)
    load, exp = both.numeric.trace.instructions[:2]
    assert exp.reads[0].tensor == load.writes[0].tensor
