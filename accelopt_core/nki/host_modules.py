"""Stand-ins for host-side packages a kernel file imports only for its own tests and benchmarks.

Sample kernel files often import `torch`, `torch_xla` or `scipy` at module level for the code under
`if __name__ == "__main__":` (building inputs, comparing with a framework), not for the kernel. When
such a package is not installed, the file still loads: the import gets a placeholder, and only using
it (calling anything from it) fails, with a message naming the package and saying that the file's
host-side code needs it, not NKI. Which packages get this treatment is the documented list below;
any other missing import fails as Python would.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Frameworks and tools the public samples import for host-side code (README: "Kernel files that
# import torch, jax or scipy").
HOST_PACKAGES = frozenset({"torch", "torch_xla", "torch_neuronx", "jax", "jaxlib", "transformers", "loguru",
                           "scipy", "matplotlib", "pytest"})


class HostPackageMissingError(ImportError):
    """Raised when kernel code uses a host-side package that is not installed."""


def _missing_message(name: str, filename: str) -> str:
    root = name.split(".", 1)[0]
    return (f"{root} is not installed: {os.path.basename(filename)} imports it for host-side code (tests, "
            f"benchmarks), not for NKI, so the kernel loads without it; using {name} needs `pip install {root}`")


class _Placeholder:
    """Any attribute of a missing package: usable in annotations and default values, fails when called."""

    def __init__(self, name: str, filename: str):
        self._name = name
        self._filename = filename

    def __getattr__(self, attr: str) -> _Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}", self._filename)

    def __getitem__(self, key: Any) -> _Placeholder:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise HostPackageMissingError(_missing_message(self._name, self._filename))

    def __repr__(self) -> str:
        return f"<{self._name}: not installed>"


class _PlaceholderModule(types.ModuleType):
    def __init__(self, name: str, filename: str):
        super().__init__(name, f"placeholder for the missing host-side package {name}")
        self.__path__: list[str] = []  # a package: submodule imports are served as placeholders too
        self._accelopt_filename = filename

    def __getattr__(self, attr: str) -> _Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.__name__}.{attr}", self._accelopt_filename)


class _Loader(importlib.abc.Loader):
    def __init__(self, filename: str):
        self.filename = filename

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _PlaceholderModule(spec.name, self.filename)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _HostPackageFinder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: reached only for modules no real finder has."""

    def __init__(self, filename: str):
        self.loader = _Loader(filename)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] not in HOST_PACKAGES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)


@contextmanager
def host_package_placeholders(filename: str) -> Iterator[None]:
    """Within this block, importing a missing host-side package gives a placeholder; afterwards the
    placeholders leave sys.modules (the kernel module keeps its references)."""
    finder = _HostPackageFinder(filename)
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n, m in sys.modules.items() if isinstance(m, _PlaceholderModule)]:
            del sys.modules[name]
