"""The import hook: while a kernel is loaded and run, `neuronxcc.nki...` and `nki...` resolve to
the simulator. Nothing is installed into site-packages, and a real Neuron SDK already imported is
put back untouched when the hook is removed."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import UnsupportedApiError

_ALIASES = {
    "neuronxcc.nki": "accelopt_core.nki.legacy_api",
    "neuronxcc.nki.language": "accelopt_core.nki.language",
    "neuronxcc.nki.language.constants": "accelopt_core.nki.language_constants",
    "neuronxcc.nki.isa": "accelopt_core.nki.isa",
    "neuronxcc.nki.isa.constants": "accelopt_core.nki.isa_constants",
    "neuronxcc.nki.typing": "accelopt_core.nki.typing",
    "neuronxcc.nki.compiler": "accelopt_core.nki.compiler",
    **{f"neuronxcc.nki.compiler.backends{tail}": "accelopt_core.nki.backends"
       for tail in ("", ".neuron", ".neuron.indexing", ".neuron.tensor")},
    "nki": "accelopt_core.nki.modern",
    "nki.language": "accelopt_core.nki.modern.language",
    "nki.language.constants": "accelopt_core.nki.language_constants",
    "nki.isa": "accelopt_core.nki.modern.isa",
    "nki.isa.constants": "accelopt_core.nki.isa_constants",
    "nki.lnc": "accelopt_core.nki.modern.lnc",
    "nki.typing": "accelopt_core.nki.typing",
    "nki.compiler": "accelopt_core.nki.compiler",
}
_ROOTS = ("neuronxcc", "nki")


_IMPORT_ATTRS = {"__name__", "__spec__", "__loader__", "__path__", "__package__", "__file__", "__cached__"}


def _neuronxcc_package() -> types.ModuleType:
    package = types.ModuleType("neuronxcc", "Stand-in for the Neuron compiler package (AccelOpt simulator).")
    package.__path__ = []  # a package, so that submodule imports are attempted
    # `import neuronxcc` alone then `neuronxcc.nki.language...` works, as kernels sometimes assume
    package.nki = _proxy("neuronxcc.nki", importlib.import_module(_ALIASES["neuronxcc.nki"]))  # type: ignore[attr-defined]
    return package


def _proxy(fullname: str, real: types.ModuleType) -> types.ModuleType:
    """A fresh module named `fullname` holding the simulator module's contents.

    The import system stamps `__spec__`, `__loader__` and `__path__` onto whatever module a loader
    returns; handing it a copy keeps our own modules untouched (importlib.reload, pickling and
    submodule imports of accelopt_core.nki keep working after a kernel was loaded)."""
    module = types.ModuleType(fullname, real.__doc__)
    module.__dict__.update((k, v) for k, v in real.__dict__.items() if k not in _IMPORT_ATTRS)
    return module


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, module: types.ModuleType):
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class NkiFinder(importlib.abc.MetaPathFinder):
    """Maps the NKI module names onto ours; unknown NKI submodules fail with a clear error."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        root = fullname.split(".", 1)[0]
        if root not in _ROOTS:
            return None
        if fullname == "neuronxcc":
            module = _neuronxcc_package()
        elif fullname in _ALIASES:
            module = _proxy(fullname, importlib.import_module(_ALIASES[fullname]))
        else:
            raise UnsupportedApiError(f"module {fullname} is not provided by the AccelOpt NKI simulator")
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module), is_package=True)


def _owned(name: str) -> bool:
    return name.split(".", 1)[0] in _ROOTS


@contextmanager
def nki_imports() -> Iterator[None]:
    """Within this block, kernel imports of NKI resolve to the simulator."""
    saved = {name: mod for name, mod in sys.modules.items() if _owned(name)}
    for name in saved:
        del sys.modules[name]
    finder = NkiFinder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if _owned(n)]:
            del sys.modules[name]
        sys.modules.update(saved)
