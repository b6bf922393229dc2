"""Loading a kernel file as Python would import it: no inherited compiler flags, a real module while it
executes, sibling and package-relative helpers, and host-side packages that are not installed."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from accelopt_core.nki import find_kernel, load_kernel, load_module, run_kernel
from accelopt_core.nki.host_modules import HostPackageMissingError
from accelopt_core.nki.loader import package_folders, visible_folder
from accelopt_core.nki.replay import replay
from accelopt_core.nki.tape import tape_to_plain

COPY_BODY = """
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(x), {factor}))
    return out
"""


def with_body(head: str, factor: str) -> str:
    """A kernel file: `head` (imports, ending in the kernel's `def` line) and a body scaling x by `factor`."""
    return textwrap.dedent(head).lstrip("\n") + COPY_BODY.format(factor=factor)


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    return path


def test_a_dataclass_in_the_kernel_file_loads_and_configures_the_kernel(tmp_path):
    kernel = load_kernel(str(write(tmp_path / "configured.py", """
        from dataclasses import dataclass

        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @dataclass(frozen=True)
        class Config:
            factor: float = 3.0


        @nki.jit
        def kernel(x, config=None):
            config = config or Config()
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.multiply(nl.load(x), config.factor))
            return out
    """)))
    x = np.ones((4, 8), np.float32)
    np.testing.assert_array_equal(run_kernel(kernel, [x]).outputs[0], 3 * x)


def test_no_compiler_flag_of_the_loader_leaks_into_the_kernel(tmp_path):
    # the loader's own `from __future__ import annotations` must not make the kernel's annotations lazy
    kernel = load_kernel(str(write(tmp_path / "annotated.py", with_body("""
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        import neuronxcc.nki.typing as nt


        @nki.jit
        def kernel(x: nt.tensor, scale: float = 2.0) -> nt.tensor:
    """, "scale"))))
    annotations = kernel.func.__annotations__
    assert annotations["scale"] is float and not isinstance(annotations["x"], str)


def test_the_module_is_registered_under_its_file_name_only_while_it_loads(tmp_path):
    module = load_module(*_read(write(tmp_path / "registered.py", """
        import sys

        SEEN = sys.modules[__name__] is not None and __name__
        FILE = __file__
        RAN_MAIN = False
        if __name__ == "__main__":
            RAN_MAIN = True
    """)))
    assert module.SEEN == "registered" and module.FILE.endswith("registered.py") and not module.RAN_MAIN
    assert "registered" not in sys.modules


def _read(path: Path) -> tuple[str, str]:
    return path.read_text(encoding="utf-8"), str(path)


def test_a_sibling_helper_module_is_importable_and_left_behind_nowhere(tmp_path):
    write(tmp_path / "scales.py", "FACTOR = 5.0\n")
    kernel = load_kernel(str(write(tmp_path / "uses_helper.py", with_body("""
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        from scales import FACTOR


        @nki.jit
        def kernel(x):
    """, "FACTOR"))))
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(run_kernel(kernel, [x]).outputs[0], 5 * x)
    assert "scales" not in sys.modules and str(tmp_path) not in sys.path


def test_package_relative_imports_resolve_from_the_folders(tmp_path):
    root = tmp_path / "samples"
    for package in (root, root / "util", root / "kernels"):
        write(package / "__init__.py", "")
    write(root / "util" / "factors.py", "def factor():\n    return 7.0\n")
    write(root / "kernels" / "local.py", "OFFSET = 1.0\n")
    path = write(root / "kernels" / "relative.py", with_body("""
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        from ..util.factors import factor
        from .local import OFFSET


        @nki.jit
        def kernel(x):
    """, "factor() + OFFSET"))
    kernel = load_kernel(str(path))
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(run_kernel(kernel, [x]).outputs[0], 8 * x)
    assert not any(name.startswith("samples.") or name == "samples" for name in sys.modules)


def test_a_package_that_re_exports_its_kernel_module_loads_it_whole(tmp_path):
    """A library's __init__ imports the kernel module it holds; the kernel's own relative import runs
    that __init__, which must find the kernel module complete (Python imports the package first)."""
    root = tmp_path / "lib"
    write(root / "ops" / "__init__.py", "from .scaled import kernel\n")
    write(root / "ops" / "consts.py", "FACTOR = 3.0\n")
    path = write(root / "ops" / "scaled.py", with_body("""
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        from .consts import FACTOR


        @nki.jit
        def kernel(x):
    """, "FACTOR"))
    kernel = load_kernel(str(path))
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(run_kernel(kernel, [x]).outputs[0], 3 * x)
    assert not any(name == "ops" or name.startswith("ops.") for name in sys.modules)


def test_the_package_is_read_from_the_disk_not_from_the_source(tmp_path):
    """A relative import names any folder above the kernel, even in a function that never runs; only the
    `__init__.py` files on disk say what package the file is in, and so what the sandbox shows."""
    kernel_folder = tmp_path / "jobs" / "one"
    path = write(kernel_folder / "kernel.py", "def unused():\n    from ... import anything\n")
    assert visible_folder(str(path)) == str(kernel_folder)
    write(kernel_folder / "__init__.py", "")
    write(tmp_path / "jobs" / "__init__.py", "")
    assert visible_folder(str(path)) == str(tmp_path / "jobs")  # the top package, not the folder above it
    assert package_folders(str(kernel_folder)) == [str(tmp_path / "jobs"), str(kernel_folder)]


def test_a_module_of_a_package_still_imports_its_sibling_helpers_by_name(tmp_path):
    """As Python runs a script, the kernel's own folder is importable though it is a package's module."""
    write(tmp_path / "lib" / "__init__.py", "")
    write(tmp_path / "lib" / "scales.py", "FACTOR = 4.0\n")
    kernel = load_kernel(str(write(tmp_path / "lib" / "uses_helper.py", with_body("""
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        from scales import FACTOR


        @nki.jit
        def kernel(x):
    """, "FACTOR"))))
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(run_kernel(kernel, [x]).outputs[0], 4 * x)
    assert not any(name in ("lib", "scales") or name.startswith("lib.") for name in sys.modules)


def test_a_copy_of_the_source_finds_its_helpers_through_the_folder_it_names(tmp_path):
    write(tmp_path / "scales.py", "FACTOR = 5.0\n")
    source = with_body("""
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        from scales import FACTOR


        @nki.jit
        def kernel(x):
    """, "FACTOR")
    module = load_module(source, "candidate.py", folder=str(tmp_path))
    x = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(run_kernel(find_kernel(module), [x]).outputs[0], 5 * x)


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed here")
def test_a_missing_host_side_package_loads_and_fails_only_when_used(tmp_path):
    module = load_module(*_read(write(tmp_path / "with_host_code.py", with_body("""
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        import torch_xla
        from torch_xla.core import xla_model as xm


        def host_check(a: torch_xla.Tensor) -> None:
            xm.xla_device()


        @nki.jit
        def kernel(x):
    """, "2.0"))))
    x = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(run_kernel(find_kernel(module), [x]).outputs[0], 2 * x)
    with pytest.raises(HostPackageMissingError, match=r"torch_xla is not installed: with_host_code\.py imports it "
                       r"for host-side code .* not for NKI"):
        module.host_check(None)
    assert "torch_xla" not in sys.modules


def test_a_missing_package_off_the_host_list_fails_as_python_would(tmp_path):
    with pytest.raises(Exception, match="No module named 'not_a_real_package'"):
        load_kernel(str(write(tmp_path / "typo.py", """
            import not_a_real_package
            import neuronxcc.nki as nki


            @nki.jit
            def kernel(x):
                return x
        """)))


def test_work_in_a_helper_module_is_charged_to_the_kernel_file_s_line(tmp_path):
    """The lines a trace records are the profiled file's: a library kernel under a wrapper shows up at
    the wrapper's call, not at the library's line numbers (which the editor would put on the wrapper)."""
    (tmp_path / "library.py").write_text(textwrap.dedent('''
        import neuronxcc.nki.language as nl


        def double(x, out):
            t = nl.load(x)
            nl.store(out, value=nl.multiply(t, 2.0))
    '''))
    (tmp_path / "wrapper.py").write_text(textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        from library import double


        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            double(x, out)
            return out
    '''))
    result = run_kernel(load_kernel(str(tmp_path / "wrapper.py")), [np.ones((128, 64), np.float32)], record=True)
    assert {inst.line for inst in result.trace.instructions} == {10}
    replayed = replay(tape_to_plain(result.trace), [np.ones((128, 64), np.float32)], "trn1", numeric=True)
    assert {inst.line for inst in replayed.trace.instructions} == {10}
