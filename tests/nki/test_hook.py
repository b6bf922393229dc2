"""The import hook: NKI module names resolve to the simulator only while a kernel is loaded or run."""

from __future__ import annotations

import importlib
import sys
import types

import numpy as np
import pytest

from accelopt_core.nki import (
    KernelLoadError,
    TensorSpec,
    UnsupportedApiError,
    language,
    load_kernel,
    load_module,
    run_kernel,
)
from accelopt_core.nki import typing as nki_typing
from accelopt_core.nki.hook import nki_imports


def _owned() -> list[str]:
    return [name for name in sys.modules if name.split(".")[0] in ("neuronxcc", "nki")]


def test_import_forms(run):
    both = run("""
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa
from neuronxcc import nki
from neuronxcc.nki import trace
from neuronxcc.nki.language import par_dim
import neuronxcc.nki.typing as nt

@trace
def kernel(a: nt.tensor[[128, 4], nl.float32]) -> nt.tensor:
    out = nl.ndarray((2, par_dim(128), 4), dtype=a.dtype, buffer=nki.language.shared_hbm)
    t = neuronxcc.nki.isa.tensor_copy(nl.load(a))
    nl.store(out[0], value=t)
    nl.store(out[1], value=t)
    return out
""", np.ones((128, 4), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((2, 128, 4)))


def test_new_package_import_forms(run):
    both = run("""
import nki
import nki.language as nl
from nki import isa as nisa
from nki.language import par_dim
import nki.typing as nt

@nki.jit
def kernel(a: nt.tensor):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((par_dim(128), 4), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)
    return out
""", np.ones((128, 4), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((128, 4)))
    assert both.kernel.api == "modern"


def test_imports_inside_the_kernel_body(run):
    both = run("""
from neuronxcc import nki

@nki.jit
def kernel(a):
    import neuronxcc.nki.language as nl
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out
""", np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((2, 2)))
    assert not _owned()


def test_nothing_is_left_behind(load):
    assert not _owned()
    load("""
import neuronxcc.nki.language as nl
import nki

def kernel():
    return None
""")
    assert not _owned()
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("neuronxcc")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("neuronxcc.nki.language")


def test_existing_modules_are_restored_untouched(load):
    fake = types.ModuleType("neuronxcc")
    fake.marker = "real SDK"  # type: ignore[attr-defined]
    fake_sub = types.ModuleType("neuronxcc.nki")
    sys.modules["neuronxcc"] = fake
    sys.modules["neuronxcc.nki"] = fake_sub
    try:
        module, _, _ = load("""
import neuronxcc
import neuronxcc.nki.language as nl

def kernel():
    return None
""")
        assert module.neuronxcc is not fake
        assert module.nl.exp is language.exp
        assert sys.modules["neuronxcc"] is fake and sys.modules["neuronxcc.nki"] is fake_sub
        assert fake.__dict__.get("nki") is None and fake.marker == "real SDK"  # type: ignore[attr-defined]
    finally:
        del sys.modules["neuronxcc"]
        del sys.modules["neuronxcc.nki"]
    assert not _owned()


def test_simulator_modules_are_not_modified(load):
    """The import system stamps __spec__/__path__ onto the modules it is handed: those are copies,
    so the simulator's own modules still reload and import normally afterwards."""
    module, _, _ = load("""
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing
import nki.language

def kernel():
    return None
""")
    assert module.nl.__name__ == "neuronxcc.nki.language"
    assert language.__spec__.name == "accelopt_core.nki.language"
    assert not hasattr(language, "__path__")
    importlib.reload(nki_typing)
    assert not _owned()


def test_hook_exits_cleanly_on_error():
    before = list(sys.meta_path)
    with pytest.raises(RuntimeError), nki_imports():
        import neuronxcc.nki  # noqa: F401

        raise RuntimeError("boom")
    assert sys.meta_path == before
    assert not _owned()


def test_library_imports_of_the_reference_kernels(run, tmp_path):
    """The NKI samples' reference utilities import compiler types for their annotations and size buffers
    with `sizeinbytes`; those imports work, and what the simulator lacks under them is named."""
    both = run("""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from neuronxcc.nki.compiler.backends.neuron.indexing import TileIndex
from neuronxcc.nki.compiler.backends.neuron.tensor import local_tile
from neuronxcc.nki.language.constants import sizeinbytes

@nki.jit
def kernel(a):
    out = nl.ndarray((128, sizeinbytes(nl.bfloat16)), dtype=a.dtype, buffer=nl.shared_hbm)
    rows: TileIndex = nl.arange(128)[:, None]
    nl.store(out[rows, nl.arange(2)[None, :]], value=nl.load(a[rows, nl.arange(2)[None, :]]))
    return out
""", np.ones((128, 4), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((128, 2)))
    for body in ("local_tile()", "import neuronxcc.nki.compiler.backends.neuron as b; b.anything"):
        path = tmp_path / "k.py"
        path.write_text(f"import neuronxcc.nki as nki\nfrom neuronxcc.nki.compiler.backends.neuron.tensor import "
                        f"local_tile\n\n@nki.jit\ndef kernel(a):\n    {body}\n    return a\n")
        with pytest.raises(UnsupportedApiError, match=r"backends\.neuron"):
            run_kernel(load_kernel(str(path)), [TensorSpec((128, 4), np.dtype(np.float32))], numeric=False)


def test_unknown_submodule(tmp_path):
    path = tmp_path / "k.py"
    path.write_text("import neuronxcc.nki.compiler.backends.neuron.passes as t\n\ndef kernel():\n    return None\n")
    with pytest.raises(UnsupportedApiError, match=r"neuronxcc\.nki\.compiler\.backends\.neuron\.passes") as info:
        load_module(path.read_text(), str(path))
    assert info.value.line == 1 and info.value.filename == str(path)
    assert not _owned()


def test_load_kernel_errors(tmp_path):
    missing = tmp_path / "missing.py"
    with pytest.raises(KernelLoadError, match="cannot read"):
        load_kernel(str(missing))
    bad = tmp_path / "bad.py"
    bad.write_text("def kernel(:\n")
    with pytest.raises(KernelLoadError, match="syntax error"):
        load_kernel(str(bad))
    two = tmp_path / "two.py"
    two.write_text("import neuronxcc.nki as nki\n\n@nki.jit\ndef a(x):\n    return x\n\n@nki.jit\ndef b(x):\n"
                   "    return x\n")
    with pytest.raises(KernelLoadError, match="cannot tell which function"):
        load_kernel(str(two))
    assert load_kernel(str(two), name="b").__name__ == "b"


def test_bare_package_import_reaches_the_submodules(run):
    both = run("""
import neuronxcc

@neuronxcc.nki.jit
def kernel(a):
    nl = neuronxcc.nki.language
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=neuronxcc.nki.isa.tensor_copy(nl.load(a)))
    return out
""", np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((2, 2)))


def test_library_modules_of_the_new_package(run):
    """nki-library code subclasses nl.NKIObject and sizes buffers with nki.language.constants."""
    both = run("""
from dataclasses import dataclass

import nki
import nki.language as nl
from nki.isa import constants, dma_engine
from nki.isa.constants import matmul_perf_mode, oob_mode
from neuronxcc.nki.language import constants as legacy_constants
from nki.language import NKIObject
from nki.language.constants import sizeinbytes


class Tiling(NKIObject):
    def __init__(self, rows):
        self.rows = rows


@dataclass
class Section(NKIObject):  # fields without annotations, built by keyword (nki-library attention_cte)
    width = None
    data_type: nki.dtype = nl.float32
    left_out: int  # not given to the constructor: None (nki-library's MLP constants)
    table = []  # unhashable: stays a class attribute


@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tiling = Tiling(a.shape[0])
    section = Section(width=legacy_constants.sizeinbytes(a.dtype))
    assert section.width == sizeinbytes(a.dtype) and constants.oob_mode is oob_mode and section.left_out is None
    t = nl.ndarray((tiling.rows, section.width), dtype=a.dtype, buffer=nl.sbuf)
    nki.isa.dma_copy(dst=t, src=a)
    nki.isa.dma_copy(dst=out, src=t)
    return out
""", np.ones((128, 4), np.float32))
    np.testing.assert_array_equal(both.out, np.ones((128, 4)))
