"""Loading objects named by "module:callable" or "path/to/file.py:callable" specs: optimizer agents and
quick-fix rules supplied by whoever launches the server (tests, an extension's experiments)."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from typing import Any


def load(specs: Sequence[str]) -> list[Any]:
    """Call each factory; a factory may return one object or a list of them."""
    made: list[Any] = []
    for spec in specs:
        where, _, name = spec.rpartition(":")
        if not where or not name:
            raise ValueError(f"{spec!r} should look like module:callable or path/to/file.py:callable")
        if where.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(f"accelopt_plugin_{abs(hash(where))}", where)
            if module_spec is None or module_spec.loader is None:
                raise ValueError(f"cannot import {where}")
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
        value = getattr(module, name)()
        made.extend(value if isinstance(value, (list, tuple)) else [value])
    return made
