"""Fixtures for the language server tests: a temporary workspace and memory database per test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.fixture
def memory_db(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"
