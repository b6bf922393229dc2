"""The tables of the optimization memory, created idempotently inside one write transaction so two
processes opening a fresh file at the same moment cannot trip over each other."""

from __future__ import annotations

from typing import Any

from sqlite_utils import Database

SCHEMA_VERSION = 2  # 2: experiences.imported (a lesson from a shared file, not measured here)


class SchemaError(Exception):
    """The database was written by a newer accelopt whose tables this version does not understand."""


# name -> (columns, primary key, not-null columns, foreign keys)
TABLES: dict[str, tuple[dict[str, Any], str | tuple[str, ...], set[str], list[tuple[str, str, str]]]] = {
    "schema_version": ({"version": int, "applied": str}, "version", set(), []),
    "kernels": ({"hash": str, "source": str, "created": str}, "hash", {"source"}, []),
    "profiles": (
        {"kernel_hash": str, "task": str, "hardware": str, "backend": str, "mode": str, "result": str,
         "created": str},
        ("kernel_hash", "task", "hardware", "backend", "mode"), {"result"}, []),
    "searches": (
        {"id": int, "task": str, "hardware": str, "config": str, "base_hash": str, "planner": str,
         "status": str, "best_hash": str, "created": str, "finished": str},
        "id", {"task", "hardware", "status"}, []),
    "candidates": (
        {"search_id": int, "iteration": int, "kernel_hash": str, "plan": str, "parent_hash": str,
         "origin": str, "result": str, "status": str, "created": str},
        ("search_id", "iteration", "kernel_hash", "plan"), {"status"}, [("search_id", "searches", "id")]),
    "iterations": (
        {"search_id": int, "iteration": int, "beam": str, "finished": str},
        ("search_id", "iteration"), {"beam"}, [("search_id", "searches", "id")]),
    "experiences": (
        {"id": int, "task": str, "task_family": str, "hardware": str, "slow_hash": str, "fast_hash": str,
         "speedup": float, "plan": str, "summary": str, "origin": str, "backend": str, "search_id": int,
         "positive": int, "pinned": int, "created": str, "imported": int},
        "id", {"task", "task_family", "hardware", "slow_hash", "fast_hash", "speedup", "positive", "pinned"},
        [("search_id", "searches", "id")]),
}

# (table, columns, unique)
INDEXES: list[tuple[str, list[str], bool]] = [
    ("experiences", ["task", "hardware", "slow_hash", "fast_hash"], True),
    ("experiences", ["task_family", "hardware", "positive"], False),
    ("searches", ["task", "hardware"], False),
]


def stored_version(db: Database) -> int:
    """0 for a fresh file: lets `ensure_schema` tell new, current and too-new databases apart."""
    if not db["schema_version"].exists():
        return 0
    row = db.execute("select max(version) from schema_version").fetchone()
    return row[0] or 0


def create_tables(db: Database) -> None:
    """`if_not_exists` everywhere, so running this on an up-to-date file changes nothing."""
    for name, (columns, pk, not_null, foreign_keys) in TABLES.items():
        db.table(name).create(columns, pk=pk, not_null=not_null, foreign_keys=foreign_keys or None,
                              if_not_exists=True)
    for table, columns, unique in INDEXES:
        db.table(table).create_index(columns, unique=unique, if_not_exists=True)


def add_missing_columns(db: Database) -> None:
    """Columns a newer schema added to tables an older version created; integers start at 0 (a lesson of
    an older database was learnt here, not imported)."""
    for name, (columns, _, _, _) in TABLES.items():
        existing = db.table(name).columns_dict
        for column, kind in columns.items():
            if column not in existing:
                db.table(name).add_column(column, kind, not_null_default=0 if kind is int else None)


def ensure_schema(db: Database, now: str) -> None:
    """Bring a database up to SCHEMA_VERSION; the caller holds a write transaction."""
    version = stored_version(db)
    if version > SCHEMA_VERSION:
        raise SchemaError(f"memory database has schema version {version}; this accelopt understands "
                          f"up to {SCHEMA_VERSION} (upgrade accelopt)")
    create_tables(db)
    add_missing_columns(db)
    if version < SCHEMA_VERSION:
        db.table("schema_version").insert({"version": SCHEMA_VERSION, "applied": now}, ignore=True)
