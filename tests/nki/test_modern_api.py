"""The newer `nki` package: nisa.* write the `dst` passed first, nisa.dma_copy moves data."""

from __future__ import annotations

import numpy as np

from accelopt_core.nki import HardwareRuleError

HEADER = """
import numpy as np

from accelopt_core.nki import HardwareRuleError
import nki
import nki.language as nl
import nki.isa as nisa
"""


def test_matmul_accumulate_none_overwrites_then_adds(run, rng):
    a = rng.standard_normal((384, 128)).astype(np.float32)
    b = rng.standard_normal((384, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)  # uninitialised (NaN here)
    for k in nl.affine_range(3):
        s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=a[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=m, src=b[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(acc, s, m)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
""", a, b)
    np.testing.assert_allclose(both.out, a.T @ b, rtol=1e-4, atol=1e-3)
    mms = [i for i in both.instructions if i.op == "nc_matmul"]
    assert [i.attrs["accumulate"] for i in mms] == [False, True, True]
    assert [len(i.reads) for i in mms] == [2, 3, 3]


def test_matmul_groups_end_when_the_region_is_read(run, rng):
    # The docs do not say what closes an accumulate=None group; we close it when another
    # instruction reads or writes the region, so the next matmul overwrites again.
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((2, 64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=x)
    acc = [nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum) for _ in range(2)]
    res = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(acc[0], s, s)
    nisa.nc_matmul(acc[1], s, s)
    nisa.nc_matmul(acc[0], s, s)          # adds: groups are per region
    nisa.tensor_copy(dst=res, src=acc[0])
    nisa.dma_copy(dst=out[0], src=res)
    nisa.nc_matmul(acc[0], s, s)          # the group was read: this one overwrites
    nisa.nc_matmul(acc[1], s, s, accumulate=False)
    nisa.tensor_copy(dst=res, src=acc[1])
    nisa.dma_copy(dst=out[1], src=res)
    return out
""", x)
    gram = x.T @ x
    np.testing.assert_allclose(both.out[0], 2 * gram, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(both.out[1], gram, rtol=1e-4, atol=1e-3)
    mms = [i for i in both.instructions if i.op == "nc_matmul"]
    assert [i.attrs["accumulate"] for i in mms] == [False, False, True, False, False]


def test_modern_instructions(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a, col):
    out = nl.ndarray((6, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    c = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=c, src=col)
    y = [nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf) for _ in range(6)]
    nisa.tensor_tensor(dst=y[0], data1=x, data2=x, op=nl.multiply)
    nisa.tensor_scalar(dst=y[1], data=x, op0=nl.add, operand0=c, op1=nl.multiply, operand1=2.0)
    nisa.activation(dst=y[2], op=nl.exp, data=x, bias=c, scale=0.5)
    nisa.tensor_copy(dst=y[3], src=x)
    nisa.memset(dst=y[4], value=3.0)
    nisa.reciprocal(dst=y[5], data=x)
    r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r, op=nl.add, data=x, axis=1, negate=True, keepdims=True)
    for i in nl.affine_range(6):
        nisa.dma_copy(dst=out[i], src=y[i])
    nisa.dma_copy(dst=red, src=r)
    return out, red
""", a, col)
    out, red = both.outputs
    np.testing.assert_allclose(out[0], a * a, rtol=1e-6)
    np.testing.assert_allclose(out[1], (a + col) * 2, rtol=1e-6)
    np.testing.assert_allclose(out[2], np.exp(a * 0.5 + col), rtol=1e-6)
    np.testing.assert_array_equal(out[3], a)
    np.testing.assert_array_equal(out[4], np.full((128, 64), 3.0))
    np.testing.assert_allclose(out[5], 1 / a, rtol=1e-6)
    np.testing.assert_allclose(red, -a.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    ops = [op for _, op in both.ops()]
    assert ops[2:9] == ["tensor_tensor", "tensor_scalar", "activation", "tensor_copy", "memset", "reciprocal",
                        "tensor_reduce"]
    # every instruction wrote straight into its dst: no temporaries were allocated
    assert all(t.name != "" for t in both.numeric.trace.tensors.values())
    assert len(both.numeric.trace.tensors) == 13


def test_simulate_and_jit_entry_points(load, rng):
    module, kernel, _ = load(HEADER + """
@nki.jit
def add_one(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    u = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=u, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=u)
    return out

def plain(a):
    return add_one.__wrapped__(a)
""")
    a = rng.standard_normal((16, 16)).astype(np.float32)
    np.testing.assert_allclose(module.nki.simulate(kernel)(a), a + 1)
    np.testing.assert_allclose(module.nki.simulate(module.plain)(a), a + 1)
    np.testing.assert_allclose(kernel(a), a + 1)  # a jit kernel called with NumPy arrays runs
    assert kernel.api == "modern"


def test_legacy_functions_are_reachable_from_the_new_package(run, rng):
    a = rng.standard_normal((128, 32)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, value=nl.exp(t))
    return out
""", a)
    np.testing.assert_allclose(both.out, np.exp(a), rtol=1e-6)


def test_reduce_registers_chain_a_row_sum_over_instructions(run, rng):
    """reduce_cmd: reset_reduce then reduce accumulate in the engine's registers, and the instruction
    that passes reduce_res reads them out (Scalar engine's activation, Vector engine's tensor_scalar_reduce)."""
    a = rng.standard_normal((128, 1024)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a_hbm):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=a_hbm)
    junk = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    sums = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=junk, op=nl.exp, data=a[:, 0:512], reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(dst=junk, op=nl.exp, data=a[:, 512:1024], reduce_op=nl.add, reduce_res=sums[:, 0:1],
                    reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.tensor_scalar_reduce(dst=junk, data=a[:, 0:512], op0=nl.multiply, operand0=2.0, reduce_op=nl.add,
                              reduce_res=None, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.tensor_scalar_reduce(dst=junk, data=a[:, 512:1024], op0=nl.multiply, operand0=2.0, reduce_op=nl.add,
                              reduce_res=sums[:, 1:2], reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.dma_copy(dst=out, src=sums)
    return out
""", a)
    np.testing.assert_allclose(both.out[:, 0], np.exp(a).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(both.out[:, 1], 2 * a.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_iota_and_affine_select_take_an_access_pattern(run, rng):
    """The newer signatures: values `offset + channel_multiplier * p + sum(step * i)` over [[step, num], ...];
    affine_select keeps on_true_tile where cmp_op(value, 0) (a causal mask: column <= row)."""
    x = rng.standard_normal((128, 128)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 384), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    idx = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(dst=idx, pattern=[[1, 128]], offset=3, channel_multiplier=-1)
    grid = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(dst=grid, pattern=[[10, 2], [1, 64]], offset=0, channel_multiplier=0)
    causal = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=causal, pattern=[[-1, 128]], offset=0, channel_multiplier=1, on_true_tile=t,
                       on_false_value=-30000.0, cmp_op=nl.greater_equal)
    nisa.dma_copy(dst=out[:, 0:128], src=idx)
    nisa.dma_copy(dst=out[:, 128:256], src=grid)
    nisa.dma_copy(dst=out[:, 256:384], src=causal)
    return out
""", x)
    rows, cols = np.arange(128)[:, None], np.arange(128)[None, :]
    np.testing.assert_array_equal(both.out[:, :128], np.broadcast_to(3 - rows + cols, (128, 128)))
    np.testing.assert_array_equal(both.out[0, 128:256], np.concatenate([np.arange(64), 10 + np.arange(64)]))
    np.testing.assert_array_equal(both.out[:, 256:], np.where(cols <= rows, x, -30000.0))


def test_shared_identity_matrix_is_on_chip_in_the_new_api(run, rng):
    x = rng.standard_normal((128, 128)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    ident = nl.shared_identity_matrix(n=128, dtype=nl.float32)
    xt = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    tp = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=tp, stationary=xt, moving=ident, is_transpose=True)
    res = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=tp)
    nisa.dma_copy(dst=out, src=res)
    return out
""", x)
    np.testing.assert_array_equal(both.out, x.T)


def test_negative_slice_bounds_count_from_the_end(run, rng):
    """NkiTensor.__getitem__ takes Python's negative indices: t[:, -1:] is the last column."""
    x = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t[:, -2:])
    return out
""", x)
    np.testing.assert_array_equal(both.out, x[:, -2:])


def test_tensor_scalar_reduce_can_negate_its_reduction(run, rng):
    x = rng.standard_normal((128, 256)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    scaled = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=scaled, data=t, op0=nl.multiply, operand0=2.0, reduce_op=nl.max, reduce_res=m,
                              reduce_res_negate=True)
    nisa.dma_copy(dst=out, src=m)
    return out
""", x)
    np.testing.assert_allclose(both.out[:, 0], -2 * x.max(axis=1), rtol=1e-6)


def test_no_reorder_blocks_are_accepted(run, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    with nl.no_reorder():
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out, src=t)
    return out
""", x)
    np.testing.assert_array_equal(both.out, 2 * x)


def test_positional_iota_and_both_affine_select_orders(run, rng):
    """iota(dst, pattern, offset); affine_select positionally in the 2.27/2.28 order (offset third) and
    the 2.29 order (channel_multiplier third, offset last); a NumPy integer axis; the DMA mode enums."""
    x = rng.standard_normal((128, 128)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 384), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, dge_mode=nisa.dge_mode.hwdge, oob_mode=nisa.oob_mode.error)
    idx = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(idx, [[1, 128]], 5)
    old = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(old, [[-1, 128]], 0, 1, t, -30000.0, nl.greater_equal)
    new = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(new, [[-1, 128]], 1, t, -30000.0, nl.greater_equal)
    total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=total, op=nl.add, data=t, axis=np.int64(1))
    nisa.dma_copy(dst=out[:, 0:128], src=idx)
    nisa.dma_copy(dst=out[:, 128:256], src=old)
    nisa.dma_copy(dst=out[:, 256:384], src=new)
    return out
""", x)
    rows, cols = np.arange(128)[:, None], np.arange(128)[None, :]
    np.testing.assert_array_equal(both.out[:, :128], np.broadcast_to(5 + cols, (128, 128)))
    causal = np.where(cols <= rows, x, -30000.0)
    np.testing.assert_array_equal(both.out[:, 128:256], causal)
    np.testing.assert_array_equal(both.out[:, 256:], causal)


def test_matmul_accumulate_none_adds_into_part_of_a_written_region(run, rng):
    """'previously written' holds for a part of the region an open group wrote."""
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    s0, s1 = (nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf) for _ in range(2))
    m0 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    m1 = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s0, src=a[0:128, :])
    nisa.dma_copy(dst=s1, src=a[128:256, :])
    nisa.dma_copy(dst=m0, src=b[0:128, :])
    nisa.dma_copy(dst=m1, src=b[128:256, 0:256])
    nisa.nc_matmul(acc, s0, m0)
    nisa.nc_matmul(acc[:, 0:256], s1, m1)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
""", a, b)
    expected = a[:128].T @ b[:128]
    expected[:, :256] += a[128:].T @ b[128:, :256]
    np.testing.assert_allclose(both.out, expected, rtol=1e-4, atol=1e-3)


def test_matmul_accumulate_none_keeps_several_column_groups_of_one_tile_open(run, rng):
    """k outside, columns inside (nki-library attention_bwd's dq): each column range's group stays open
    while the others are written; the third contribution was dropped."""
    a = rng.standard_normal((384, 128)).astype(np.float32)
    b = rng.standard_normal((384, 256)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    a_sb = nl.ndarray((128, 3, 128), dtype=a.dtype, buffer=nl.sbuf)
    b_sb = nl.ndarray((128, 3, 256), dtype=b.dtype, buffer=nl.sbuf)
    for kt in range(3):
        nisa.dma_copy(dst=a_sb[:, kt, :], src=a[kt * 128:(kt + 1) * 128, :])
        nisa.dma_copy(dst=b_sb[:, kt, :], src=b[kt * 128:(kt + 1) * 128, :])
    ps = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
    for kt in range(3):
        for j in range(2):
            nisa.nc_matmul(dst=ps[:, j * 128:(j + 1) * 128], stationary=a_sb[:, kt, :],
                           moving=b_sb[:, kt, j * 128:(j + 1) * 128])
    res = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=ps)
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out
""", a, b)
    np.testing.assert_allclose(both.out, a.T @ b, rtol=1e-4, atol=1e-3)


def test_a_tensor_engine_transpose_into_sbuf_is_a_hardware_rule(fails):
    err = fails(HEADER + """
@nki.jit
def kernel(x):
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_transpose(dst=r, data=t)  # ERR
    return x
""", np.ones((128, 64), np.float32), error=HardwareRuleError)
    assert "writes its results to PSUM only" in err.message
