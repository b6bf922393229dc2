"""Kernels that game the check are rejected; each guard has a cheating kernel."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.tasks.registry import task_files

SILU = Path(task_files("silu").kernel).read_text()


@pytest.fixture(scope="module")
def profiler() -> SimulatorProfiler:
    return SimulatorProfiler(seeds=5, check_variant="small")


def test_skipping_work_fails_correctness(profiler: SimulatorProfiler) -> None:
    lazy = SILU.replace("result = nl.divide(tile, denominator)", "result = tile")
    result = profiler.profile(lazy, TaskRef("silu"))
    assert result.correct is False and "relative L2 error" in result.check_message


def test_work_below_the_analytic_minimum_is_impossible(profiler: SimulatorProfiler) -> None:
    """Correct on the small size, but at full size it only processes the first 256 rows."""
    partial = SILU.replace("for r in nl.affine_range(rows // tile_p):",
                           "for r in nl.affine_range(min(rows, 256) // tile_p):")
    result = profiler.profile(partial, TaskRef("silu"))
    assert result.correct is False and "skips work" in result.check_message


def test_returning_an_input_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "identity_ref.py").write_text(textwrap.dedent('''
        import numpy as np

        def make_inputs(rng):
            return [rng.standard_normal((128, 512), dtype=np.float32)]

        def reference(x):
            return x.copy()
    '''))
    cheat = textwrap.dedent('''
        import neuronxcc.nki as nki

        @nki.jit
        def kernel(x):
            return x
    ''')
    result = SimulatorProfiler(seeds=2).profile(cheat, TaskRef(reference=str(tmp_path / "identity_ref.py")))
    assert result.correct is False and "returned one of its inputs" in result.check_message


@pytest.mark.parametrize("returned", ["x.reshape((512, 128))", "x.reshape((64, 1024)).reshape((128, 512))"])
def test_returning_a_reshaped_view_of_an_input_is_rejected(tmp_path: Path, returned: str) -> None:
    """A reshaped view is the input itself, under another shape."""
    (tmp_path / "flip_ref.py").write_text(textwrap.dedent('''
        import numpy as np

        def make_inputs(rng):
            return [rng.standard_normal((128, 512), dtype=np.float32)]

        def reference(x):
            return x.reshape(OUT_SHAPE).copy()
    ''').replace("OUT_SHAPE", "(512, 128)" if returned.count("reshape") == 1 else "(128, 512)"))
    cheat = f"import neuronxcc.nki as nki\n\n@nki.jit\ndef kernel(x):\n    return {returned}\n"
    result = SimulatorProfiler(seeds=1).profile(cheat, TaskRef(reference=str(tmp_path / "flip_ref.py")))
    assert result.correct is False and "returned one of its inputs" in result.check_message


def test_reading_the_output_before_writing_it_is_rejected(profiler: SimulatorProfiler) -> None:
    peek = SILU.replace("            tile = nl.load(", "            stale = nl.load(out[r * tile_p:(r + 1) * tile_p, "
                        "c * tile_f:(c + 1) * tile_f])\n            tile = nl.load(")
    result = profiler.profile(peek, TaskRef("silu"))
    assert result.correct is False
    assert "reads an output tensor before anything was written" in result.check_message


def test_nan_outputs_never_pass(tmp_path: Path) -> None:
    (tmp_path / "nan_ref.py").write_text(textwrap.dedent('''
        import numpy as np

        def make_inputs(rng):
            return [np.full((128, 512), np.nan, dtype=np.float32)]

        def reference(x):
            return x.copy()
    '''))
    copy_kernel = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.load(x))
            return out
    ''')
    result = SimulatorProfiler(seeds=1).profile(copy_kernel, TaskRef(reference=str(tmp_path / "nan_ref.py")))
    assert result.correct is False and "NaN" in result.check_message


RESHAPE_REF = textwrap.dedent('''
    import numpy as np

    def make_inputs(rng):
        return [rng.standard_normal((128, 512), dtype=np.float32)]

    def reference(x):
        return x.copy()
''')


def _copy_through(view: str) -> str:
    return textwrap.dedent(f'''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            tile = nl.load({view})
            nl.store(out, value=nl.load(x))
            nl.store(out, value=tile)
            return out
    ''')


def test_reading_a_reshaped_input_is_honest(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(RESHAPE_REF)
    result = SimulatorProfiler(seeds=1).profile(_copy_through("x.reshape((128, 512))"),
                                                TaskRef(reference=str(tmp_path / "ref.py")))
    assert result.correct is True, result.check_message


def test_reading_a_reshaped_output_before_writing_it_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(RESHAPE_REF)
    result = SimulatorProfiler(seeds=1).profile(_copy_through("out.reshape((128, 512))"),
                                                TaskRef(reference=str(tmp_path / "ref.py")))
    assert result.correct is False and "before anything was written" in result.check_message


def test_an_edited_reference_is_not_answered_from_the_cache(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(RESHAPE_REF)
    profiler, task = SimulatorProfiler(seeds=1), TaskRef(reference=str(tmp_path / "ref.py"))
    kernel = _copy_through("x.reshape((128, 512))")
    assert profiler.profile(kernel, task).correct is True
    (tmp_path / "ref.py").write_text(RESHAPE_REF.replace("return x.copy()", "return -x"))
    assert profiler.profile(kernel, task).correct is False


def test_an_output_argument_the_kernel_fills_is_checked_as_its_output(tmp_path: Path) -> None:
    """`kernel(x, out)` returning nothing: the arguments it wrote are its outputs; an input merely
    passed back stays rejected (above)."""
    (tmp_path / "double_ref.py").write_text(textwrap.dedent('''
        import numpy as np

        def make_inputs(rng):
            x = rng.standard_normal((128, 512), dtype=np.float32)
            return [x, np.zeros_like(x)]

        def reference(x, out):
            return 2 * x
    '''))
    fills = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        @nki.jit
        def kernel(x, out):
            nl.store(out, value=nl.multiply(nl.load(x), 2.0))
    ''')
    result = SimulatorProfiler(seeds=2).profile(fills, TaskRef(reference=str(tmp_path / "double_ref.py")))
    assert result.correct is True, result.check_message
