"""Loading kernel files: execute the module under the import hook and find its kernel function."""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import language as legacy_language
from .errors import KernelUsageError
from .hook import nki_imports
from .host_modules import host_package_placeholders
from .runner import Kernel
from .trace import LoopKind

KERNEL_NAMES = ("kernel", "optimized_kernel")


class KernelLoadError(Exception):
    """The file is not a loadable kernel module (syntax error, import failure, no kernel)."""


TOO_DEEP = "nested too deeply for Python's parser"
# CPython 3.11 keeps the AST converter's recursion depth in state all threads share (python/cpython#106905):
# two threads parsing at once (the search's evaluation workers) fail with a spurious SystemError.
_ONE_PARSE_AT_A_TIME = threading.Lock()


def parse_source(source: str, filename: str = "<kernel>") -> ast.Module:
    """The file's syntax tree (every syntax tree the engine builds comes from here, one at a time).
    Python's parser gives up on pathological nesting (thousands of unary operators or operands in one
    expression) with RecursionError or MemoryError; that is a syntax error here too, so every caller
    reports one kind of bad input (`accelopt profile` exits 2)."""
    try:
        with _ONE_PARSE_AT_A_TIME:
            return ast.parse(source, filename)
    except (RecursionError, MemoryError):
        raise SyntaxError(TOO_DEEP, (filename, None, None, None)) from None


def syntax_message(filename: str, exc: BaseException) -> str:
    """`file:line: syntax error: what`, the line left out when the parser could not say."""
    line = getattr(exc, "lineno", None)
    what = getattr(exc, "msg", None) or TOO_DEEP
    return f"{os.path.basename(filename)}{f':{line}' if line else ''}: syntax error: {what}"


def load_module(source: str, filename: str, name: str | None = None, folder: str | None = None) -> types.ModuleType:
    """Execute kernel source as Python would import the file: compiled without this module's compiler
    flags, registered in sys.modules under its own name while it runs (dataclasses and typing look
    themselves up there), with `__name__` and `__file__` set and its folder importable, so sibling
    helper modules and package-relative imports work. `folder` is where the file lives when
    `filename` is only a label (a sandbox's copy); without either, nothing beside it is importable.
    Nothing stays behind in sys.modules or sys.path."""
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
        tree = parse_source(source, filename)
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise KernelLoadError(syntax_message(filename, exc)) from None
    module_name, package, roots = _import_identity(filename, _kernel_folder(filename, folder), name)
    module = types.ModuleType(module_name)
    module.__file__ = filename
    module.__package__ = package
    api = "modern" if _uses_modern_api(tree) else "legacy"
    kind = LoopKind.STATIC if api == "modern" else LoopKind.SEQUENTIAL
    # Python's range inside a kernel is a recorded loop (legacy: sequential_range; new API: unrolled).
    module.range = lambda *args: legacy_language.KernelRange(kind, *args)  # type: ignore[attr-defined]
    module.__accelopt_api__ = api  # type: ignore[attr-defined]
    with nki_imports(), host_package_placeholders(filename), _importable(module, roots, registered=not package):
        if package:
            _import_in_package(module, code)
        else:
            exec(code, module.__dict__)  # kernels run in sandboxed workers, never in the server
    return module


class _KernelModuleLoader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports one module name as the prepared kernel module, running its code."""

    def __init__(self, module: types.ModuleType, code: types.CodeType):
        self.module, self.code = module, code

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.module.__name__:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=self.module.__file__)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        exec(self.code, module.__dict__)


def _import_in_package(module: types.ModuleType, code: types.CodeType) -> None:
    """Import a package's kernel module as Python imports a submodule: its packages first, so a package
    whose __init__ imports the kernel module (a library's usual re-export) finds it whole, not half run."""
    loader = _KernelModuleLoader(module, code)
    sys.meta_path.insert(0, loader)
    try:
        importlib.import_module(module.__name__)
    finally:
        sys.meta_path.remove(loader)


MAX_PACKAGE_DEPTH = 32  # folders of one package, from its top down to the kernel's folder


def package_folders(folder: str) -> list[str]:
    """The package `folder` is part of, decided by the disk alone: the folders from the top package down to
    `folder`, each holding an `__init__.py` and named like a Python identifier; [] when `folder` is no
    package. The kernel's source never decides it (an import statement names any folder above it)."""
    chain: list[str] = []
    current = os.path.abspath(folder)
    while (len(chain) < MAX_PACKAGE_DEPTH and os.path.basename(current).isidentifier()
           and os.path.isfile(os.path.join(current, "__init__.py"))):
        chain.insert(0, current)
        current = os.path.dirname(current)
    return chain


def _kernel_folder(filename: str, folder: str | None) -> str | None:
    return folder or (os.path.dirname(filename) if os.path.isabs(filename) else None)


def visible_folder(filename: str, folder: str | None = None) -> str | None:
    """The one folder of the disk a sandbox shows this kernel, or None: the top of the package its folder
    is part of (its helpers, relative imports included, are all below it), else its own folder."""
    folder = _kernel_folder(filename, folder)
    if folder is None:
        return None
    chain = package_folders(folder)
    return chain[0] if chain else os.path.abspath(folder)


def _import_identity(filename: str, folder: str | None, name: str | None) -> tuple[str, str, list[str]]:
    """(module name, package, folders to put on sys.path) for a kernel file. A file in a package (its
    folders hold `__init__.py` files) is a module of that package, importable from the folder above its
    top; its own folder is importable too, as Python makes a script's folder. Otherwise it is a top-level
    module named after the file."""
    stem = os.path.splitext(os.path.basename(filename))[0]
    module = name or (stem if stem.isidentifier() else "accelopt_kernel")
    if folder is None:
        return module, "", []
    chain = package_folders(folder) if name is None else []
    if not chain:
        return module, "", [folder]
    package = ".".join(os.path.basename(part) for part in chain)
    return f"{package}.{module}", package, [folder, os.path.dirname(chain[0])]


@contextmanager
def _importable(module: types.ModuleType, roots: list[str], registered: bool = True) -> Iterator[None]:
    """The module in sys.modules (put there here when `registered`, else by its import) and `roots` first
    on sys.path while the file executes; afterwards they are gone again, with every module imported
    from below them (its helpers)."""
    before = set(sys.modules)
    if registered:
        sys.modules[module.__name__] = module
    sys.path[:0] = roots
    try:
        yield
    finally:
        for root in roots:
            sys.path.remove(root)
        if roots:
            inside = [os.path.join(os.path.abspath(root), "") for root in roots]
            # decide before deleting: a namespace package's __path__ is recomputed from its parent
            helpers = [added for added in set(sys.modules) - before
                       if any(_located_in(sys.modules[added], place) for place in inside)]
            for added in helpers:
                del sys.modules[added]
        sys.modules.pop(module.__name__, None)


def _located_in(module: types.ModuleType, folder: str) -> bool:
    """Whether a module (or a package, by its search path) comes from below `folder`."""
    places = [getattr(module, "__file__", None) or "", *list(getattr(module, "__path__", None) or [])]
    return any(os.path.abspath(place).startswith(folder) for place in places if place)


def _uses_modern_api(tree: ast.Module) -> bool:
    """True when the kernel imports the newer top-level `nki` package rather than `neuronxcc.nki`."""
    modern = legacy = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modern |= alias.name == "nki" or alias.name.startswith("nki.")
                legacy |= alias.name.startswith("neuronxcc")
        elif isinstance(node, ast.ImportFrom) and node.module:
            modern |= node.module == "nki" or node.module.startswith("nki.")
            legacy |= node.module.startswith("neuronxcc")
    return modern and not legacy


def find_kernel(module: types.ModuleType, name: str | None = None) -> Kernel:
    """The kernel: the named function, else `kernel` / `optimized_kernel`, else the only jit kernel."""
    api = getattr(module, "__accelopt_api__", "legacy")
    candidates: list[tuple[str, Any]] = []
    if name:
        if not hasattr(module, name):
            raise KernelLoadError(f"no function named {name!r} in {module.__file__}")
        candidates = [(name, getattr(module, name))]
    else:
        for known in KERNEL_NAMES:
            if callable(getattr(module, known, None)):
                candidates = [(known, getattr(module, known))]
                break
        else:
            candidates = [(n, v) for n, v in vars(module).items() if isinstance(v, Kernel)]
    if len(candidates) != 1:
        found = ", ".join(n for n, _ in candidates) or "none"
        raise KernelLoadError(f"{module.__file__}: cannot tell which function is the kernel (found: {found}); "
                              "name it `kernel`, decorate exactly one function with @nki.jit, or pass "
                              "--kernel-name")
    _, obj = candidates[0]
    if isinstance(obj, Kernel):
        return obj
    if not callable(obj):
        raise KernelLoadError(f"{module.__file__}: {candidates[0][0]} is not a function")
    return Kernel(obj, api)


def read_source(path: str) -> str:
    """A kernel file's text, or KernelLoadError saying why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise KernelLoadError(f"cannot read kernel file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise KernelLoadError(f"{path} is not a text file") from None


def load_kernel(path: str, name: str | None = None) -> Kernel:
    source = read_source(path)
    try:
        module = load_module(source, os.path.abspath(path))
    except KernelLoadError:
        raise
    except KernelUsageError:
        raise
    except Exception as exc:  # an import error or a failing top-level statement in the kernel file
        raise KernelLoadError(f"{path}: loading the kernel module failed: {type(exc).__name__}: {exc}") from None
    return find_kernel(module, name)


def check_source(source: str, filename: str, name: str | None = None) -> str:
    """Without running anything: the kernel function's name, or KernelLoadError (syntax error,
    no recognisable kernel). Lets a caller reject bad input before starting a sandboxed run."""
    try:
        tree = parse_source(source, filename)
    except SyntaxError as exc:
        raise KernelLoadError(syntax_message(filename, exc)) from None
    if not source.strip():
        raise KernelLoadError(f"{filename}: the file is empty: there is no kernel in it")
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    if not functions:
        raise KernelLoadError(f"{filename}: the file defines no function: there is no kernel in it")
    chosen = _chosen_kernel(functions, filename, name)
    if not _uses_nki(tree):
        line = next(f.lineno for f in functions if f.name == chosen)
        raise KernelLoadError(f"{filename}:{line}: `{chosen}` is not an NKI kernel: the file imports no NKI module "
                              "(neuronxcc.nki or nki) and calls no NKI function")
    return chosen


NKI_NAMES = frozenset({"nki", "nl", "nisa"})  # the names kernels call NKI by, also when a helper imports it


def _uses_nki(tree: ast.Module) -> bool:
    """Whether a file can be an NKI kernel: it imports an NKI module, decorates a function as NKI's
    decorators do, or calls NKI by its usual names (imported through a helper module of its own)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(_is_nki_module(alias.name) for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.level or _is_nki_module(node.module or "")):
            return True
        if isinstance(node, ast.FunctionDef) and any(is_kernel_decorator(d) for d in node.decorator_list):
            return True
        if isinstance(node, ast.Name) and node.id in NKI_NAMES:
            return True
    return False


def _is_nki_module(name: str) -> bool:
    return name == "nki" or name.startswith(("nki.", "neuronxcc"))


def _chosen_kernel(functions: list[ast.FunctionDef], filename: str, name: str | None) -> str:
    """The kernel among the file's top-level functions: the one named, else `kernel` or `optimized_kernel`,
    else the only decorated one."""
    names = [f.name for f in functions]
    if name:
        if name not in names:
            raise KernelLoadError(f"no function named {name!r} in {filename}")
        return name
    for known in KERNEL_NAMES:
        if known in names:
            return known
    decorated = [f.name for f in functions if any(is_kernel_decorator(d) for d in f.decorator_list)]
    if len(decorated) == 1:
        return decorated[0]
    found = ", ".join(decorated) or "none"
    raise KernelLoadError(f"{filename}: cannot tell which function is the kernel (found: {found}); name it "
                          "`kernel`, decorate exactly one function with @nki.jit, or pass --kernel-name")


def declared_hardware(source: str, filename: str, name: str | None = None) -> str | None:
    """The hardware the kernel's decorator names (`@nki.jit(platform_target="trn2")`), read without
    running anything; None when it names none (or names it by a computed value)."""
    kernel = check_source(source, filename, name)
    tree = parse_source(source, filename)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == kernel:
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and is_kernel_decorator(decorator):
                    for keyword in decorator.keywords:
                        if keyword.arg == "platform_target" and isinstance(keyword.value, ast.Constant):
                            return str(keyword.value.value)
    return None


def is_kernel_decorator(decorator: ast.expr) -> bool:
    """`@nki.jit`, `@nki.baremetal(...)` and the other decorators NKI launches a kernel with."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name in ("jit", "trace", "baremetal", "benchmark", "profile", "simulate")
