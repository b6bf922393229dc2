"""Errors a kernel can raise in the simulator, each pointing at the kernel's own source line."""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Frames that are never the kernel's own line: the simulator, and the import machinery (frozen
# importlib frames) that sits between a kernel's `import` statement and the import hook.
_SKIPPED = (_PACKAGE_DIR, "<frozen ")


class _Replaying(threading.local):
    """The pinned kernel location on this thread: the line a replayed instruction was recorded at, or
    the caller's line of the recorded call under way (None: find it on the stack)."""

    location: tuple[str, int] | None = None
    kernel_file: str = ""  # the file the running kernel is defined in: the lines a trace records are its


_replaying = _Replaying()


@contextmanager
def recording_lines_of(filename: str) -> Iterator[None]:
    """Inside, `trace_line` counts in `filename`: work done in a helper module the kernel calls (a
    library's flash attention under a wrapper) is charged to the kernel file's line that called it."""
    saved = _replaying.kernel_file
    _replaying.kernel_file = filename
    try:
        yield
    finally:
        _replaying.kernel_file = saved


def trace_line(location: tuple[str, int] | None = None) -> int:
    """The kernel file's line being executed: that of `location` (by default `kernel_location()`), or,
    when that is in another file, of the kernel file's frame further out on the stack that led there."""
    filename, line = location or kernel_location()
    home = _replaying.kernel_file
    if home and filename != home:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == home:
                return frame.f_lineno
            frame = frame.f_back
    return line


@contextmanager
def replaying(filename: str) -> Iterator[Callable[[int], None]]:
    """Inside, the kernel location is `filename` at the line last given to the function yielded (a
    replay has no kernel frame on its stack: it says where each recorded call was made)."""

    def at_line(line: int) -> None:
        _replaying.location = (filename, line)

    saved = pin_location((filename, 0))
    try:
        yield at_line
    finally:
        pin_location(saved)


def pin_location(location: tuple[str, int] | None) -> tuple[str, int] | None:
    """Make `location` the kernel location (None: the stack's again) until the next pin; the one before.
    A recorded instruction pins its caller's line, so the simulator's calls under it need not walk the
    stack again for each tensor and instruction they create."""
    saved = _replaying.location
    _replaying.location = location
    return saved


def kernel_location(skip_internal: bool = True) -> tuple[str, int]:
    """The innermost stack frame outside the simulator: the kernel line being executed (while
    replaying, the line the instruction was recorded at)."""
    fixed = _replaying.location
    if fixed is not None:
        return fixed
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (skip_internal and filename.startswith(_SKIPPED)):
            return filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


class NkiError(Exception):
    """Base of every error the simulator raises for a kernel; carries the kernel's file and line."""

    kind = "error"

    def __init__(self, message: str, filename: str | None = None, line: int | None = None):
        if filename is None or line is None:
            filename, line = kernel_location()
        self.message = message
        self.filename = filename
        self.line = line
        super().__init__(f"{os.path.basename(filename)}:{line}: {self.kind}: {message}")


class HardwareRuleError(NkiError):
    """The kernel breaks a rule the Neuron compiler enforces (tile sizes, buffers, capacity)."""

    kind = "hardware rule"


class UnsupportedApiError(NkiError):
    """The kernel calls part of the NKI interface that this simulator does not implement."""

    kind = "unsupported NKI API"


class KernelUsageError(NkiError):
    """The kernel uses an API wrongly (bad argument type, shape mismatch, bad index)."""

    kind = "invalid use"


def missing_api(prefix: str, submodules: dict[str, str] | None = None) -> Callable[[str], Any]:
    """A module `__getattr__` that names the unimplemented NKI API (and the kernel line) instead of
    raising a bare AttributeError; dunder lookups by Python's machinery still get AttributeError.
    `submodules` maps names to the modules `from PREFIX import NAME` gives (`from nki.isa import constants`)."""

    def module_getattr(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if submodules and name in submodules:
            return importlib.import_module(submodules[name])
        raise UnsupportedApiError(f"{prefix}.{name} is not implemented by the AccelOpt simulator")

    return module_getattr
