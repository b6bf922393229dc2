"""Where the memory lives by default, and that opening it makes the directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accelopt_core.memory import Memory, default_path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("ACCELOPT_MEMORY_DB", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "platform", "linux")
    return tmp_path / "home"


def test_env_var_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ACCELOPT_MEMORY_DB", str(tmp_path / "team.db"))
    assert default_path() == str(tmp_path / "team.db")


def test_xdg_data_home(home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_path() == str(tmp_path / "data" / "accelopt" / "memory.db")


def test_falls_back_to_local_share(home: Path) -> None:
    assert default_path() == str(home / ".local" / "share" / "accelopt" / "memory.db")


def test_relative_xdg_data_home_is_ignored(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")
    assert default_path() == str(home / ".local" / "share" / "accelopt" / "memory.db")


def test_macos_application_support(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert default_path() == str(home / "Library" / "Application Support" / "accelopt" / "memory.db")


def test_opening_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "memory.db"
    with Memory(path):
        pass
    assert path.exists()


def test_memory_without_path_uses_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ACCELOPT_MEMORY_DB", str(tmp_path / "x" / "env.db"))
    with Memory() as memory:
        assert memory.path == str(tmp_path / "x" / "env.db")
    assert (tmp_path / "x" / "env.db").exists()
