"""`neuronxcc.nki.isa` (legacy): one instruction per call, each returning a new tile."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt_core.nki import HardwareRuleError, KernelUsageError
from accelopt_core.nki.runner import run_kernel

HEADER = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""


def test_nc_matmul_is_stationary_transposed_times_moving(run, rng):
    s = rng.standard_normal((128, 126)).astype(np.float32)
    m = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(s, m):
    out = nl.ndarray((126, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nisa.nc_matmul(nl.load(s), nl.load(m))
    nl.store(out, value=nl.copy(r))
    return out
""", s, m)
    np.testing.assert_allclose(both.out, s.T @ m, rtol=1e-4, atol=1e-4)
    mm = both.instructions[2]
    assert (mm.engine, mm.op) == ("tensor", "nc_matmul")
    assert mm.attrs == {"stationary_free": 126, "moving_free": 512, "contraction": 128, "accumulate": False,
                        "is_transpose": False, "onezero": False}
    assert mm.writes[0].buffer == "psum" and mm.writes[0].dtype == "float32"
    assert mm.writes[0].shape == (126, 512)
    assert (mm.partitions, mm.free_elements) == (126, 512)
    assert mm.flops == 2 * 128 * 126 * 512
    assert mm.dtype == "float32"


def test_nc_matmul_swapped_operands_give_the_transpose(run, rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    y = rng.standard_normal((64, 48)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x, y):
    out1 = nl.ndarray((32, 48), dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((48, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.load(y)
    nl.store(out1, value=nisa.nc_matmul(a, b))
    nl.store(out2, value=nisa.nc_matmul(b, a))
    return out1, out2
""", x, y)
    np.testing.assert_allclose(both.outputs[0], x.T @ y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(both.outputs[1], (x.T @ y).T, rtol=1e-5, atol=1e-5)


def test_nc_matmul_flags_and_bf16_inputs(run, rng):
    x = rng.standard_normal((128, 128)).astype("bfloat16")
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((2, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x)
    ident = nl.load(nl.shared_identity_matrix(128, dtype=nl.bfloat16))
    ones = nl.ones((128, 128), dtype=nl.bfloat16)
    t = nisa.nc_matmul(a, ident, is_transpose=True)
    s = nisa.nc_matmul(ones, a, is_stationary_onezero=True)
    nl.store(out[0], value=t)
    nl.store(out[1], value=s)
    return out
""", x)
    xf = x.astype(np.float32)
    np.testing.assert_array_equal(both.out[0], xf.T)
    np.testing.assert_allclose(both.out[1], np.ones((128, 128), np.float32).T @ xf, rtol=1e-5, atol=1e-4)
    mms = [i for i in both.instructions if i.engine == "tensor"]
    assert (mms[0].op, mms[0].attrs["is_transpose"]) == ("nc_transpose", True)
    assert mms[1].attrs["onezero"] is True
    assert mms[0].dtype == "bfloat16"


@pytest.mark.parametrize(("engine", "shape", "buffer"), [("nisa.tensor_engine", (96, 128), "psum"),
                                                         ("nisa.vector_engine", (32, 16), "sbuf"),
                                                         ("None", (128, 64), "psum"),
                                                         ("nisa.unknown_engine", (20, 30), "psum")])
def test_nc_transpose_engines(run, rng, engine, shape, buffer):
    a = rng.standard_normal(shape).astype(np.float32)
    both = run(HEADER + f"""
@nki.jit
def kernel(a):
    out = nl.ndarray(({shape[1]}, {shape[0]}), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nisa.nc_transpose(nl.load(a), engine={engine})
    nl.store(out, value=t)
    return out
""", a)
    np.testing.assert_array_equal(both.out, a.T)
    tr = both.instructions[1]
    assert tr.op == "nc_transpose"
    assert tr.engine == ("vector" if "vector" in engine else "tensor")
    assert tr.writes[0].buffer == buffer
    # the transposed tile keeps the input's dtype (the docs describe dtype= as an extra cast)
    assert tr.writes[0].dtype == "float32"


def test_nc_transpose_dtype(run, rng):
    a = rng.standard_normal((64, 128)).astype("bfloat16")
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    t = nisa.nc_transpose(x)
    u = nisa.nc_transpose(x, dtype=nl.float32)
    nl.store(out[0], value=t)
    nl.store(out[1], value=u)
    return out
""", a)
    np.testing.assert_array_equal(both.out[0], a.T.astype(np.float32))
    np.testing.assert_array_equal(both.out[1], a.T.astype(np.float32))
    ops = [op for _, op in both.ops()]
    # t: transpose (bf16 in PSUM), then store copies PSUM -> SBUF; u: transpose + the documented cast
    assert ops[1:3] == ["nc_transpose", "nc_transpose"] and ops[3] == "tensor_copy"
    assert both.instructions[1].writes[0].dtype == "bfloat16"


def test_vector_engine_transpose_is_limited_to_32x32(fails):
    err = fails(HEADER + """
@nki.jit
def kernel(a):
    t = nisa.nc_transpose(nl.load(a), engine=nisa.vector_engine)  # ERR
    return a
""", np.zeros((64, 32), np.float32), error=HardwareRuleError)
    assert "32x32" in err.message and "64x32" in err.message


@pytest.mark.parametrize("variant", ["plain", "scalar_scale", "tile_scale", "bias", "both"])
def test_activation(run, rng, variant):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32)
    args = {"plain": "", "scalar_scale": ", scale=0.5", "tile_scale": ", scale=c",
            "bias": ", bias=c", "both": ", bias=c, scale=2.0"}[variant]
    both = run(HEADER + f"""
@nki.jit
def kernel(a, col):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    c = nl.load(col)
    r = nisa.activation(op=nl.tanh, data=nl.load(a){args})
    nl.store(out, value=r)
    return out
""", a, col)
    scale = {"scalar_scale": 0.5, "tile_scale": col, "both": 2.0}.get(variant, 1.0)
    bias = col if variant in ("bias", "both") else 0.0
    np.testing.assert_allclose(both.out, np.tanh(a * scale + bias), rtol=1e-6, atol=1e-7)
    act = next(i for i in both.instructions if i.op == "activation")
    assert act.engine == "scalar" and act.attrs["func"] == "tanh"
    assert len(act.reads) == (2 if variant in ("tile_scale", "bias", "both") else 1)


def test_activation_with_reduction(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    r = nisa.activation(op=nl.exp, data=nl.load(a), reduce_op=nl.add, reduce_res=acc)
    acc2 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    r2 = nisa.activation_reduce(op=np.exp, data=r, reduce_op=np.add, reduce_res=acc2, scale=0.0)
    nl.store(out, value=r)
    nl.store(sums, value=nl.add(acc, acc2))
    return out, sums
""", a)
    np.testing.assert_allclose(both.outputs[0], np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(both.outputs[1], np.exp(a).sum(axis=1, keepdims=True) + 64, rtol=1e-5)
    acts = [i for i in both.instructions if i.op == "activation"]
    assert [len(i.writes) for i in acts] == [2, 2]
    assert acts[0].writes[1].shape == (128, 1)
    assert acts[0].attrs["reduce"] is True


@pytest.mark.parametrize(("op", "fn"), [("nl.add", np.add), ("np.subtract", np.subtract),
                                        ("nl.multiply", np.multiply), ("nl.maximum", np.maximum)])
def test_tensor_tensor(run, rng, op, fn):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype("bfloat16")
    both = run(HEADER + f"""
@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    r = nisa.tensor_tensor(nl.load(a), nl.load(b), op={op})
    nl.store(out, value=r)
    return out
""", a, b)
    np.testing.assert_allclose(both.out, fn(a, b.astype(np.float32)), rtol=1e-6)
    tt = both.instructions[2]
    assert (tt.engine, tt.op, tt.dtype) == ("vector", "tensor_tensor", "float32")  # the wider input wins


def test_tensor_tensor_rejects_two_psum_inputs(fails, rng):
    fails(HEADER + """
@nki.jit
def kernel(a):
    x = nl.load(a)
    p1 = nisa.nc_matmul(x, x)
    p2 = nisa.nc_matmul(x, x)
    r = nisa.tensor_tensor(p1, p2, op=nl.add)  # ERR
    return a
""", np.zeros((128, 128), np.float32), error=HardwareRuleError)


@pytest.mark.parametrize("case", ["one_op", "reverse0", "two_ops", "reverse1", "tile_operands"])
def test_tensor_scalar(run, rng, case):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32) + 5
    call, fn = {
        "one_op": ("nisa.tensor_scalar(x, np.subtract, 1.5)", lambda x, c: x - 1.5),
        "reverse0": ("nisa.tensor_scalar(x, nl.subtract, 1.5, reverse0=True)", lambda x, c: 1.5 - x),
        "two_ops": ("nisa.tensor_scalar(x, nl.multiply, 2.0, op1=nl.add, operand1=-1.0)", lambda x, c: x * 2 - 1),
        "reverse1": ("nisa.tensor_scalar(data=x, op0=nl.add, operand0=1.0, op1=nl.divide, operand1=3.0, "
                     "reverse1=True)", lambda x, c: 3.0 / (x + 1)),
        "tile_operands": ("nisa.tensor_scalar(x, nl.subtract, c, op1=nl.multiply, operand1=c)",
                          lambda x, c: (x - c) * c),
    }[case]
    both = run(HEADER + f"""
@nki.jit
def kernel(a, col):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    c = nl.load(col)
    nl.store(out, value={call})
    return out
""", a, col)
    np.testing.assert_allclose(both.out, fn(a, col), rtol=1e-5)
    ts = next(i for i in both.instructions if i.op == "tensor_scalar")
    assert ts.engine == "vector"
    assert ts.attrs["op_count"] == (1 if case in ("one_op", "reverse0") else 2)


def test_tensor_scalar_on_the_scalar_engine_only_multiply_add(run, fails):
    ok = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    r = nisa.tensor_scalar(nl.load(a), nl.multiply, 2.0, op1=nl.add, operand1=1.0, engine=nisa.scalar_engine)
    nl.store(out, value=r)
    return out
""", np.ones((4, 4), np.float32), hardware="trn2")
    np.testing.assert_array_equal(ok.out, np.full((4, 4), 3.0))
    assert ok.instructions[1].engine == "scalar"
    err = fails(HEADER + """
@nki.jit
def kernel(a):
    r = nisa.tensor_scalar(nl.load(a), nl.subtract, 2.0, engine=nisa.scalar_engine)  # ERR
    return a
""", np.ones((4, 4), np.float32), error=HardwareRuleError, hardware="trn2")
    assert "Scalar engine" in err.message and "subtract" in err.message
    on_trn1 = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_scalar(nl.load(a), nl.multiply, 2.0, engine=nisa.scalar_engine))
    return out
""", np.ones((4, 4), np.float32), hardware="trn1")
    np.testing.assert_array_equal(on_trn1.out, np.full((4, 4), 2.0))  # every generation (SDK 2.21 docs)


@pytest.mark.parametrize(("op", "fn"), [("nl.add", np.sum), ("nl.maximum", np.max), ("np.min", np.min)])
@pytest.mark.parametrize("negate", [False, True])
@pytest.mark.parametrize("keepdims", [False, True])
def test_tensor_reduce(run, rng, op, fn, negate, keepdims):
    a = rng.standard_normal((128, 8, 32)).astype(np.float32)
    shape = "(128, 1, 1)" if keepdims else "(128,)"
    both = run(HEADER + f"""
@nki.jit
def kernel(a):
    out = nl.ndarray({shape}, dtype=a.dtype, buffer=nl.shared_hbm)
    r = nisa.tensor_reduce(op={op}, data=nl.load(a), axis=(1, 2), negate={negate}, keepdims={keepdims})
    nl.store(out, value=r)
    return out
""", a)
    want = fn(a, axis=(1, 2), keepdims=keepdims) * (-1 if negate else 1)
    np.testing.assert_allclose(both.out, want, rtol=1e-5, atol=1e-5)
    red = both.instructions[1]
    assert (red.engine, red.op, red.free_elements) == ("vector", "tensor_reduce", 256)


@pytest.mark.parametrize("engine", ["nisa.vector_engine", "nisa.scalar_engine", "nisa.gpsimd_engine", "None"])
def test_tensor_copy_engines(run, rng, engine):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + f"""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    r = nisa.tensor_copy(nl.load(a), engine={engine}, dtype=nl.bfloat16)
    nl.store(out, value=r)
    return out
""", a)
    np.testing.assert_array_equal(both.out, a.astype("bfloat16"))
    expected = {"nisa.vector_engine": "vector", "nisa.scalar_engine": "scalar", "nisa.gpsimd_engine": "gpsimd",
                "None": "vector"}[engine]
    assert both.instructions[1].engine == expected


def test_gpsimd_cannot_touch_psum(fails):
    err = fails(HEADER + """
@nki.jit
def kernel(a):
    x = nl.load(a)
    p = nisa.nc_matmul(x, x)
    r = nisa.tensor_copy(p, engine=nisa.gpsimd_engine)  # ERR
    return a
""", np.zeros((128, 128), np.float32), error=HardwareRuleError)
    assert "GpSimd" in err.message and "PSUM" in err.message


def test_tensor_tensor_scan(run, rng):
    d0 = rng.uniform(0.5, 1.0, (128, 64)).astype(np.float32)
    d1 = rng.standard_normal((128, 64)).astype(np.float32)
    init = rng.standard_normal((128, 1)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(d0, d1, init):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(d0)
    b = nl.load(d1)
    r = nisa.tensor_tensor_scan(a, b, initial=nl.load(init), op0=nl.multiply, op1=nl.add)
    s = nisa.tensor_tensor_scan(a, b, 0.0, np.multiply, np.subtract, reverse1=True)
    nl.store(out[0], value=r)
    nl.store(out[1], value=s)
    return out
""", d0, d1, init)
    want_r = np.empty_like(d0)
    want_s = np.empty_like(d0)
    carry_r = init[:, 0]
    carry_s = np.zeros(128, np.float32)
    for i in range(64):
        carry_r = d0[:, i] * carry_r + d1[:, i]
        carry_s = d1[:, i] - d0[:, i] * carry_s
        want_r[:, i] = carry_r
        want_s[:, i] = carry_s
    np.testing.assert_allclose(both.out[0], want_r, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(both.out[1], want_s, rtol=1e-5, atol=1e-5)
    scan = next(i for i in both.instructions if i.op == "tensor_tensor_scan")
    assert scan.engine == "vector" and scan.free_elements == 64


@pytest.mark.parametrize("engine", ["nisa.vector_engine", "nisa.gpsimd_engine"])
def test_memset_and_iota(run, engine):
    both = run(HEADER + f"""
@nki.jit
def kernel():
    out = nl.ndarray((3, 128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    m = nisa.memset(shape=(128, 16), value=7.0, dtype=nl.float32, engine={engine})
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(16)[None, :]
    io = nisa.iota(i_p * 16 + i_f, dtype=nl.float32)
    col = nisa.iota(nl.arange(128)[:, None], dtype=nl.int32)
    nl.store(out[0], value=m)
    nl.store(out[1], value=io)
    nl.store(out[2], value=nl.broadcast_to(col, (128, 16)))
    return out
""")
    np.testing.assert_array_equal(both.out[0], np.full((128, 16), 7.0))
    np.testing.assert_array_equal(both.out[1], np.arange(128 * 16).reshape(128, 16))
    np.testing.assert_array_equal(both.out[2], np.repeat(np.arange(128)[:, None], 16, axis=1))
    assert both.instructions[0].engine == ("gpsimd" if "gpsimd" in engine else "vector")
    assert [i.engine for i in both.instructions if i.op == "iota"] == ["gpsimd", "gpsimd"]


@pytest.mark.parametrize("engine", ["None", "nisa.vector_engine", "nisa.scalar_engine"])
def test_reciprocal(run, rng, engine):
    a = rng.uniform(0.5, 2.0, (128, 64)).astype(np.float32)
    both = run(HEADER + f"""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.reciprocal(nl.load(a), engine={engine}))
    return out
""", a)
    np.testing.assert_allclose(both.out, 1 / a, rtol=1e-6)
    assert both.instructions[1].engine == ("scalar" if "scalar" in engine else "vector")


def test_engine_not_allowed_for_instruction(fails):
    err = fails(HEADER + """
@nki.jit
def kernel(a):
    r = nisa.tensor_tensor(nl.load(a), nl.load(a), op=nl.add, engine=nisa.scalar_engine)  # ERR
    return a
""", np.zeros((4, 4), np.float32), error=HardwareRuleError)
    assert "scalar engine" in err.message


@pytest.mark.parametrize("call", [
    "nisa.tensor_scalar(x, nl.multiply, 3.0, mask=m)",
    "nisa.activation(op=nl.exp, data=x, mask=m)",
    "nisa.tensor_tensor(x, x, op=nl.add, mask=m)",
    "nisa.tensor_copy(x, mask=m)",
])
def test_isa_mask(run, rng, call):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + f"""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    m = (i_p < 100) & (i_f >= 16)
    x = nl.load(a)
    y = nl.zeros((128, 64), dtype=nl.float32)
    y[i_p, i_f] = {call}
    nl.store(out, value=y)
    return out
""", a)
    inst = next(i for i in both.instructions if i.engine in ("vector", "scalar") and i.op != "memset")
    assert (inst.partitions, inst.free_elements) == (100, 48)
    assert inst.writes[0].nbytes == 100 * 48 * 4
    assert np.all(both.out[100:] == 0) and np.all(both.out[:, :16] == 0)
    assert np.all(both.out[:100, 16:] != 0)


def test_affine_select(run, rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(128)[None, :]
    r = nisa.affine_select(pred=(i_p >= i_f), on_true_tile=nl.load(a), on_false_value=-9984.0)
    nl.store(out, value=r)
    return out
""", a)
    np.testing.assert_array_equal(both.out, np.where(np.tril(np.ones((128, 128), bool)), a, -9984.0))
    assert both.instructions[1].engine == "gpsimd"


def test_activation_reduce_sums_only_the_elements_its_mask_keeps(run, rng):
    a = rng.standard_normal((128, 1024)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a_hbm):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(1024)[None, :]
    a = nl.load(a_hbm[ip, jf], mask=(jf < 1000))
    ss = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(op=nl.square, data=a, reduce_op=nl.add, reduce_res=ss, mask=(jf < 1000))
    nl.store(out, value=ss)
    return out
""", a)
    np.testing.assert_allclose(both.out[:, 0], (a[:, :1000] ** 2).sum(axis=1), rtol=1e-5)


def test_dma_copy_with_dst_rmw_op_adds_into_its_destination(run, rng):
    a, b = (rng.standard_normal((128, 256)).astype(np.float32) for _ in range(2))
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    nisa.dma_copy(src=b, dst=t, dst_rmw_op=np.add)
    nisa.dma_copy(src=b, dst=t, dst_rmw_op=np.add)
    nl.store(out, value=t)
    return out
""", a, b)
    np.testing.assert_allclose(both.out, a + 2 * b, rtol=1e-6)


def test_tensor_scalar_takes_the_unary_alu_operators(run, rng):
    """`op0=nl.rsqrt, operand0=0.0` on GpSimd (the engine-selection guide), reciprocal and abs: they act
    on the data; a reduction over abs is a row's largest magnitude."""
    a = (rng.random((128, 256)) + 0.5).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 513), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    r = nisa.tensor_scalar(data=t, op0=nl.rsqrt, operand0=0.0, engine=nisa.gpsimd_engine)
    q = nisa.tensor_scalar(data=t, op0=nl.add, operand0=1.0, op1=nl.reciprocal, operand1=0.0)
    m = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(data=nl.negative(t), op0=nl.abs, operand0=0.0, reduce_op=nl.max, reduce_res=m)
    nl.store(out[:, 0:256], value=r)
    nl.store(out[:, 256:512], value=q)
    nl.store(out[:, 512:513], value=m)
    return out
""", a)
    np.testing.assert_allclose(both.out[:, :256], 1 / np.sqrt(a), rtol=1e-6)
    np.testing.assert_allclose(both.out[:, 256:512], 1 / (a + 1), rtol=1e-6)
    np.testing.assert_allclose(both.out[:, 512], a.max(axis=1), rtol=1e-6)


def test_a_masked_matmul_runs_on_the_columns_it_keeps(run, rng):
    """NKI API Masking: the compiler issues the instruction on the smaller tile, so its cost follows."""
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    i_n = nl.arange(512)[None, :]
    r = nisa.nc_matmul(nl.load(a), nl.load(b), mask=(i_n < 192))
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    t[...] = nl.copy(r, mask=(i_n < 192))
    nl.store(out[:, 0:192], value=t[:, 0:192])
    return out
""", a, b)
    matmul = next(i for i in both.instructions if i.op == "nc_matmul")
    assert (matmul.attrs["stationary_free"], matmul.attrs["moving_free"]) == (128, 192)
    assert matmul.flops == 2 * 128 * 128 * 192
    np.testing.assert_allclose(both.out[:, :192], a.T @ b[:, :192], rtol=1e-4, atol=1e-4)


def test_a_load_that_walks_hbm_across_the_rows_moves_one_element_per_step(run, rng):
    """x[i_m, i_k] with k on partitions reads, along each partition, elements K apart: its DMA runs
    are one element long however contiguous the region it covers."""
    x = rng.standard_normal((256, 128)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k = nl.arange(128)[:, None]
    i_m = nl.arange(256)[None, :]
    nl.store(out, value=nl.load(x[i_m, i_k]))
    return out
""", x)
    load, store = (i for i in both.instructions if i.op == "dma_copy")
    assert load.reads[0].contiguous_bytes == 4
    assert store.writes[0].contiguous_bytes == 128 * 256 * 4  # the store writes whole rows
    np.testing.assert_array_equal(both.out, x.T)


def test_a_matmul_is_priced_at_its_wider_operand(run, rng):
    """A BF16 stationary with an FP32 moving tile streams at the FP32 rate, as the reverse does."""
    source = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    stationary = nl.load(a, dtype=nl.bfloat16)
    nl.store(out, value=nl.copy(nisa.nc_matmul(stationary, nl.load(b))))
    return out
"""
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(source, a, b)
    assert [i.dtype for i in both.numeric.trace.instructions if i.op == "nc_matmul"] == ["float32"]


def test_nc_stream_shuffle_moves_partitions_within_each_quadrant(run, rng):
    """Output partition i of every 32-partition quadrant copies input partition mask[i] of the same
    quadrant; 255 leaves it; one input partition broadcasts with a mask of zeros (the ISA docs' examples)."""
    source = HEADER + """
@nki.jit
def kernel(x, row):
    out = nl.ndarray((64, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    spread = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.zeros((64, 16), dtype=x.dtype)
    nisa.nc_stream_shuffle(src=a, dst=b, shuffle_mask=[31 - i for i in range(31)] + [255])
    nl.store(out, value=b)
    c = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(src=nl.load(row), dst=c, shuffle_mask=[0] * 32)
    nl.store(spread, value=c)
    return out, spread
"""
    x = rng.standard_normal((64, 16)).astype(np.float32)
    row = rng.standard_normal((1, 16)).astype(np.float32)
    both = run(source, x, row)
    expected = np.zeros_like(x)
    for base in (0, 32):
        expected[base:base + 31] = x[base + 31 - np.arange(31)]
    np.testing.assert_array_equal(both.numeric.outputs[0], expected)
    np.testing.assert_array_equal(both.numeric.outputs[1], np.repeat(row, 32, axis=0))


@pytest.mark.parametrize(("call", "message"), [
    ("nisa.nc_matmul(a, ident, is_transpose=True)", None),
    ("nisa.nc_matmul(a, a, is_transpose=True)", "must be an identity"),
    ("nisa.nc_matmul(a, ident, is_stationary_onezero=True)", "is_stationary_onezero"),
    ("nisa.nc_matmul(a, ident, is_moving_onezero=True)", None),
])
def test_nc_matmul_hints_are_checked_against_the_data(load, rng, call, message):
    """A hint the data breaks makes Trainium compute a wrong product; the exact simulated one would pass."""
    _, kernel, _ = load(HEADER + f"""
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x)
    ident = nl.load(nl.shared_identity_matrix(128, dtype=nl.float32))
    nl.store(out, value={call})
    return out
""")
    x = [rng.standard_normal((128, 128)).astype(np.float32)]
    if message is None:
        run_kernel(kernel, x, {}, numeric=True)
    else:
        with pytest.raises(KernelUsageError, match=message):
            run_kernel(kernel, x, {}, numeric=True)


def test_an_operand_indexed_with_a_mask_masks_the_instruction_that_reads_it(run, rng):
    """`tile[...][mask]` (the rmsnorm_quant reference kernel): the same as mask= on the instruction; a
    matmul's moving-operand mask keeps the output columns whose moving columns it keeps."""
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k = nl.arange(128)[:, None]
    i_n = nl.arange(512)[None, :]
    moving = nl.load(b)
    r = nisa.nc_matmul(nl.load(a), moving[i_k, i_n][i_n < 192])
    t = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    t[...] = nl.copy(r[i_k, i_n][i_n < 192])
    e = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    e[i_k, i_n] = nl.exp(moving[i_k, i_n][i_n >= 256])
    nl.store(out[0], value=t)
    nl.store(out[1], value=e)
    return out
""", a, b)
    matmul = next(i for i in both.instructions if i.op == "nc_matmul")
    assert matmul.attrs["moving_free"] == 192
    np.testing.assert_allclose(both.out[0, :, :192], a.T @ b[:, :192], rtol=1e-4, atol=1e-4)
    assert not both.out[0, :, 192:].any()
    np.testing.assert_allclose(both.out[1, :, 256:], np.exp(b[:, 256:]), rtol=1e-6)
    assert not both.out[1, :, :256].any()
