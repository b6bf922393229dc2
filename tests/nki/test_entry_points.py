"""Entry points: calling jit kernels, simulate_kernel, decorator forms, SPMD grids."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt_core.nki import run_kernel

BODY = """
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(a), 2.0))
    return out
"""


@pytest.mark.parametrize("decorator", ["@nki.jit", "@nki.jit()", "@nki.jit(mode='simulation')",
                                       "@nki.baremetal", "@nki.baremetal(save_neff_name='k.neff')",
                                       "@nki.benchmark", "@nki.benchmark(warmup=10, iters=100)",
                                       "@nki.profile(working_directory='/tmp')", "@nki.trace"])
def test_decorated_kernel_called_with_numpy(load, decorator):
    module, _, _ = load(f"""
from neuronxcc import nki
import neuronxcc.nki.language as nl

{decorator}
def kernel(a):{BODY}""")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = module.kernel(a)
    assert isinstance(result, np.ndarray)
    np.testing.assert_array_equal(result, 2 * a)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4))  # input untouched


def test_simulate_kernel(load):
    module, _, _ = load(f"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(a):{BODY}

def undecorated(a):{BODY}""")
    a = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(module.nki.simulate_kernel(module.kernel, a), 2 * a)
    np.testing.assert_array_equal(module.nki.simulate_kernel(module.undecorated, a), 2 * a)


def test_multiple_outputs_are_a_tuple(load):
    module, _, _ = load("""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(a):
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(o1, value=t)
    nl.store(o2, value=nl.add(t, 1.0))
    return o1, o2
""")
    o1, o2 = module.kernel(np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(o1, 0)
    np.testing.assert_array_equal(o2, 1)


SPMD = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    rows = a.shape[0] // nl.num_programs(0)
    t = nl.load(a[pid * rows:(pid + 1) * rows, :])
    nl.store(out[pid * rows:(pid + 1) * rows, :], value=nl.add(t, float(pid)))
    return out
"""


def test_spmd_grid_shares_the_output(load, rng):
    # shared_hbm is documented as visible to every SPMD instance, but not how an output allocated
    # inside the kernel maps across instances; the simulator pairs the n-th shared_hbm allocation
    # of each instance with the first instance's, so all instances write one output tensor.
    module, kernel, _ = load(SPMD)
    a = rng.standard_normal((256, 8)).astype(np.float32)
    result = module.kernel[2](a)
    want = a.copy()
    want[128:] += 1.0
    np.testing.assert_allclose(result, want)
    traced = run_kernel(kernel[2], [a], numeric=False)
    hbm = [t for t in traced.trace.tensors.values() if t.buffer == "hbm"]
    assert len(hbm) == 2  # one input, one output shared by both program instances
    stores = [i for i in traced.trace.instructions if i.attrs and i.attrs.get("direction") == "sbuf_to_hbm"]
    assert [i.writes[0].region for i in stores] == [((0, 128), (0, 8)), ((128, 256), (0, 8))]


def test_spmd_two_dimensional_grid(load):
    module, _, _ = load("""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(a):
    out = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    j = nl.program_id(1)
    t = nl.full((1, 1), float(10 * i + j + 100 * nl.program_ndim()), dtype=nl.float32)
    nl.store(out[i:i + 1, j:j + 1], value=t)
    return out
""")
    result = module.kernel[2, 3](np.zeros(1, np.float32))
    np.testing.assert_array_equal(result, [[200, 201, 202], [210, 211, 212]])


def test_platform_target_selects_the_limits(load):
    # trn2 SBUF partitions are 224 KiB, trn1 192 KiB: a 200 KiB tile fits only on trn2
    source = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit(mode="simulation", platform_target="{target}")
def kernel(a):
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    big = nl.ndarray((128, 200 * 256), dtype=nl.float32, buffer=nl.sbuf)
    nl.store(out, value=nl.load(a))
    return out
"""
    module, _, _ = load(source.format(target="trn2"))
    np.testing.assert_array_equal(module.kernel(np.ones((1, 1), np.float32)), [[1.0]])
    module, _, _ = load(source.format(target="trn1"))
    with pytest.raises(Exception, match="SBUF partition"):
        module.kernel(np.ones((1, 1), np.float32))


def test_kernel_calling_another_kernel_traces_into_it(run):
    both = run("""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def helper(t):
    return nl.exp(t)

@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=helper(nl.load(a)))
    return out
""", np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((2, 2)))
    assert [op for _, op in both.ops()] == ["dma_copy", "activation", "dma_copy"]
