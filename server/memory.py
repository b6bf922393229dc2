"""The optimization memory as the language server holds it: opened once per path for cache look-ups and the
memory view, and named to the workers, which open their own."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from accelopt_core.editor_api import Memory, default_memory_path


class EditorMemory:
    """The memory database the settings name (else the user's default), opened on first use."""

    def __init__(self, configured: Callable[[], str | None], notice: Callable[..., None]):
        self._configured = configured  # the memoryDb setting, read at each use: settings change at run time
        self._notice = notice
        self._memory: Memory | None = None
        self._path: str | None = None

    @property
    def path(self) -> str:
        return self._configured() or default_memory_path()

    def open(self) -> Memory | None:
        """The optimization memory for cache look-ups; None (no persistent cache) if it cannot open."""
        path = self.path
        if self._memory is not None and self._path == path:
            return self._memory
        self.close()
        try:
            self._memory = Memory(path)
            self._path = path
        except Exception as exc:
            self._notice("warning", f"AccelOpt: cannot open the memory database {path}: {exc}; results "
                         "will not be cached", once=True)
            self._memory = None
        return self._memory

    def for_workers(self) -> str | None:
        """The database the workers cache in: none when it cannot be opened."""
        return self.path if self.open() is not None else None

    def close(self) -> None:
        if self._memory is not None:
            with contextlib.suppress(Exception):
                self._memory.close()
        self._memory = None
        self._path = None
