"""PSUM accumulation (`acc += matmul`) and assignment into existing tiles (`buf[...] = op(...)`):
both retarget the producing instruction instead of adding a copy or an add."""

from __future__ import annotations

import numpy as np

from accelopt_core.nki.tensor import PSUM, Simulation, declare, pop, push

HEADER = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""


def test_nc_matmul_accumulates_in_psum(run, rng):
    a = rng.standard_normal((512, 128)).astype(np.float32)  # [K, M], already transposed
    b = rng.standard_normal((512, 256)).astype(np.float32)  # [K, N]
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 256), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(4):
        acc += nisa.nc_matmul(nl.load(a[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]))
    nl.store(out, value=nl.copy(acc))
    return out
""", a, b)
    np.testing.assert_allclose(both.out, a.T @ b, rtol=1e-4, atol=1e-3)
    mms = [i for i in both.instructions if i.engine == "tensor"]
    assert len(mms) == 4
    assert all(i.attrs["accumulate"] is True for i in mms)
    acc_id = mms[0].writes[0].tensor
    assert all(i.writes[0].tensor == acc_id and i.writes[0].buffer == "psum" for i in mms)
    assert all(i.reads[-1].tensor == acc_id for i in mms)  # accumulation reads the PSUM tile too
    assert not any(i.op in ("tensor_tensor", "tensor_scalar") for i in both.instructions)
    # the per-call result tiles are folded away: only the accumulator is a PSUM tensor
    assert [t.id for t in both.numeric.trace.tensors.values() if t.buffer == "psum"] == [acc_id]


def test_matmul_accumulates_into_a_psum_region(run, rng):
    x = rng.standard_normal((256, 64)).astype(np.float32)
    y = rng.standard_normal((256, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x, y):
    out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((2, nl.par_dim(64), 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        acc[1, :, :] += nl.matmul(nl.load(x[k * 128:(k + 1) * 128, :]), nl.load(y[k * 128:(k + 1) * 128, :]),
                                  transpose_x=True)
    nl.store(out, value=acc[1])
    return out
""", x, y)
    np.testing.assert_allclose(both.out, x.T @ y, rtol=1e-4, atol=1e-3)
    mms = [i for i in both.instructions if i.op == "nc_matmul"]
    assert len(mms) == 2
    assert all(i.attrs["accumulate"] for i in mms)
    assert all(i.writes[0].region == ((1, 2), (0, 64), (0, 512)) for i in mms)
    assert [op for _, op in both.ops()].count("tensor_tensor") == 0


def test_plus_equals_on_sbuf_is_an_add(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(3):
        acc += nl.load(a)
    nl.store(out, value=acc)
    return out
""", a)
    np.testing.assert_allclose(both.out, 3 * a, rtol=1e-6)
    adds = [i for i in both.instructions if i.op == "tensor_tensor"]
    assert len(adds) == 3 and all(i.writes[0].tensor == adds[0].writes[0].tensor for i in adds)


def test_assigning_a_load_is_one_dma(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, name="buf")
    buf[...] = nl.load(a)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, name="r")
    r[...] = nl.exp(buf)
    nl.store(out, value=r)
    return out
""", a)
    np.testing.assert_allclose(both.out, np.exp(a), rtol=1e-6)
    assert both.ops() == [("dma", "dma_copy"), ("scalar", "activation"), ("dma", "dma_copy")]
    names = {t.id: t.name for t in both.numeric.trace.tensors.values()}
    assert names[both.instructions[0].writes[0].tensor] == "buf"
    assert names[both.instructions[1].writes[0].tensor] == "r"
    assert len(names) == 4  # a, out, buf, r: the load's and exp's own result tiles were folded away


def test_assigning_a_used_tile_copies(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((2, 128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    e = nl.exp(t)
    buf = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    buf[...] = t  # t was already consumed by exp: a real copy is needed
    nl.store(out[0], value=buf)
    nl.store(out[1], value=e)
    return out
""", a)
    np.testing.assert_array_equal(both.out[0], a)
    assert [op for _, op in both.ops()] == ["dma_copy", "activation", "tensor_copy", "dma_copy", "dma_copy"]


def test_scan_carry_through_a_column(run, rng):
    d0 = rng.uniform(0.5, 1.0, (128, 1024)).astype(np.float32)
    d1 = rng.standard_normal((128, 1024)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(d0, d1):
    out = nl.ndarray(d0.shape, dtype=d0.dtype, buffer=nl.shared_hbm)
    init = nl.zeros((128, 1), dtype=nl.float32)
    for i in nl.sequential_range(2):
        a = nl.load(d0[:, i * 512:(i + 1) * 512])
        b = nl.load(d1[:, i * 512:(i + 1) * 512])
        r = nisa.tensor_tensor_scan(a, b, initial=init, op0=nl.multiply, op1=nl.add)
        nl.store(out[:, i * 512:(i + 1) * 512], value=r)
        init[:, :] = r[:, 511]
    return out
""", d0, d1)
    want = np.empty_like(d0)
    carry = np.zeros(128, np.float32)
    for i in range(1024):
        carry = d0[:, i] * carry + d1[:, i]
        want[:, i] = carry
    np.testing.assert_allclose(both.out, want, rtol=1e-4, atol=1e-4)


def test_assignment_retargets_only_where_the_engine_can_write(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((3, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    mm_in_sbuf = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    mm_in_sbuf[...] = nisa.nc_matmul(x, x)          # Tensor engine -> PSUM, then a copy to SBUF
    load_in_psum = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    load_in_psum[...] = nl.load(a)                  # DMA -> SBUF, then a copy to PSUM
    narrow = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    narrow[...] = nl.load(a)                        # one DMA that casts on the way
    nl.store(out[0, 0:64, :], value=mm_in_sbuf)
    nl.store(out[1], value=load_in_psum)
    nl.store(out[2], value=narrow)
    return out
""", a)
    np.testing.assert_allclose(both.out[0, :64], a.T @ a, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(both.out[1], a)
    np.testing.assert_array_equal(both.out[2], a.astype("bfloat16").astype(np.float32))
    ops = [op for _, op in both.ops()]
    assert ops[:6] == ["dma_copy", "nc_matmul", "tensor_copy", "dma_copy", "tensor_copy", "dma_copy"]
    cast_load = both.instructions[5]
    assert cast_load.dtype == "bfloat16" and cast_load.writes[0].nbytes == 128 * 64 * 2


def test_a_fully_written_accumulator_is_read_as_it_is_and_an_unwritten_one_as_zeros(rng):
    """A matmul accumulating onto PSUM reads the tile's own float32 values where every element was written (no
    copy, no mask), and 0 where nothing was written yet (a new accumulation group starts there)."""
    sim = Simulation(numeric=True, hardware="trn1")
    push(sim)
    try:
        acc = declare(PSUM, (128, 512), 0, np.dtype(np.float32))
        values = rng.standard_normal((128, 512)).astype(np.float32)
        acc[:, 0:256].write(values[:, :256])
        half = acc.read_accumulator()
        assert (half[:, 256:] == 0).all() and half[:, :256].tobytes() == values[:, :256].tobytes()
        acc.write(values)
        whole = acc.read_accumulator()
        assert np.shares_memory(whole, acc.storage.data) and whole.tobytes() == values.tobytes()
    finally:
        pop()


def test_a_masked_matmul_accumulates_only_the_elements_it_computes(run, rng):
    """`acc += nisa.nc_matmul(..., mask=m)` (legacy tutorials, transpose_matmul): the masked-off columns keep their
    sums. The unwritten elements of the matmul's result (NaN) were added to the whole accumulator."""
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    i_n = nl.arange(512)[None, :]
    at = nl.load(a)
    bt = nl.load(b)
    acc += nisa.nc_matmul(at, bt)
    acc += nisa.nc_matmul(at, bt, mask=(i_n < 256))
    nl.store(out, value=nl.copy(acc))
    return out
""", a, b)
    expected = a.T @ b
    expected[:, :256] *= 2
    np.testing.assert_allclose(both.out, expected, rtol=1e-4, atol=1e-3)


def test_a_fresh_result_adopts_the_array_computed_for_it() -> None:
    """An instruction's fresh result, unfilled and written whole, takes the freshly computed array as its own
    (no copy); a result already filled, or an array of another shape, is written into it instead."""
    sim = Simulation(numeric=True)
    push(sim)
    try:
        fresh = declare(PSUM, (128, 64), 0, np.dtype(np.float32), result=True)
        product = np.ones((128, 64), np.float32)
        fresh.adopt(product)
        assert fresh.storage.data is product and fresh.storage.initialized.all()
        filled = declare(PSUM, (128, 64), 0, np.dtype(np.float32), result=True)
        filled.read()  # read before written: filled as fresh memory is
        assert np.isnan(filled.read()).all()
        filled.adopt(product)
        assert filled.storage.data is not product and (filled.read() == 1).all()
    finally:
        pop()
