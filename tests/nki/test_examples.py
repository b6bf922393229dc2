"""The example kernels shipped in accelopt_core/examples, run in both modes against NumPy."""

from __future__ import annotations

import ast
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "accelopt_core" / "examples"


def _path(name: str) -> str:
    return str(EXAMPLES / f"{name}.py")


@pytest.mark.parametrize("name", ["matmul", "softmax", "rmsnorm", "silu", "scan"])
def test_example_shape(name):
    """Each example is a documented module whose `kernel` is decorated with @nki.jit (legacy API)."""
    tree = ast.parse(Path(_path(name)).read_text(encoding="utf-8"))
    assert ast.get_docstring(tree)
    kernel = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel")
    assert [ast.unparse(d) for d in kernel.decorator_list] == ["nki.jit"]
    imports = [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
    assert "neuronxcc.nki" in imports


@pytest.mark.parametrize(("m", "k", "n"), [(128, 128, 512), (256, 384, 1024)])
def test_matmul(run_file, rng, m, k, n):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    both = run_file(_path("matmul"), a, b)
    np.testing.assert_allclose(both.out, a @ b, rtol=1e-4, atol=1e-3)
    mms = [i for i in both.instructions if i.op == "nc_matmul"]
    assert len(mms) == (m // 128) * (n // 512) * (k // 128)
    assert all(i.attrs["accumulate"] for i in mms)


@pytest.mark.parametrize(("n", "d"), [(128, 512), (384, 100)])
def test_softmax(run_file, rng, n, d):
    x = (rng.standard_normal((n, d)) * 4).astype(np.float32)
    both = run_file(_path("softmax"), x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(both.out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    per_tile = [op for _, op in both.ops()][:7]
    assert per_tile == ["dma_copy", "tensor_reduce", "activation", "tensor_reduce", "reciprocal", "tensor_scalar",
                        "dma_copy"]


def test_softmax_bf16(run_file, rng):
    x = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
    both = run_file(_path("softmax"), x)
    xf = x.astype(np.float32)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    assert both.out.dtype == x.dtype
    np.testing.assert_allclose(both.out.astype(np.float32), e / e.sum(axis=1, keepdims=True), rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize(("n", "d"), [(128, 64), (256, 512), (128, 1024), (128, 700)])
def test_rmsnorm(run_file, rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    g = rng.standard_normal(d).astype(np.float32)
    both = run_file(_path("rmsnorm"), x, g)
    want = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(both.out, want, rtol=1e-5, atol=1e-5)
    assert [op for _, op in both.ops()].count("nc_matmul") == -(-d // 512)  # weight broadcast, per PSUM bank


@pytest.mark.parametrize("shape", [(128, 512), (300, 700), (5, 3), (256, 1024)])
def test_silu(run_file, rng, shape):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    both = run_file(_path("silu"), x)
    np.testing.assert_allclose(both.out, x / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)
    acts = [i for i in both.instructions if i.op == "activation"]
    m, n = shape
    assert sum(i.partitions * i.free_elements for i in acts) == m * n  # masks trim the ragged edges


@pytest.mark.parametrize(("c", "t"), [(128, 512), (64, 1536), (256, 1024), (32, 100)])
def test_scan(run_file, rng, c, t):
    a = rng.uniform(0.8, 1.0, (c, t)).astype(np.float32)
    b = rng.standard_normal((c, t)).astype(np.float32)
    both = run_file(_path("scan"), a, b)
    want = np.empty((c, t), np.float64)
    h = np.zeros(c)
    for step in range(t):
        h = a[:, step] * h + b[:, step]
        want[:, step] = h
    np.testing.assert_allclose(both.out, want, rtol=1e-4, atol=1e-4)
    scans = [i for i in both.instructions if i.op == "tensor_tensor_scan"]
    assert len(scans) == max(1, c // 128) * max(1, t // 512)
    assert all(i.loops[-1][0].kind == "sequential" for i in scans)
