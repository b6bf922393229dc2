"""Opening the database: WAL, busy timeout, the schema and its version."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlite_utils import Database

from accelopt_core.memory import SCHEMA_VERSION, Memory, SchemaError

TABLES = {"schema_version", "kernels", "profiles", "searches", "candidates", "iterations", "experiences"}


def test_wal_journal_mode(memory: Memory) -> None:
    assert memory.db.journal_mode == "wal"


def test_busy_timeout_is_set(memory: Memory) -> None:
    assert memory.db.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000


def test_foreign_keys_enforced(memory: Memory) -> None:
    assert memory.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_creates_all_tables(memory: Memory) -> None:
    assert set(memory.db.table_names()) >= TABLES


def test_records_schema_version(memory: Memory) -> None:
    assert [row["version"] for row in memory.db["schema_version"].rows] == [SCHEMA_VERSION]


def test_reopening_is_idempotent(db_path: Path) -> None:
    with Memory(db_path) as first:
        first.add_kernel("k")
        schema = first.db.schema
    with Memory(db_path) as second:
        assert second.db.schema == schema
        assert second.kernel_source(second.add_kernel("k")) == "k"
        assert second.db["schema_version"].count == 1


def test_newer_schema_is_refused(db_path: Path) -> None:
    with Memory(db_path):
        pass
    with Database(db_path) as db:
        db["schema_version"].insert({"version": SCHEMA_VERSION + 1, "applied": "later"})
    with pytest.raises(SchemaError, match="upgrade accelopt"):
        Memory(db_path)


def test_context_manager_closes(db_path: Path) -> None:
    with Memory(db_path) as memory:
        pass
    with pytest.raises(sqlite3.ProgrammingError):
        memory.db.execute("select 1")


def test_in_memory_database() -> None:
    with Memory(":memory:") as memory:
        assert memory.kernel_source(memory.add_kernel("x")) == "x"


def test_failed_write_rolls_back(memory: Memory) -> None:
    with pytest.raises(RuntimeError), memory.transaction() as db:
        db["kernels"].insert({"hash": "h", "source": "s", "created": "now"})
        raise RuntimeError("boom")
    assert memory.kernel_source("h") is None


def test_nested_transaction_commits_once(memory: Memory) -> None:
    with memory.transaction():
        memory.add_kernel("a")
        memory.add_kernel("b")
        assert memory.db.conn.in_transaction
    assert not memory.db.conn.in_transaction
    assert memory.db["kernels"].count == 2


def test_a_version_1_database_gains_the_imported_column(tmp_path: Path) -> None:
    """Lessons of a database from before `imported` existed were learnt there: they read as not imported."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:
        old.execute("create table schema_version (version integer primary key, applied text)")
        old.execute("insert into schema_version values (1, 'then')")
        old.execute("create table experiences (id integer primary key, task text not null, task_family text not null, "
                    "hardware text not null, slow_hash text not null, fast_hash text not null, speedup float not null, "
                    "plan text, summary text, origin text, backend text, search_id integer, positive integer not null, "
                    "pinned integer not null, created text)")
        old.execute("insert into experiences (task, task_family, hardware, slow_hash, fast_hash, speedup, positive, "
                    "pinned) values ('silu', 'silu', 'trn1', 'a', 'b', 2.0, 1, 0)")
    with Memory(path) as memory:
        (lesson,) = memory.list_experiences()
        assert lesson.imported is False and lesson.speedup == 2.0
        assert max(row["version"] for row in memory.db["schema_version"].rows) == SCHEMA_VERSION
