"""The profile cache as the server uses it: the memory database's ProfileCache, with the reference
file's content digest folded into the task part of each key.

The engine keys profiles by kernel hash and task name; a task's reference can change under a kernel
(an edit, a `git checkout`), and the old verdict must not be served for the new reference.
"""

from __future__ import annotations

from typing import Any

from accelopt_core.memory import ProfileCache
from accelopt_core.profiling import ProfileResult

Key = tuple[str, str, str | None, str, str, bool]


class DigestedCache:
    """A mapping with the interface SimulatorProfiler's `cache=` uses (`in`, `[]`, `[]=`, `get`)."""

    def __init__(self, inner: ProfileCache | dict[Any, Any], reference_digest: str):
        self.inner = inner
        self.digest = reference_digest

    def _key(self, key: Key) -> Key:
        kernel_hash, task, check_variant, hardware, backend, check = key
        return kernel_hash, f"{task}@{self.digest}", check_variant, hardware, backend, check

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 6 and self._key(key) in self.inner  # type: ignore[arg-type]

    def __getitem__(self, key: Key) -> ProfileResult:
        return self.inner[self._key(key)]

    def __setitem__(self, key: Key, result: ProfileResult) -> None:
        self.inner[self._key(key)] = result

    def get(self, key: Key, default: Any = None) -> Any:
        return self.inner.get(self._key(key), default)


def profile_key(kernel_hash: str, task_key: str, check_variant: str | None, hardware: str, backend: str,
                check: bool) -> Key:
    """The key SimulatorProfiler computes for one profile (see accelopt_core.profiling.profiler)."""
    return kernel_hash, task_key, check_variant, hardware, backend, check
