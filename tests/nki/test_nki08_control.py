"""NKI 0.8's compiled loops, NkiScalar and nki.lnc, in kernels written as its documentation writes them."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt_core.nki import KernelUsageError, LoopKind, UnsupportedApiError

HEADER = """
import nki
import nki.language as nl
import nki.isa as nisa
"""


def test_fori_loop_runs_its_body_once_per_index_as_a_device_loop(run, rng):
    x = rng.standard_normal((4, 128, 32)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)

    def body(i):
        t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i])
        nisa.activation(dst=t, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[i], src=t)

    nl.fori_loop(0, 4, body)
    return out
""", x)
    np.testing.assert_allclose(both.out, np.exp(x), rtol=1e-5)
    loops = {loop.kind for i in both.instructions for loop, _ in i.loops}
    assert loops == {LoopKind.SEQUENTIAL}


def test_while_loop_runs_until_the_body_returns_zero(run, rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)

    def body(r):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        return r - 1

    nl.while_loop(3, body)
    nisa.dma_copy(dst=out, src=t)
    return out
""", x)
    np.testing.assert_allclose(both.out, x * 8, rtol=1e-6)


def test_a_scalar_loaded_computed_on_and_used_as_a_dynamic_offset(run, rng):
    table = rng.standard_normal((16, 64)).astype(np.float32)
    index = np.array([[3]], dtype=np.int32)
    both = run(HEADER + """
@nki.jit
def kernel(table, index):
    out = nl.ndarray((1, 64), dtype=table.dtype, buffer=nl.shared_hbm)
    stored = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    index_tile = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=index_tile, src=index)
    i = nisa.scalar_load(index_tile)
    row = i * 4 + 1
    result = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.scalar_store(result, row)
    nisa.dma_copy(dst=stored, src=result)
    picked = nl.ndarray((1, 64), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=picked, src=table.ap(pattern=[[64, 1], [1, 64]], offset=0, scalar_offset=row, indirect_dim=0))
    nisa.dma_copy(dst=out, src=picked)
    return out, stored
""", table, index)
    np.testing.assert_array_equal(both.outputs[0], table[13:14])
    assert both.outputs[1].tolist() == [[13]]


def test_the_register_api_runs_as_the_scalars_that_replaced_it(run):
    value = np.array([[41]], dtype=np.int32)
    both = run(HEADER + """
@nki.jit
def kernel(value):
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    tile = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=value)
    reg = nisa.register_alloc()
    nisa.register_load(reg, tile)
    res = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.register_store(res, reg)
    nisa.dma_copy(dst=out, src=res)
    return out
""", value)
    assert both.out.tolist() == [[41]]


@pytest.mark.parametrize(("line", "error", "words"), [
    ("nl.fori_loop(0, nisa.scalar_load(t), lambda i: None)  # ERR", UnsupportedApiError, "read on device"),
    ("n = [0][nisa.scalar_load(t)]  # ERR", KernelUsageError, "known only on device"),
    ("nki.lnc.core_barrier(x, (0, 1))  # ERR", UnsupportedApiError, "partner NeuronCore"),
    ("nisa.sendrecv(t, t, 1, 1)  # ERR", UnsupportedApiError, "one core"),
])
def test_what_one_traced_core_cannot_simulate_says_why(fails, line, error, words):
    err = fails(HEADER + f"""
import nki.lnc

@nki.jit
def kernel(x):
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=2)
    {line}
    return x
""", np.zeros((1, 1), np.int32), error=error)
    assert words in err.message


def test_a_loop_bounded_by_a_register_never_loaded_is_a_usage_error(fails):
    err = fails(HEADER + """
@nki.jit
def kernel(x):
    nl.fori_loop(0, nisa.register_alloc(), lambda i: None)  # ERR
    return x
""", np.zeros((1, 1), np.int32), error=KernelUsageError)
    assert "never loaded" in err.message


def test_specialization_is_plain_python_generators_and_class_inheritance(run, rng):
    """NKI 0.7 specializes a kernel by tracing it with Python (the 2.33 release notes): generators and class
    inheritance in the meta-program work as Python runs them, as they do in this simulator's trace."""
    x = rng.standard_normal((512, 64)).astype(np.float32)
    both = run(HEADER + """
class Tiling:
    rows = 256

    def blocks(self, total):
        yield from range(total // self.rows)


class NarrowTiling(Tiling):
    rows = 128


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    plan = NarrowTiling()
    for b in plan.blocks(x.shape[0]):
        rows = slice(b * plan.rows, (b + 1) * plan.rows)
        t = nl.ndarray((plan.rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[rows, :])
        nisa.activation(dst=t, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[rows, :], src=t)
    return out
""", x)
    np.testing.assert_allclose(both.out, np.exp(x), rtol=1e-5)
    assert sum(i.op == "activation" for i in both.instructions) == 4  # the subclass's 128 rows: four blocks
