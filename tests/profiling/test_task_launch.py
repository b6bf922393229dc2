"""A reference says how its kernel is launched (KERNEL_ARGS, GRID, per size variant, in both reference
forms), and the profiler launches the kernel that way in its sandbox."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.tasks import TaskError
from accelopt_core.tasks.task import load_reference, parse_grid

# a [rows, 64] image averaged over windows of `pool` columns, one program per 128-row tile; the window
# count comes from a helper module beside the kernel file
POOL_KERNEL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from pool_helpers import window_count


@nki.jit
def kernel(image, pool):
    rows, cols = image.shape
    out = nl.ndarray((rows, cols // pool), dtype=image.dtype, buffer=nl.shared_hbm)
    first = nl.program_id(0) * 128
    tile = nl.load(image[first:first + 128, :])
    i_p, i_w, i_k = nl.mgrid[0:128, 0:cols // pool, 0:pool]
    total = nl.sum(tile[i_p, pool * i_w + i_k], axis=[2])
    nl.store(out[first:first + 128, :], value=nl.multiply(total, 1.0 / window_count(pool)))
    return out
'''


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def pool_task(tmp_path: Path) -> tuple[Path, Path]:
    kernel = write(tmp_path, "pool.py", POOL_KERNEL)
    write(tmp_path, "pool_helpers.py", "def window_count(pool):\n    return pool\n")
    reference = write(tmp_path, "pool_ref.py", '''
        import numpy as np

        VARIANTS = {"full": {"rows": 512, "pool": 4}, "small": {"rows": 256, "pool": 2}}


        def KERNEL_ARGS(rows, pool):
            return {"pool": pool}


        def GRID(rows, pool):
            return (rows // 128,)


        def make_inputs(rng, rows, pool):
            return [rng.standard_normal((rows, 64)).astype(np.float32)]


        def reference(image):
            rows, cols = image.shape
            pool = rows // 128  # 4 for the full variant, 2 for the small one
            return image.reshape(rows, cols // pool, pool).mean(axis=2)
    ''')
    return kernel, reference


def test_kernel_args_and_grid_follow_the_size_variant(pool_task):
    _, reference = pool_task
    full, small = load_reference(str(reference)), load_reference(str(reference), variant="small")
    assert (full.kernel_args, full.grid) == ({"pool": 4}, (4,))
    assert (small.kernel_args, small.grid) == ({"pool": 2}, (2,))


def test_the_profiler_launches_the_kernel_as_the_reference_says(pool_task):
    kernel, reference = pool_task
    profiler = SimulatorProfiler(seeds=2)
    for variant in (None, "small"):
        profiler.check_variant = variant
        result = profiler.profile(kernel.read_text(), TaskRef(reference=str(reference)), kernel_label=str(kernel))
        assert result.error is None and result.correct is True, (result.error, result.check_message)
        assert result.profile["spmd"]["grids"] == [[4]]  # timed at full size: 4 programs
        assert result.profile["spmd"]["schedule"] == "4 SPMD programs run one after another on one NeuronCore"


def test_a_grid_given_with_the_task_replaces_the_references(pool_task):
    kernel, reference = pool_task
    result = SimulatorProfiler(seeds=1).profile(kernel.read_text(), TaskRef(reference=str(reference), grid=(2,)),
                                                kernel_label=str(kernel))
    assert result.correct is False  # only half of the rows are written
    assert TaskRef(reference=str(reference), grid=(2,)).key != TaskRef(reference=str(reference)).key


def test_nkibench_form_takes_kernel_args_and_grid(tmp_path: Path):
    reference = write(tmp_path, "bench_ref.py", '''
        import numpy as np

        KERNEL_ARGS = {"eps": 1e-6}
        GRID = 2


        def get_inputs():
            return [np.random.standard_normal((4, 8)).astype(np.float32)]


        def forward(x):
            return x
    ''')
    task = load_reference(str(reference))
    assert (task.kernel_args, task.grid) == ({"eps": 1e-6}, (2,))


@pytest.mark.parametrize("text, message", [("KERNEL_ARGS = [1, 2]", "KERNEL_ARGS must map"),
                                           ("KERNEL_ARGS = {'not a name': 1}", "KERNEL_ARGS must map"),
                                           ("KERNEL_ARG_EXPRESSIONS = {'cfg': 2}", "Python expressions as text"),
                                           ("KERNEL_ARGS = {'cfg': 1}; KERNEL_ARG_EXPRESSIONS = {'cfg': 'Scale(2)'}",
                                            "cfg given in both"),
                                           ("GRID = (2, 0)", "GRID must be positive integers"),
                                           ("GRID = 'wide'", "GRID must be positive integers")])
def test_bad_launch_settings_are_task_errors(tmp_path: Path, text: str, message: str):
    reference = write(tmp_path, "bad_ref.py", f'''
        import numpy as np

        {text}


        def make_inputs(rng):
            return [np.zeros((2, 2), np.float32)]


        def reference(x):
            return x
    ''')
    with pytest.raises(TaskError, match=message):
        load_reference(str(reference))


# a kernel whose parameter is a config object its own file defines, as library kernels take them
CONFIG_KERNEL = '''
from dataclasses import dataclass

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@dataclass(frozen=True)
class Scale:
    factor: float
    offset: float = 0.0


@nki.jit
def kernel(x, cfg: Scale):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.multiply(nl.load(x), cfg.factor), cfg.offset))
    return out
'''


def _profile_scaled(tmp_path: Path, expression: str, expected: str, seeds: int = 2):
    """The config kernel profiled against x -> `expected`, its `cfg` given as `expression`."""
    kernel = write(tmp_path, "scaled.py", CONFIG_KERNEL)
    reference = write(tmp_path, "scaled_ref.py", f'''
        import numpy as np

        KERNEL_ARG_EXPRESSIONS = {{"cfg": "{expression}"}}


        def make_inputs(rng):
            return [rng.standard_normal((128, 64)).astype(np.float32)]


        def reference(x):
            return {expected}
    ''')
    return SimulatorProfiler(seeds=seeds).profile(kernel.read_text(), TaskRef(reference=str(reference)),
                                                  kernel_label=str(kernel))


def test_a_kernel_parameter_of_the_kernels_own_type_is_built_in_its_module(tmp_path: Path):
    result = _profile_scaled(tmp_path, "Scale(3.0, offset=1.0)", "3.0 * x + 1.0")
    assert result.error is None and result.correct is True, (result.error, result.check_message)


def test_an_expression_the_kernels_module_cannot_evaluate_is_a_clear_error(tmp_path: Path):
    result = _profile_scaled(tmp_path, "Scael(3.0)", "3.0 * x", seeds=1)
    assert result.correct is not True
    assert "kernel parameter 'cfg', 'Scael(3.0)', failed in the kernel's module: NameError" in result.error


def test_grid_spellings():
    assert parse_grid(4) == (4,) and parse_grid((2, 3)) == (2, 3) and parse_grid("2x2") == (2, 2)
    assert parse_grid("3X1") == (3, 1)
    for bad in ("", "2x", "0", [2, -1], 2.5j):
        with pytest.raises(ValueError):
            parse_grid(bad)
