"""The SQLite memory is a `SearchMemory`: it has every method the search calls, taking the protocol's
parameters in the protocol's order (more, with defaults, is allowed)."""

from __future__ import annotations

import inspect
from pathlib import Path

from accelopt_core.memory import Memory, SearchMemory


def _methods() -> list[str]:
    return [name for name, value in vars(SearchMemory).items() if inspect.isfunction(value) and name[0] != "_"]


def test_the_sqlite_memory_is_a_search_memory(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        assert isinstance(memory, SearchMemory)
    assert len(_methods()) == 10
    for name in _methods():
        wanted = list(inspect.signature(getattr(SearchMemory, name)).parameters.values())
        given = list(inspect.signature(getattr(Memory, name)).parameters.values())
        assert [p.name for p in given[:len(wanted)]] == [p.name for p in wanted], name
        assert all(p.default is not p.empty for p in given[len(wanted):]), name
        pairs = zip(wanted, given[:len(wanted)], strict=True)
        assert all((p.default is p.empty) == (q.default is q.empty) for p, q in pairs), name
