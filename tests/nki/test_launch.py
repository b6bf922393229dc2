"""How a kernel is launched beyond its arrays: Python-value parameters and SPMD grids, also from host
wrappers that launch a kernel with a grid themselves."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import KernelUsageError, run_kernel
from accelopt_core.perfmodel import estimate
from accelopt_core.perfmodel.costs import CostModel
from accelopt_core.perfmodel.scheduler import schedule

HEADER = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""

# eps sits between two arrays, as in `layernorm(x, epsilon, gamma, beta)`
SCALED_SUM = HEADER + """
@nki.jit
def kernel(x, eps, y, factor=1.0):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    total = nl.add(nl.load(x), nl.load(y))
    nl.store(out, value=nl.multiply(nl.add(total, eps), factor))
    return out
"""

# one [128, 64] tile per program of a 2-D grid, as in the SPMD tensor-addition tutorial
TILE_ADD = HEADER + """
@nki.jit
def tile_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    cols = nl.program_id(1) * 64 + nl.arange(64)[None, :]
    nl.store(out[rows, cols], value=nl.add(nl.load(a[rows, cols]), nl.load(b[rows, cols])))
    return out
"""

HOST_WRAPPER = TILE_ADD + """
def add(a, b):
    return tile_add[a.shape[0] // 128, a.shape[1] // 64](a, b)
"""


def test_python_values_fill_named_parameters_between_arrays(run, rng):
    x, y = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    both = run(SCALED_SUM, x, y, eps=0.5, factor=2.0)
    np.testing.assert_allclose(both.out, (x + y + 0.5) * 2.0, rtol=1e-6)
    names = [t.name for t in both.numeric.trace.tensors.values() if t.buffer == "hbm"]
    assert names[:2] == ["x", "y"]  # the arrays keep their parameter names


def test_more_arrays_than_parameters_is_an_error(load, rng):
    _, kernel, _ = load(SCALED_SUM)
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(KernelUsageError, match="takes 3 array inputs besides eps, but 4 were given"):
        run_kernel(kernel, [x, x, x, x], {"eps": 0.5})


def test_a_grid_launch_runs_every_program(run, rng):
    a, b = (rng.standard_normal((256, 128)).astype(np.float32) for _ in range(2))
    both = run(TILE_ADD, a, b)  # no grid: one program writes the first tile only
    assert np.isnan(both.out[128:]).all() and np.isnan(both.out[:, 64:]).all()
    result = run_kernel(both.kernel, [a, b], grid=(2, 2))
    np.testing.assert_allclose(result.outputs[0], a + b, rtol=1e-6)
    assert result.trace.launches == [(2, 2)] and len(result.trace.program_starts) == 4


def test_a_host_wrapper_launching_a_grid_runs_every_program(run, rng):
    a, b = (rng.standard_normal((256, 128)).astype(np.float32) for _ in range(2))
    both = run(HOST_WRAPPER, a, b, name="add")
    np.testing.assert_allclose(both.out, a + b, rtol=1e-6)
    assert both.traced.trace.launches == [(2, 2)]
    assert both.traced.trace.program_starts == [0, 4, 8, 12]  # load, load, add, store in each program


def test_programs_run_one_after_another_on_one_core(run, rng):
    a, b = (rng.standard_normal((256, 128)).astype(np.float32) for _ in range(2))
    both = run(HOST_WRAPPER, a, b, name="add")
    hardware = load_hardware("trn1")
    trace = both.traced.trace
    timed = schedule(trace, hardware, CostModel(hardware))
    bounds = [*trace.program_starts, len(trace.instructions)]
    for first, following in itertools.pairwise(itertools.pairwise(bounds)):
        assert min(timed.start[following[0]:following[1]]) >= max(timed.ready[first[0]:first[1]])
    four = estimate(trace, hardware).latency
    one = estimate(run_kernel(both.module.tile_add, [a, b], numeric=False).trace, hardware).latency
    assert four == pytest.approx(4 * one, rel=0.05)  # (DMA bandwidth is booked in 0.25 us bins)


def test_grid_queries(run):
    source = HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    values = (nl.program_ndim(), nl.num_programs(), nl.num_programs(1), nl.num_programs((0, 1)))
    for i, value in enumerate(values):
        nl.store(out[0:1, i:i + 1], value=nl.full((1, 1), float(value), dtype=nl.float32))
    return out
"""
    both = run(source, np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(both.out, [[0, 1, 1, 1]])  # no grid: 0 dimensions, one program
    gridded = run_kernel(both.kernel, [np.zeros((1, 1), np.float32)], grid=(3, 2))
    np.testing.assert_array_equal(gridded.outputs[0], [[2, 6, 2, 6]])


def test_spmd_dim_over_cores_sizes_the_grid_dimension(run, rng):
    a, b = (rng.standard_normal((512, 128)).astype(np.float32) for _ in range(2))
    both = run(TILE_ADD + """
def add_over_two_cores(a, b):
    return tile_add[nl.spmd_dim(a.shape[0] // 256, nl.nc(2)), a.shape[1] // 64](a, b)
""", a, b, name="add_over_two_cores")
    np.testing.assert_allclose(both.out, a + b, rtol=1e-6)
    assert both.traced.trace.launches == [(4, 2)]


def test_an_empty_grid_is_an_error(load):
    module, _, _ = load(TILE_ADD)
    with pytest.raises(KernelUsageError, match="has no programs"):
        module.tile_add[0]


# the output-argument convention of legacy nki_jit and baremetal kernels: the caller allocates `out`
OUTPUT_ARGUMENT = HEADER + """
@nki.jit
def kernel(x, out):
    nl.store(out, value=nl.multiply(nl.load(x), 2.0))
"""


def test_a_kernel_that_fills_an_output_argument_returns_it(run, rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    both = run(OUTPUT_ARGUMENT, x, np.zeros_like(x))
    np.testing.assert_array_equal(both.out, 2 * x)
    assert not both.numeric.returned_input  # written by the kernel: an output, not an input passed back


def test_a_kernel_that_returns_nothing_and_writes_nothing_has_no_outputs(run, rng):
    source = HEADER + "@nki.jit\ndef kernel(x, out):\n    t = nl.load(x)\n"
    x = rng.standard_normal((128, 64)).astype(np.float32)
    assert run(source, x, np.zeros_like(x)).numeric.outputs == []


def test_a_dtype_passes_through_as_a_python_value(run, rng):
    source = HEADER + """
@nki.jit
def kernel(x, dtype):
    out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x))
    return out
"""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    assert run(source, x, dtype=np.float16).out.dtype == np.float16


def test_an_hbm_argument_is_true_at_trace_time(run, rng):
    """`bias = nl.load(b) if b else None`, as AWS's own ISA tests write optional inputs."""
    source = HEADER + """
@nki.jit
def kernel(x, b=None):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.add(t, nl.load(b)) if b else t)
    return out
"""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(run(source, x, x).out, 2 * x)
