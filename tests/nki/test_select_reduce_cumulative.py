"""nisa.select_reduce (both APIs) and nisa.tensor_scalar_cumulative (the `nki` API, NeuronCore-v3 and later)
against NumPy, as their ISA pages describe them: select_reduce is np.where(predicate, on_true, on_false) with
each row's maximum; tensor_scalar_cumulative carries reg = op1(op0(src[i], imm0), reg) along each partition."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accelopt_core.nki import load_kernel, run_kernel

MODERN = """
import numpy as np
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(a, p):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((128, 64), dtype=nl.uint8, buffer=nl.sbuf)
    y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    col = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=m, src=p)
    nisa.dma_copy(dst=col, src=a[:, 0:1])
    nisa.memset(dst=r, value=0.0)
    {body}
    nisa.dma_copy(dst=out, src=y)
    nisa.dma_copy(dst=res, src=r)
    return out, res
"""

LEGACY = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(a, p):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    x = nl.load(a)
    m = nl.load(p)
    col = nl.load(a[:, 0:1])
    {body}
    nl.store(out, y)
    nl.store(res, r)
    return out, res
"""


def _run(tmp_path: Path, template: str, body: str, hardware: str = "trn2") -> tuple[np.ndarray, ...]:
    path = tmp_path / "kernel.py"
    path.write_text(template.replace("{body}", body))
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    p = (rng.random((128, 64)) > 0.5).astype(np.uint8)
    run = run_kernel(load_kernel(str(path)), [a, p], {}, numeric=True, hardware=hardware)
    return a, p, *run.outputs


@pytest.mark.parametrize("template", [MODERN, LEGACY], ids=["modern", "legacy"])
def test_select_reduce_picks_and_reduces_each_row(tmp_path: Path, template: str) -> None:
    a, p, out, res = _run(tmp_path, template,
                          "nisa.select_reduce(dst=y, predicate=m, on_true=x, on_false=-3.0, reduce_res=r)")
    expected = np.where(p != 0, a, -3.0)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(res, expected.max(axis=1, keepdims=True))


@pytest.mark.parametrize("template", [MODERN, LEGACY], ids=["modern", "legacy"])
def test_select_reduce_reverse_pred_with_a_column_on_false(tmp_path: Path, template: str) -> None:
    a, p, out, _ = _run(tmp_path, template,
                        "nisa.select_reduce(dst=y, predicate=m, on_true=x, on_false=col, reverse_pred=True)")
    np.testing.assert_array_equal(out, np.where(p == 0, a, a[:, 0:1]))


def test_select_reduce_through_the_registers_keeps_the_running_maximum(tmp_path: Path) -> None:
    # the first resets the registers to its rows' maximum, the second folds its own in and reads them out
    a, p, out, res = _run(tmp_path, MODERN, """nisa.select_reduce(dst=y, predicate=m, on_true=x, on_false=-9.0,
                          reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.select_reduce(dst=y, predicate=m, on_true=x, on_false=-9.0, reverse_pred=True, reduce_res=r,
                       reduce_cmd=nisa.reduce_cmd.reduce)""")
    first, second = np.where(p != 0, a, -9.0), np.where(p == 0, a, -9.0)
    np.testing.assert_array_equal(out, second)
    np.testing.assert_array_equal(res, np.maximum(first.max(1), second.max(1))[:, None])


CUMULATIVE = [("nl.multiply", "nl.add", lambda s: np.cumsum(s, axis=1)),
              ("nl.add", "nl.maximum", lambda s: np.maximum.accumulate(s, axis=1)),
              ("nl.multiply", "nl.multiply", lambda s: np.cumprod(s, axis=1))]


@pytest.mark.parametrize(("op0", "op1", "scan"), CUMULATIVE, ids=["add", "maximum", "multiply"])
def test_tensor_scalar_cumulative_carries_op1_along_each_partition(tmp_path: Path, op0, op1, scan) -> None:
    a, _, out, _ = _run(tmp_path, MODERN, f"nisa.tensor_scalar_cumulative(y, x, {op0}, {op1}, 0.5)")
    step = a * 0.5 if op0 == "nl.multiply" else a + 0.5
    np.testing.assert_allclose(out, scan(step), rtol=1e-5, atol=1e-6)


def test_tensor_scalar_cumulative_starts_from_imm1_or_the_registers(tmp_path: Path) -> None:
    a, _, out, _ = _run(tmp_path, MODERN, """nisa.tensor_scalar_cumulative(y, x, nl.add, nl.add, col,
                                  imm1=col, reduce_cmd=nisa.reduce_cmd.load_reduce)
    nisa.tensor_scalar_cumulative(y, x, nl.add, nl.add, 0.0, reduce_cmd=nisa.reduce_cmd.reduce)""")
    first = a[:, 0:1] + np.cumsum(a + a[:, 0:1], axis=1)
    np.testing.assert_allclose(out, first[:, -1:] + np.cumsum(a, axis=1), rtol=1e-5, atol=1e-5)


def test_subtract_is_the_new_element_minus_the_register(tmp_path: Path) -> None:
    a, _, out, _ = _run(tmp_path, MODERN, "nisa.tensor_scalar_cumulative(y, x, nl.add, nl.subtract, 0.0)")
    register, expected = np.zeros(128, np.float32), np.empty_like(a)
    for i in range(64):
        register = a[:, i] - register
        expected[:, i] = register
    np.testing.assert_allclose(out, expected, rtol=1e-6)
