"""Data types: narrow floats through ml_dtypes, promotion, dtype= overrides, NumPy ops and scalars."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from accelopt_core.nki import dtypes

HEADER = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""

DTYPES = ["float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2", "int32"]


@pytest.mark.parametrize("name", DTYPES)
def test_round_trip_and_compute(run, rng, name):
    dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
    a = (rng.standard_normal((128, 32)) * 4).astype(dtype)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.maximum(x, x)
    nl.store(out, value=y)
    return out
""", a)
    assert both.out.dtype == dtype
    np.testing.assert_array_equal(both.out, a)
    assert both.instructions[0].dtype == name
    assert both.instructions[0].reads[0].nbytes == 128 * 32 * dtype.itemsize


def test_results_are_rounded_to_the_output_type(run, rng):
    a = rng.standard_normal((128, 32)).astype(ml_dtypes.bfloat16)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(a)))
    return out
""", a)
    want = np.exp(a.astype(np.float32)).astype(ml_dtypes.bfloat16)  # float32 compute, one rounding on output
    np.testing.assert_array_equal(both.out, want)


@pytest.mark.parametrize(("left", "right", "result"), [
    ("bfloat16", "float32", "float32"),
    ("float16", "bfloat16", "float32"),
    ("float8_e4m3", "float8_e5m2", "bfloat16"),
    ("float8_e4m3", "float16", "float16"),
    ("int32", "float16", "float16"),
    ("int8", "uint8", "int16"),
    ("uint16", "int32", "int32"),
    ("int32", "uint32", "float32"),
])
def test_promotion_of_two_tiles(run, left, right, result):
    both = run(HEADER + f"""
@nki.jit
def kernel():
    out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ones((4, 4), dtype=nl.{left})
    y = nl.ones((4, 4), dtype=nl.{right})
    z = nl.add(x, y)
    nl.store(out, value=z)
    return out
""")
    add = next(i for i in both.instructions if i.op == "tensor_tensor")
    assert add.writes[0].dtype == result
    np.testing.assert_array_equal(both.out, np.full((4, 4), 2.0))


@pytest.mark.parametrize(("tile", "scalar", "result"), [
    ("float16", "1.2", "float32"),       # weakly typed float scalar is float32
    ("int8", "2", "int32"),              # weakly typed int scalar is int32
    ("float16", "np.float16(2)", "float16"),
    ("bfloat16", "np.dtype(np.float32).type(1)", "float32"),
    ("int32", "1.5", "float32"),
    ("float32", "1.0 / np.sqrt(128)", "float32"),  # a float64 scale is a float32 one: no bf16 rounding
    ("bfloat16", "np.float64(0.5)", "float32"),
    ("int8", "np.int64(3)", "int32"),
])
def test_promotion_with_scalars(run, tile, scalar, result):
    both = run(HEADER + f"""
@nki.jit
def kernel():
    out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ones((4, 4), dtype=nl.{tile})
    nl.store(out, value=nl.multiply(x, {scalar}))
    return out
""")
    assert both.instructions[1].writes[0].dtype == result


def test_dtype_override(run):
    both = run(HEADER + """
@nki.jit
def kernel():
    out = nl.ndarray((4, 4), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    x = nl.ones((4, 4), dtype=nl.bfloat16)
    y = nl.ones((4, 4), dtype=nl.float16)
    z = nl.add(x, y, dtype=nl.bfloat16)
    w = nl.exp(z, dtype=nl.float32)
    nl.store(out, value=nl.copy(w, dtype=nl.bfloat16))
    return out
""")
    writes = [i.writes[0].dtype for i in both.instructions[2:5]]
    assert writes == ["bfloat16", "float32", "bfloat16"]
    np.testing.assert_allclose(both.out.astype(np.float32), np.exp(2.0), rtol=1e-2)


def test_numpy_ufuncs_as_operators(run, rng):
    a = rng.standard_normal((128, 16)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((4, 128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    one = np.dtype(np.float32).type(1)
    nl.store(out[0], value=nisa.tensor_tensor(x, x, op=np.add))
    nl.store(out[1], value=nisa.tensor_scalar(x, np.multiply, one, op1=np.subtract, operand1=np.float32(0.5)))
    nl.store(out[2], value=nisa.activation(op=np.exp, data=x))
    nl.store(out[3], value=nisa.activation(op=nl.exp, data=x, scale=one))
    return out
""", a)
    np.testing.assert_allclose(both.out[0], a + a)
    np.testing.assert_allclose(both.out[1], a - 0.5)
    np.testing.assert_allclose(both.out[2], np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(both.out[3], np.exp(a), rtol=1e-6)
    acts = [i for i in both.instructions if i.op == "activation"]
    assert [i.attrs["func"] for i in acts] == ["exp", "exp"]


def test_engine_choice_through_the_package(run):
    both = run("""
from neuronxcc import nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nki.isa.tensor_scalar(nl.load(a), nl.add, 1.0, engine=nki.isa.unknown_engine)
    nl.store(out, value=x)
    return out
""", np.zeros((4, 4), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((4, 4)))
    assert both.instructions[1].engine == "vector"


def test_promote_table():
    assert dtypes.promote(dtypes.float8_e4m3, dtypes.bfloat16) == dtypes.bfloat16
    assert dtypes.promote(dtypes.uint8, dtypes.uint16) == dtypes.uint16
    assert dtypes.promote(dtypes.int8, dtypes.uint16) == dtypes.int32
    assert dtypes.scalar_dtype(True) == dtypes.uint8
    assert dtypes.as_dtype("bfloat16") == dtypes.bfloat16


def test_int32_add_is_exact_on_gpsimd(run):
    a = np.array([[2**24 + 1, 7], [-(2**30), 3]], np.int32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(out, value=nl.add(x, x))
    return out
""", a)
    np.testing.assert_array_equal(both.out, a.astype(np.int64) * 2)
    assert both.instructions[1].engine == "gpsimd"
