"""`neuronxcc.nki.language`: data movement, matmul, element-wise ops, reductions, helpers."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from accelopt_core.nki import KernelUsageError

HEADER = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


UNARY = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "square": np.square,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))),
    "relu": lambda x: np.maximum(x, 0.0),
    "abs": np.abs,
    "negative": np.negative,
    "sign": np.sign,
    "softplus": lambda x: np.log1p(np.exp(x)),
    "erf": _erf,
    "tan": np.tan,
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
    "silu_dx": lambda x: _sigmoid(x) + x * _sigmoid(x) * _sigmoid(-x),  # d/dx x·σ(x)
    "gelu_dx": lambda x: 0.5 * (1.0 + _erf(x / np.sqrt(2.0))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi),
    "erf_dx": lambda x: 2.0 * np.exp(-x * x) / np.sqrt(np.pi),
}
POSITIVE_ONLY = {"log", "sqrt", "rsqrt"}
ON_VECTOR = {"reciprocal", "negative"}  # arithmetic, not an activation-table function


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(run, rng, name):
    a = rng.standard_normal((128, 256)).astype(np.float32)
    if name in POSITIVE_ONLY:
        a = np.abs(a) + 0.1
    both = run(HEADER + f"""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.{name}(nl.load(a)))
    return out
""", a)
    np.testing.assert_allclose(both.out, UNARY[name](a), rtol=2e-6, atol=1e-6)
    op = both.instructions[1]
    if name in ON_VECTOR:
        assert op.engine == "vector"
    else:
        assert (op.engine, op.op, op.attrs["func"]) == ("scalar", "activation", name)
    assert (op.partitions, op.free_elements) == (128, 256)


BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
}
COMPARE = {
    "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "less": np.less, "less_equal": np.less_equal,
}


@pytest.mark.parametrize("name", sorted(BINARY) + sorted(COMPARE))
def test_binary_tile_tile(run, rng, name):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    if name == "power":
        a = np.abs(a) + 0.5
    b[::3] = a[::3]  # some equal elements for the comparisons
    both = run(HEADER + f"""
@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.{name}(nl.load(a), nl.load(b))
    nl.store(out, value=r)
    return out
""", a, b)
    fn = {**BINARY, **COMPARE}[name]
    np.testing.assert_allclose(both.out, fn(a, b).astype(np.float32), rtol=1e-6)
    op = both.instructions[2]
    assert (op.op, op.attrs["op"]) == ("tensor_tensor", name)
    assert op.engine == ("gpsimd" if name == "power" else "vector")
    result = [t for t in both.numeric.trace.tensors.values() if t.buffer == "sbuf"][-1]
    # comparisons default to dtype=bool (their documented signature); arithmetic promotes
    assert result.dtype == ("bool" if name in COMPARE else "float32")


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "maximum", "minimum"])
def test_binary_with_scalar_and_column_broadcast(run, rng, name):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32) + 3.0
    both = run(HEADER + f"""
@nki.jit
def kernel(a, col):
    out = nl.ndarray((4, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    c = nl.load(col)
    nl.store(out[0], value=nl.{name}(x, 2.5))
    nl.store(out[1], value=nl.{name}(2.5, x))
    nl.store(out[2], value=nl.{name}(x, c))
    nl.store(out[3], value=nl.{name}(c, x))
    return out
""", a, col)
    fn = BINARY[name]
    expected = [fn(a, np.float32(2.5)), fn(np.float32(2.5), a), fn(a, col), fn(col, a)]
    for got, want in zip(both.out, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    computes = [i for i in both.instructions if i.engine == "vector"]
    assert [i.op for i in computes] == ["tensor_scalar"] * 4
    assert all(i.free_elements == 64 for i in computes)
    assert len(computes[2].reads) == 2 and computes[2].reads[1].shape == (128, 1)


def test_python_operators_on_tiles(run, rng):
    a = rng.standard_normal((128, 32)).astype(np.float32)
    b = rng.standard_normal((128, 32)).astype(np.float32) + 4.0
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((8, 128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(out[0], value=x + y)
    nl.store(out[1], value=x * 2.0)
    nl.store(out[2], value=-x)
    nl.store(out[3], value=1.0 - x)
    nl.store(out[4], value=x / y)
    nl.store(out[5], value=3.0 / y)
    nl.store(out[6], value=x - y * x)
    z = nl.copy(x)
    z += y
    z *= 0.5
    nl.store(out[7], value=z)
    return out
""", a, b)
    want = [a + b, a * 2, -a, 1 - a, a / b, 3 / b, a - b * a, (a + b) * 0.5]
    for got, w in zip(both.out, want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-6)


def test_negation_keeps_the_dtype(run):
    # Python operators on tiles are not documented; `-x` is treated as nl.negative (dtype kept),
    # whereas `x * -1.0` would promote with a float32 scalar.
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = -x
    nl.store(out, value=y)
    return out
""", np.ones((4, 4), np.float32).astype("bfloat16"))
    assert both.out.dtype.name == "bfloat16"
    assert both.instructions[1].dtype == "bfloat16"


@pytest.mark.parametrize(("name", "fn"), [("max", np.max), ("min", np.min), ("sum", np.sum), ("mean", np.mean),
                                          ("prod", np.prod)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(run, rng, name, fn, keepdims):
    a = (rng.standard_normal((128, 4, 16)) * 0.5 + 1).astype(np.float32)
    out_shape = "(128, 1, 1)" if keepdims else "(128,)"
    both = run(HEADER + f"""
@nki.jit
def kernel(a):
    out = nl.ndarray({out_shape}, dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((128, 4, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(out, value=nl.{name}(x, axis=(1, 2), keepdims={keepdims}))
    nl.store(out2, value=nl.{name}(x, axis=[2], keepdims=True))
    return out, out2
""", a)
    np.testing.assert_allclose(both.outputs[0], fn(a, axis=(1, 2), keepdims=keepdims), rtol=1e-5)
    np.testing.assert_allclose(both.outputs[1], fn(a, axis=2, keepdims=True), rtol=1e-5)
    reduce = both.instructions[1]
    assert (reduce.engine, reduce.op) == ("vector", "tensor_reduce")
    assert (reduce.partitions, reduce.free_elements) == (128, 64)


def test_reduction_axis_rules(fails):
    fails(HEADER + """
@nki.jit
def kernel(a):
    x = nl.load(a)
    s = nl.sum(x, axis=0)  # ERR
    return a
""", np.zeros((128, 4), np.float32))
    # a tile's free axes are one access pattern of at most four dimensions (fact sheet A.4)
    err = fails(HEADER + """
@nki.jit
def kernel(a):
    x = nl.load(a)
    s = nl.sum(x, axis=(1, 3))  # ERR
    return a
""", np.zeros((128, 2, 2, 2, 2, 2), np.float32))
    assert "at most 4 free dimensions" in err.message


def test_reduction_over_free_axes_that_are_not_adjacent(run, rng):
    # The instruction reduces innermost axes; the compiler lists the reduced ones innermost in the
    # access pattern, as the AveragePool2D tutorial's axis=[2, 4] relies on.
    a = rng.standard_normal((128, 4, 8, 2)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.sum(nl.load(a), axis=(1, 3)))
    return out
""", a)
    np.testing.assert_allclose(both.out, a.sum(axis=(1, 3)), rtol=1e-5)
    reduce = both.instructions[1]
    assert reduce.op == "tensor_reduce" and reduce.attrs["reordered"] and reduce.free_elements == 64


def test_mean_of_integers_is_float32(run):
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((4, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    m = nl.mean(nl.load(a), axis=1, keepdims=True)
    nl.store(out, value=m)
    return out
""", np.array([[1, 2], [3, 4], [5, 6], [7, 9]], np.int32))
    np.testing.assert_array_equal(both.out, [[1.5], [3.5], [5.5], [8.0]])
    assert both.numeric.trace.tensors[both.instructions[1].writes[0].tensor].dtype == "float32"


def test_load_store_copy(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    x = nl.load(a, dtype=nl.bfloat16)
    y = nl.copy(x, dtype=nl.float32)
    nl.store(out, value=y)
    return out
""", a)
    np.testing.assert_array_equal(both.out, a.astype("bfloat16"))
    assert both.ops() == [("dma", "dma_copy"), ("vector", "tensor_copy"), ("dma", "dma_copy")]
    assert [i.attrs["direction"] for i in both.instructions if i.engine == "dma"] == ["hbm_to_sbuf", "sbuf_to_hbm"]


def test_store_of_a_psum_tile_copies_through_sbuf(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 256)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((64, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.matmul(nl.load(a), nl.load(b), transpose_x=True)
    nl.store(out, value=r)
    return out
""", a, b)
    np.testing.assert_allclose(both.out, a.T @ b, rtol=1e-4, atol=1e-4)
    assert [op for _, op in both.ops()][2:] == ["nc_matmul", "tensor_copy", "dma_copy"]


def test_load_transpose2d(run, rng):
    a = rng.standard_normal((64, 128)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load_transpose2d(a))
    return out
""", a)
    np.testing.assert_array_equal(both.out, a.T)
    assert both.instructions[0].attrs["transpose"] is True
    assert both.instructions[0].partitions == 128


def test_transpose(run, rng):
    a = rng.standard_normal((96, 128)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 96), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.transpose(nl.load(a))
    nl.store(out, value=nl.copy(t))
    return out
""", a)
    np.testing.assert_array_equal(both.out, a.T)
    tr = both.instructions[1]
    assert (tr.engine, tr.op, tr.attrs["is_transpose"]) == ("tensor", "nc_transpose", True)
    assert tr.writes[0].buffer == "psum"


@pytest.mark.parametrize("transpose_x", [True, False])
def test_matmul(run, rng, transpose_x):
    x = rng.standard_normal((128, 96)).astype(np.float32)
    y = rng.standard_normal((128 if transpose_x else 96, 512)).astype(np.float32)
    both = run(HEADER + f"""
@nki.jit
def kernel(x, y):
    out = nl.ndarray(({96 if transpose_x else 128}, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.matmul(nl.load(x), nl.load(y), transpose_x={transpose_x})
    nl.store(out, value=nl.copy(r))
    return out
""", x, y)
    want = x.T @ y if transpose_x else x @ y
    np.testing.assert_allclose(both.out, want, rtol=1e-4, atol=1e-4)
    tensor_ops = [i for i in both.instructions if i.engine == "tensor"]
    if transpose_x:
        assert [i.op for i in tensor_ops] == ["nc_matmul"]
    else:  # the compiler first puts x's contraction dim on partitions with a Tensor-engine transpose
        assert [i.op for i in tensor_ops] == ["nc_transpose", "nc_matmul"]
    mm = tensor_ops[-1]
    assert (mm.attrs["contraction"], mm.attrs["stationary_free"], mm.attrs["moving_free"]) == (
        (128, 96, 512) if transpose_x else (96, 128, 512))
    assert mm.flops == 2 * mm.attrs["contraction"] * mm.attrs["stationary_free"] * 512


def test_broadcast_to(run, rng):
    row = rng.standard_normal((1, 64)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(row, col):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.broadcast_to(nl.load(row), shape=(128, 64))
    c = nl.broadcast_to(nl.load(col), (128, 64))
    nl.store(out[0], value=r)
    nl.store(out[1], value=c)
    return out
""", row, col)
    np.testing.assert_allclose(both.out[0], np.broadcast_to(row, (128, 64)), rtol=1e-6)
    np.testing.assert_array_equal(both.out[1], np.broadcast_to(col, (128, 64)))
    assert ("tensor", "nc_matmul") in both.ops()  # partition broadcast: ones-vector matmul


def test_partition_broadcasts_share_one_ones_vector(run, rng):
    """The ones vector a partition broadcast multiplies by is a constant: the compiler makes it once for
    the kernel, so a broadcast inside a loop costs a matmul and a copy, not also a memset each time."""
    rows = rng.standard_normal((4, 1, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(rows):
    out = nl.ndarray((4, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        nl.store(out[i], value=nl.load(rows[i]).broadcast_to((128, 64)))
    return out
""", rows)
    np.testing.assert_allclose(both.out, np.broadcast_to(rows, (4, 128, 64)), rtol=1e-6)
    ops = [op for _, op in both.ops()]
    assert ops.count("nc_matmul") == 4 and ops.count("memset") == 1


def test_broadcast_to_as_a_tile_method(run, fails, rng):
    """The RMSNorm tutorial's `g_tile.broadcast_to((128, F))`; an HBM tensor must be loaded first."""
    row = rng.standard_normal((1, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(row):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    g_tile = nl.load(row)
    nl.store(out, value=g_tile.broadcast_to((128, 64)))
    return out
""", row)
    np.testing.assert_allclose(both.out, np.broadcast_to(row, (128, 64)), rtol=1e-6)
    err = fails(HEADER + """
@nki.jit
def kernel(row):
    g = row.broadcast_to((128, 64))  # ERR
    return row
""", row, error=KernelUsageError)
    assert "nl.load it first" in err.message


def test_broadcast_to_wider_than_a_psum_bank(run, rng):
    row = rng.standard_normal((1, 700)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(row):
    out = nl.ndarray((64, 700), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.broadcast_to(nl.load(row), shape=(64, 700)))
    return out
""", row)
    np.testing.assert_allclose(both.out, np.broadcast_to(row, (64, 700)), rtol=1e-6)
    mms = [i for i in both.instructions if i.op == "nc_matmul"]
    assert [i.attrs["moving_free"] for i in mms] == [512, 188]


def test_where(run, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(out[0], value=nl.where(nl.greater(x, y), x, y))
    nl.store(out[1], value=nl.where(x > 0.0, x, 0.0))
    return out
""", a, b)
    np.testing.assert_array_equal(both.out[0], np.where(a > b, a, b))
    np.testing.assert_array_equal(both.out[1], np.where(a > 0, a, 0))


def test_softmax(run, rng):
    a = rng.standard_normal((128, 200)).astype(np.float32) * 3
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.softmax(nl.load(a), axis=1))
    return out
""", a)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(both.out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_logical_and_bitwise(run):
    a = np.arange(128 * 8, dtype=np.int32).reshape(128, 8)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((4, 128, 8), dtype=nl.int32, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(out[0], value=nl.bitwise_and(x, 6))
    nl.store(out[1], value=nl.left_shift(x, 2))
    nl.store(out[2], value=nl.logical_and(nl.greater(x, 3), nl.less(x, 100)))
    nl.store(out[3], value=nl.logical_not(nl.equal(x, 5)))
    return out
""", a)
    np.testing.assert_array_equal(both.out[0], a & 6)
    np.testing.assert_array_equal(both.out[1], a << 2)
    np.testing.assert_array_equal(both.out[2], ((a > 3) & (a < 100)).astype(np.int32))
    np.testing.assert_array_equal(both.out[3], (a != 5).astype(np.int32))


def test_program_id_and_num_programs_outside_spmd(run):
    both = run(HEADER + """
@nki.jit
def kernel():
    out = nl.ndarray((1, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.full((1, 3), float(nl.program_id(0) + 10 * nl.num_programs(0) + 100 * nl.program_ndim()),
                dtype=nl.float32)
    nl.store(out, value=t)
    return out
""")
    # without a grid: program 0 of 1, and a grid of 0 dimensions ("0 if no grid", nki.language.program_ndim)
    np.testing.assert_array_equal(both.out, np.full((1, 3), 10.0))


def test_tile_size_constants(run):
    both = run(HEADER + """
@nki.jit
def kernel():
    out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    ts = nl.tile_size
    t = nl.full((1, 4), ts.pmax + ts.gemm_stationary_fmax + ts.gemm_moving_fmax + ts.psum_fmax, dtype=nl.int32)
    nl.store(out, value=t)
    return out
""")
    np.testing.assert_array_equal(both.out, np.full((1, 4), 128 + 128 + 512 + 512))


def test_expand_dims_makes_a_row_statistic_a_column(run, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    m = nl.max(t, axis=1)
    nl.store(out[:, 0:64], value=nl.subtract(t, m.expand_dims(1)))
    nl.store(out[:, 64:128], value=nl.subtract(t, nl.expand_dims(m, 1)))
    return out
""", x)
    np.testing.assert_allclose(both.out, np.tile(x - x.max(axis=1, keepdims=True), 2), rtol=1e-6)


def test_view_reads_a_tensors_bytes_as_another_dtype_also_in_a_replay(run, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x.view(nl.int32)))
    return out
""", x)
    np.testing.assert_array_equal(both.out, x.view(np.int32))


def test_an_mgrid_indexes_a_tensor_directly(run, rng):
    """`x[nl.mgrid[0:128, 0:512]]`, the form of the nisa.reciprocal docs example."""
    x = rng.standard_normal((128, 512)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x[nl.mgrid[0:128, 0:512]])
    nl.store(out[nl.mgrid[0:128, 0:512]], value=nl.exp(t))
    return out
""", x)
    np.testing.assert_allclose(both.out, np.exp(x), rtol=1e-6)


@pytest.mark.parametrize(("shape", "target", "call"), [
    ((1, 4, 64), (128, 4, 64), "nl.broadcast_to(t, shape=(128, 4, 64))"),  # across partitions, 3-D
    ((128, 1, 64), (128, 4, 64), "t.broadcast_to((128, 4, 64))"),  # a free dimension of 1
    ((1, 1), (128, 64), "t.broadcast_to((128, 64))"),  # both
    ((1, 64), (128, 64), "nl.broadcast_to(src=t, shape=(128, 64))"),  # the legacy docs' keyword
    ((1, 64), (128, 64), "nl.broadcast_to(t, (128, 64), dtype=nl.float32)"),  # the newer API's dtype=
])
def test_broadcast_to_follows_numpys_rules(run, rng, shape, target, call):
    x = rng.standard_normal(shape).astype(np.float32)
    both = run(HEADER + f"""
@nki.jit
def kernel(x):
    out = nl.ndarray({target}, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.copy(src={call}))
    return out
""", x)
    np.testing.assert_array_equal(both.out, np.broadcast_to(x, target))


def test_rms_norm_and_var(run, rng):
    x = rng.standard_normal((128, 256)).astype(np.float32)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x, w):
    out = nl.ndarray((128, 257), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out[:, 0:256], value=nl.rms_norm(t, nl.load(w), axis=1, n=256, epsilon=1e-5))
    nl.store(out[:, 256:257], value=nl.var(t, axis=1))
    return out
""", x, w)
    rms = np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(both.out[:, :256], x / rms * w, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(both.out[:, 256], x.var(axis=1), rtol=1e-5)


def test_where_takes_the_more_precise_type_of_its_choices(run, rng):
    source = HEADER + """
@nki.jit
def kernel(x, y):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x, dtype=nl.bfloat16)
    b = nl.load(y)
    picked = nl.where(nl.greater(b, 0.0), a, b)
    factor = nl.where(nl.greater(b, 0.0), 1.0, 0.001)
    nl.store(out, value=nl.add(picked, factor))
    return out
"""
    x, y = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2))
    both = run(source, x, y)
    bf16 = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    expected = np.where(y > 0, bf16, y) + np.where(y > 0, 1.0, 0.001).astype(np.float32)
    np.testing.assert_allclose(both.out, expected, rtol=1e-6)


def test_softmax_under_a_mask_reads_only_the_masked_in_columns(run, rng):
    source = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(256)[None, :]
    cols = i_f < x.shape[1]
    t = nl.load(x[i_p, i_f], mask=cols)
    nl.store(out[i_p, i_f], value=nl.softmax(t, axis=1, mask=cols), mask=cols)
    return out
"""
    x = rng.standard_normal((128, 200)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(run(source, x).out, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_right_shift_is_logical(run):
    source = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.right_shift(nl.load(x), 4))
    return out
"""
    x = np.array([[-256, -1, 256, 7]] * 128, dtype=np.int32)
    expected = (x.view(np.uint32) >> 4).view(np.int32)
    np.testing.assert_array_equal(run(source, x).out, expected)


def test_a_same_type_copy_keeps_every_bit(run):
    """Vector and GpSimd copy bits when the types match: an int32 above 2**24 survives."""
    source = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_copy(nl.load(x), engine=nisa.vector_engine))
    return out
"""
    x = np.full((128, 4), 2**24 + 1, dtype=np.int32)
    np.testing.assert_array_equal(run(source, x).out, x)


def test_transposing_a_small_psum_tile_runs_on_vector(run, rng):
    """The Tensor engine reads SBUF only: left to the compiler, a 32x16 PSUM tile goes to Vector, and
    nl.transpose copies a larger one to SBUF first."""
    source = HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    big = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    product = nisa.nc_matmul(nl.load(a), nl.load(b))
    nl.store(out, value=nl.copy(nisa.nc_transpose(product[0:32, 0:16])))
    nl.store(big, value=nl.copy(nl.transpose(product)))
    return out, big
"""
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(source, a, b)
    product = a.T @ b
    np.testing.assert_allclose(both.numeric.outputs[0], product[:32, :16].T, rtol=1e-5)
    np.testing.assert_allclose(both.numeric.outputs[1], product.T, rtol=1e-5)


def test_a_one_dimensional_tile_broadcasts_along_the_free_axis(run, rng):
    """A reduction's [P] result spreads over the free dimension, also on a square tile (sd_attention)."""
    source = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    total = nisa.tensor_reduce(np.add, data=nl.load(x), axis=(1,))
    nl.store(out, value=nl.copy((1.0 / total).broadcast_to((128, 128))))
    return out
"""
    x = rng.uniform(1, 2, (128, 128)).astype(np.float32)
    expected = np.broadcast_to(1 / x.sum(axis=1, keepdims=True), x.shape)
    np.testing.assert_allclose(run(source, x).out, expected, rtol=1e-5)


def test_a_matmul_masked_off_at_trace_time_leaves_its_output(run, rng):
    """A mask that folds to False (`(2 * i + 1) * 128 < seqlen` past the end) runs nothing."""
    source = HEADER + """
@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum)
    acc[...] = nisa.nc_matmul(nl.load(a), nl.load(b), mask=(3 * 128 < a.shape[0]))
    nl.store(out, value=nl.copy(acc))
    return out
"""
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(run(source, a, b).out, np.zeros((128, 64), np.float32))


def test_the_legacy_tensor_members_and_an_iota_of_a_program_id(run, rng):
    """nki.tensor's itemsize, assert_shape and astype (nki-autotune's allocated kernels size buffers with
    itemsize), and nisa.iota of a number known when tracing, nl.program_id (vLLM's paged attention)."""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run("""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(x).assert_shape((128, 64))
    assert t.itemsize == x.itemsize == 4
    nl.store(out, value=t.astype(nl.bfloat16))
    head = nisa.iota(nl.program_id(0) + 5, dtype=nl.int32).reshape((1, 1))
    nl.store(out[0:1, 0:1], value=nl.copy(head, dtype=nl.bfloat16))
    return out
""", x)
    expected = x.astype(ml_dtypes.bfloat16)
    expected[0, 0] = 5
    np.testing.assert_array_equal(both.out, expected)
