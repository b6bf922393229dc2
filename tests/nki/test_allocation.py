"""Allocation: nl.ndarray / zeros / ones / full / *_like, constants, buffers, par_dim block tensors."""

from __future__ import annotations

import numpy as np
import pytest

HEADER = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""


@pytest.mark.parametrize(("fn", "expected"), [("zeros", 0.0), ("ones", 1.0), ("full", 2.5)])
def test_filled_sbuf_tile_is_one_memset(run, fn, expected):
    fill = ", 2.5" if fn == "full" else ""
    both = run(HEADER + f"""
@nki.jit
def kernel():
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.{fn}((128, 64){fill}, dtype=nl.float32, buffer=nl.sbuf)
    nl.store(out, value=t)
    return out
""")
    np.testing.assert_array_equal(both.out, np.full((128, 64), expected, np.float32))
    assert both.ops() == [("vector", "memset"), ("dma", "dma_copy")]
    assert both.instructions[0].attrs == {"value": expected}


def test_ndarray_name_and_dtype_are_recorded(run):
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm, name="result")
    t = nl.ndarray((128, 32), dtype=nl.bfloat16, buffer=nl.sbuf, name="staging")
    t[...] = nl.load(a)
    nl.store(out, value=t)
    return out
""", (np.arange(128 * 32) % 256).astype(np.float32).reshape(128, 32))
    tensors = {t.name: t for t in both.numeric.trace.tensors.values()}
    assert tensors["result"].buffer == "hbm"
    assert tensors["staging"].buffer == "sbuf"
    assert tensors["staging"].dtype == "bfloat16"
    assert tensors["staging"].bytes_per_partition == 32 * 2
    assert both.out.dtype == np.float32
    np.testing.assert_array_equal(both.out, (np.arange(128 * 32) % 256).astype(np.float32).reshape(128, 32))


def test_lazy_initialization_kwarg_is_accepted(run):
    # `lazy_initialization` is not documented anywhere in the NKI docs we searched (see
    # docs/fact-sheet.md B.2); kernels in the wild pass it, so allocation accepts and ignores it.
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm, lazy_initialization=True)
    t = nl.zeros(a.shape, dtype=a.dtype, buffer=nl.sbuf, lazy_initialization=False)
    t[...] = nl.load(a)
    nl.store(out, value=t)
    return out
""", np.ones((16, 16), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((16, 16), np.float32))


@pytest.mark.parametrize("buffer", ["nl.shared_hbm", "nl.hbm", "nl.private_hbm"])
def test_output_buffers(run, buffer):
    both = run(HEADER + f"""
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer={buffer})
    nl.store(out, value=nl.load(a))
    return out
""", np.full((8, 8), 3.0, np.float32))
    np.testing.assert_array_equal(both.out, np.full((8, 8), 3.0, np.float32))
    assert [t.buffer for t in both.numeric.trace.tensors.values()] == ["hbm", "hbm", "sbuf"]


def test_psum_zeros_and_like_functions(run):
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    z = nl.zeros_like(t)
    o = nl.ones_like(t, dtype=nl.bfloat16)
    e = nl.empty_like(t)
    e[...] = nl.add(z, o)
    nl.store(out, value=nl.add(e, acc))
    return out
""", np.zeros((128, 512), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((128, 512), np.float32))
    tensors = list(both.numeric.trace.tensors.values())
    assert [t.buffer for t in tensors[3:7]] == ["psum", "sbuf", "sbuf", "sbuf"]
    assert tensors[5].dtype == "bfloat16"


def test_shared_constant_and_identity(run):
    table = np.arange(64, dtype=np.float32).reshape(8, 8)
    both = run(HEADER + """
TABLE = np.arange(64, dtype=np.float32).reshape(8, 8)

@nki.jit
def kernel():
    out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    c = nl.shared_constant(TABLE)
    eye = nl.shared_identity_matrix(8)
    ident = nl.load(eye, dtype=nl.float32)
    nl.store(out, value=nl.add(nl.load(c), ident))
    return out
""")
    np.testing.assert_array_equal(both.out, table + np.eye(8, dtype=np.float32))
    tensors = {t.name: t for t in both.numeric.trace.tensors.values()}
    consts = [t for t in both.numeric.trace.tensors.values() if t.buffer == "hbm" and t.shape == (8, 8)]
    assert "uint8" in {t.dtype for t in consts}  # shared_identity_matrix defaults to uint8
    assert tensors  # names exist


def test_par_dim_block_tensor(run, rng):
    a = rng.standard_normal((512, 256)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((4, nl.par_dim(128), 256), dtype=nl.float32, buffer=nl.sbuf, name="blocks")
    for i in nl.affine_range(4):
        buf[i] = nl.load(a[i * 128:(i + 1) * 128, :])
    for i in nl.affine_range(4):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.exp(buf[i, :, :]))
    return out
""", a)
    np.testing.assert_allclose(both.out, np.exp(a), rtol=1e-6)
    blocks = next(t for t in both.numeric.trace.tensors.values() if t.name == "blocks")
    assert blocks.partition_axis == 1
    assert blocks.bytes_per_partition == 4 * 256 * 4
    loads = [i for i in both.instructions if i.op == "dma_copy" and i.attrs["direction"] == "hbm_to_sbuf"]
    assert len(loads) == 4  # `buf[i] = nl.load(...)` is one DMA straight into the block
    assert [w.region for inst in loads for w in inst.writes] == [
        ((i, i + 1), (0, 128), (0, 256)) for i in range(4)]
    assert all(inst.partitions == 128 and inst.free_elements == 256 for inst in loads)


def test_zeros_on_block_tensor_is_one_memset_per_block(run):
    both = run(HEADER + """
@nki.jit
def kernel():
    out = nl.ndarray((3, 128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    buf = nl.zeros((3, nl.par_dim(128), 16), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(3):
        nl.store(out[i], value=buf[i])
    return out
""")
    np.testing.assert_array_equal(both.out, np.zeros((3, 128, 16), np.float32))
    assert [op for _, op in both.ops()] == ["memset"] * 3 + ["dma_copy"] * 3


def test_block_tensor_bigger_than_sbuf_is_not_an_error(run):
    # 64 blocks x 4 KiB per partition = 256 KiB per partition, more than SBUF, but each block (one
    # tile) fits: the compiler allocates block tiles individually, so this must be accepted.
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
    big = nl.ndarray((64, nl.par_dim(128), 1024), dtype=nl.float32, buffer=nl.sbuf)
    big[0] = nl.load(a)
    nl.store(out, value=big[0])
    return out
""", np.ones((128, 1024), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((128, 1024), np.float32))
    info = next(t for t in both.numeric.trace.tensors.values() if t.buffer == "sbuf")
    assert info.bytes_per_partition == 64 * 1024 * 4


def test_uninitialised_sbuf_reads_as_nan(run):
    both = run(HEADER + """
@nki.jit
def kernel():
    out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
    nl.store(out, value=t)
    return out
""")
    assert np.isnan(both.out).all()
