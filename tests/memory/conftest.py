"""Fixtures for the optimization memory: every test gets its own database file under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from accelopt_core.memory import Memory


@pytest.fixture(autouse=True)
def no_user_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in this suite may touch the real ~/.local/share/accelopt/memory.db."""
    monkeypatch.setenv("ACCELOPT_MEMORY_DB", str(tmp_path / "env-memory.db"))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def memory(db_path: Path) -> Iterator[Memory]:
    with Memory(db_path) as mem:
        yield mem
