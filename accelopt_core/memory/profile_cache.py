"""The memory as a persistent `cache=` for accelopt_core.profiling.SimulatorProfiler: a kernel profiled
once is never profiled again, across editor sessions, CLI runs and searches."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..profiling.profiler import ProfileKey
from ..profiling.result import RESULT_FORMAT, ProfileResult

if TYPE_CHECKING:
    from .store import Memory


# the packages whose code and hardware files decide what a profile says
_DECIDING = ("nki", "perfmodel", "hardware", "profiling", "tasks")


@functools.cache
def engine_fingerprint() -> str:
    """A digest of the code and hardware files that decide a profile. A result another version of them
    computed is profiled again, not served: after an upgrade the model's numbers move, and a cached one
    would say what the old model said."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for folder in _DECIDING:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".toml") and path.is_file():
                digest.update(path.relative_to(root).as_posix().encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def check_mode(check_variant: str | None, check: bool) -> str:
    """One string for how a kernel was checked. Unchecked runs time the task at its own size whatever the
    check variant, so they share one entry."""
    if not check:
        return "nocheck"
    return f"check:{check_variant}" if check_variant else "check"


def memory_key(key: ProfileKey) -> tuple[str, str, str, str, str]:
    """The profiler's key reordered into the memory's (kernel, task, hardware, backend, mode)."""
    kernel_hash, task, check_variant, hardware, backend, check = key
    return kernel_hash, task, hardware, backend, check_mode(check_variant, check)


class ProfileCache:
    """A mapping view of the memory's profile table holding ProfileResult objects."""

    def __init__(self, memory: Memory):
        self.memory = memory

    def _current(self, key: ProfileKey) -> dict[str, Any] | None:
        """The stored result when this version wrote it. One an other version of the engine wrote, or one of
        an older result format (percent where the fields are now fractions), counts as absent: the kernel is
        profiled again and the entry replaced, rather than served with the old model's numbers or in a unit
        nobody reads it in any more."""
        data = self.memory.get_profile(*memory_key(key))
        if data is None or data.pop("engine", None) != engine_fingerprint():
            return None
        return data if data.get("result_format") == RESULT_FORMAT else None

    def get(self, key: ProfileKey, default: Any = None) -> ProfileResult | Any:
        data = self._current(key)
        return default if data is None else ProfileResult.from_dict(data)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 6 and self._current(key) is not None

    def __getitem__(self, key: ProfileKey) -> ProfileResult:
        result = self.get(key)
        if result is None:
            raise KeyError(key)
        return result

    def __setitem__(self, key: ProfileKey, result: ProfileResult) -> None:
        self.memory.put_profile(*memory_key(key), {**result.to_dict(), "engine": engine_fingerprint()})
