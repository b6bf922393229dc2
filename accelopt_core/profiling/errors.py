"""Turning failures inside a kernel into one line that names the kernel's own source line."""

from __future__ import annotations

import os
import traceback


def describe_kernel_exception(exc: BaseException, func: object) -> tuple[str, int | None]:
    """One line naming the kernel line where a Python exception was raised."""
    code = getattr(func, "__code__", None)
    filename = code.co_filename if code else None
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == filename:
            line = lineno
    where = f"{os.path.basename(filename)}:{line}: " if filename and line else ""
    detail = str(exc) or ("out of memory (the sandbox's memory limit)" if isinstance(exc, MemoryError) else "")
    return f"{where}{type(exc).__name__}" + (f": {detail}" if detail else ""), line
