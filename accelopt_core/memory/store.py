"""The optimization memory: one SQLite file, written through sqlite-utils, that the language server, the
CLI and running searches share. Every write is its own committed transaction, so a search killed with
SIGKILL loses nothing it had already recorded."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from .experiences import (
    KEEP_PER_KIND,
    RETRIEVAL_ORDER,
    Experience,
    RuleStats,
    classify,
    least_useful_first,
    summarize_rules,
)
from .paths import default_path
from .schema import ensure_schema
from .searches import CandidateRecord, SearchInfo, SearchState

BUSY_TIMEOUT_S = 30.0


def utc_now() -> str:
    """ISO-8601 in UTC, so times from machines in different zones sort and compare correctly."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def source_hash(source: str) -> str:
    """Kernels are identified by content: the same text from any file or search is the same kernel.
    Matches accelopt_core.profiling's kernel_hash, so profile cache keys line up."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def ensure_parent_dir(path: str) -> None:
    """The first run on a machine must not fail because ~/.local/share/accelopt does not exist yet."""
    if path != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


def open_database(path: str, timeout: float = BUSY_TIMEOUT_S) -> Database:
    """WAL lets readers carry on while another process writes; the busy timeout makes a second writer wait
    for the lock instead of failing with "database is locked". The lock in Memory guards the connection,
    so it may be shared between threads (the language server profiles off its main thread)."""
    ensure_parent_dir(path)
    db = Database(sqlite3.connect(path, timeout=timeout, check_same_thread=False))
    db.execute("PRAGMA foreign_keys = ON")
    db.enable_wal()
    return db


class Memory:
    """Kernels, cached profiles, search records and experiences in one SQLite database.

    `keep_positive` / `keep_negative` bound the experiences kept per (task family, hardware); the
    AccelOpt paper keeps 16.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, keep_positive: int = KEEP_PER_KIND,
                 keep_negative: int = KEEP_PER_KIND, timeout: float = BUSY_TIMEOUT_S):
        self.path = os.fspath(path) if path is not None else default_path()
        self.keep = {True: keep_positive, False: keep_negative}
        self._lock = threading.RLock()
        self.db = open_database(self.path, timeout)
        try:
            with self.transaction() as db:
                ensure_schema(db, utc_now())
        except BaseException:
            self.db.close()
            raise

    # -- lifecycle and transactions ------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[Database]:
        """One committed write. BEGIN IMMEDIATE takes the write lock up front: a deferred transaction that
        reads and then writes can hit SQLITE_BUSY without ever waiting. Nested use becomes a savepoint,
        so a batch (an import) commits all or nothing."""
        with self._lock:
            if self.db.conn.in_transaction:
                with self.db.atomic():
                    yield self.db
                return
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.rollback()
                raise
            self.db.commit()

    def _rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        """Read everything at once so no half-read cursor pins an old snapshot of the WAL."""
        with self._lock:
            return list(self.db.query(sql, params))

    # -- kernels -------------------------------------------------------------------------------------

    def add_kernel(self, source: str) -> str:
        """Store a kernel's source once, however often it is seen; returns its hash."""
        digest = source_hash(source)
        with self.transaction() as db:
            db.table("kernels").insert({"hash": digest, "source": source, "created": utc_now()}, ignore=True)
        return digest

    def kernel_source(self, kernel_hash: str) -> str | None:
        rows = self._rows("select source from kernels where hash = ?", [kernel_hash])
        return rows[0]["source"] if rows else None

    # -- profile cache -------------------------------------------------------------------------------

    def get_profile(self, kernel_hash: str, task: str, hardware: str, backend: str, mode: str) -> dict[str, Any] | None:
        """A cached ProfileResult dict, or None; `mode` names how it was checked (see profile_cache.check_mode)."""
        rows = self._rows("select result from profiles where kernel_hash = ? and task = ? and hardware = ? "
                          "and backend = ? and mode = ?", [kernel_hash, task, hardware, backend, mode])
        return json.loads(rows[0]["result"]) if rows else None

    def put_profile(self, kernel_hash: str, task: str, hardware: str, backend: str, mode: str,
                    result: dict[str, Any]) -> None:
        """Replace any earlier result for the same key: the latest measurement is the one to trust."""
        record = {"kernel_hash": kernel_hash, "task": task, "hardware": hardware, "backend": backend, "mode": mode,
                  "result": json.dumps(result), "created": utc_now()}
        with self.transaction() as db:
            db.table("profiles").upsert(record, pk=("kernel_hash", "task", "hardware", "backend", "mode"))

    # -- searches ------------------------------------------------------------------------------------

    def start_search(self, task: str, hardware: str, config: dict[str, Any], base_kernel_hash: str | None,
                     planner: str) -> int:
        """Record a new search (status "running") and return its id for the records that follow."""
        record = {"task": task, "hardware": hardware, "config": json.dumps(config), "base_hash": base_kernel_hash,
                  "planner": planner, "status": "running", "created": utc_now()}
        with self.transaction() as db:
            table = db.table("searches").insert(record)
            return int(table.last_pk)

    def record_candidate(self, search_id: int, iteration: int, kernel_hash: str, parent_hash: str | None,
                         plan: str, origin: str | None, result: dict[str, Any] | None, status: str) -> None:
        """Record one evaluated candidate; recording the same (iteration, kernel, plan) again keeps one row
        with the latest result, so a resumed search that re-records does not duplicate."""
        record = {"search_id": search_id, "iteration": iteration, "kernel_hash": kernel_hash, "plan": plan or "",
                  "parent_hash": parent_hash, "origin": origin, "status": status, "created": utc_now(),
                  "result": None if result is None else json.dumps(result)}
        with self.transaction() as db:
            db.table("candidates").upsert(record, pk=("search_id", "iteration", "kernel_hash", "plan"))

    def finish_iteration(self, search_id: int, iteration: int, beam: Sequence[str]) -> None:
        """Mark an iteration done with the kernel hashes kept: the point a resumed search restarts from."""
        record = {"search_id": search_id, "iteration": iteration, "beam": json.dumps(list(beam)),
                  "finished": utc_now()}
        with self.transaction() as db:
            db.table("iterations").upsert(record, pk=("search_id", "iteration"))

    def finish_search(self, search_id: int, status: str, best_hash: str | None) -> None:
        with self.transaction() as db:
            try:
                db.table("searches").update(search_id, {"status": status, "best_hash": best_hash,
                                                        "finished": utc_now()})
            except NotFoundError:
                raise KeyError(f"no search with id {search_id}") from None

    def get_search(self, search_id: int) -> SearchInfo | None:
        rows = self._rows("select * from searches where id = ?", [search_id])
        return SearchInfo.from_row(rows[0]) if rows else None

    def search_state(self, search_id: int) -> SearchState:
        """Everything needed to resume: config, last finished iteration and its beam, all candidates."""
        info = self.get_search(search_id)
        if info is None:
            raise KeyError(f"no search with id {search_id}")
        state = SearchState(search_id, info.config)
        last = self._rows("select iteration, beam from iterations where search_id = ? "
                          "order by iteration desc limit 1", [search_id])
        if last:
            state.iteration, state.beam = last[0]["iteration"], json.loads(last[0]["beam"])
        rows = self._rows("select * from candidates where search_id = ? order by rowid", [search_id])
        state.candidates = [CandidateRecord.from_row(row) for row in rows]
        return state

    def list_searches(self, task: str | None = None, hardware: str | None = None) -> list[SearchInfo]:
        """Newest first, optionally for one task and/or hardware."""
        rows = self._rows("select * from searches where (:task is null or task = :task) "
                          "and (:hw is null or hardware = :hw) order by id desc", {"task": task, "hw": hardware})
        return [SearchInfo.from_row(row) for row in rows]

    def latest_search(self, task: str, hardware: str) -> SearchInfo | None:
        """The most recent search of a task: the one "resume" offers."""
        searches = self.list_searches(task, hardware)
        return searches[0] if searches else None

    # -- experiences ---------------------------------------------------------------------------------

    def add_experience(self, task: str, task_family: str, hardware: str, slow_hash: str, fast_hash: str,
                       speedup: float, plan: str = "", summary: str = "", origin: str = "",
                       backend: str = "simulator", search_id: int | None = None, pinned: bool = False,
                       created: str | None = None, imported: bool = False) -> Experience | None:
        """Keep a lesson if it is clearly positive or negative (None for the neutral band). A pair already
        known for the task and hardware is returned unchanged. Over the bound, the least useful unpinned
        lesson of its kind is dropped, which may be this one (then None)."""
        positive = classify(speedup)
        if positive is None:
            return None
        with self.transaction() as db:
            known = self.get_experience_by_pair(task, hardware, slow_hash, fast_hash)
            if known is not None:
                return known
            exp = Experience(task, task_family, hardware, slow_hash, fast_hash, float(speedup), plan, summary,
                             origin, backend, search_id, positive, pinned, None, created or utc_now(), imported)
            exp.id = int(db.table("experiences").insert(exp.to_dict()).last_pk)
            self._enforce_bound(task_family, hardware, positive)
            return self.get_experience(exp.id)

    def get_experience_by_pair(self, task: str, hardware: str, slow_hash: str, fast_hash: str) -> Experience | None:
        """The identity of a lesson across databases: the same rewrite of the same task on the same hardware."""
        rows = self._rows("select * from experiences where task = ? and hardware = ? and slow_hash = ? "
                          "and fast_hash = ?", [task, hardware, slow_hash, fast_hash])
        return Experience.from_row(rows[0]) if rows else None

    def _enforce_bound(self, task_family: str, hardware: str, positive: bool) -> None:
        """Drop the least useful unpinned lessons of one kind until the group fits; pinned ones always stay."""
        where = "task_family = ? and hardware = ? and positive = ?"
        params = [task_family, hardware, int(positive)]
        with self.transaction() as db:
            total = db.table("experiences").count_where(where, params)
            excess = total - self.keep[positive]
            if excess <= 0:
                return
            victims = [row["id"] for row in db.table("experiences").rows_where(
                where + " and pinned = 0", params, order_by=least_useful_first(positive), limit=excess)]
            db.table("experiences").delete_where(f"id in ({','.join('?' * len(victims))})", victims)

    def get_experience(self, experience_id: int) -> Experience | None:
        rows = self._rows("select * from experiences where id = ?", [experience_id])
        return Experience.from_row(rows[0]) if rows else None

    def list_experiences(self, task: str | None = None, hardware: str | None = None) -> list[Experience]:
        """Every kept lesson, optionally for one task (matched against task or task family) and hardware."""
        rows = self._rows("select * from experiences where (:task is null or task = :task or task_family = :task) "
                          "and (:hw is null or hardware = :hw) order by hardware, task_family, "
                          "positive desc, case when positive then -speedup else speedup end, id",
                          {"task": task, "hw": hardware})
        return [Experience.from_row(row) for row in rows]

    def top_experiences(self, task_family: str, hardware: str, limit: int = 8,
                        include_negative: bool = True) -> list[Experience]:
        """What a planner prompt shows: pinned lessons, then the same task family, then by benefit (largest
        wins first, then the worst slowdowns as warnings). Other families still help: a loop hoist that
        paid off in rmsnorm may pay off in softmax."""
        rows = self._rows(f"select * from experiences where hardware = :hw and (positive or :neg) "
                          f"order by {RETRIEVAL_ORDER} limit :limit",
                          {"hw": hardware, "neg": int(include_negative), "family": task_family, "limit": limit})
        return [Experience.from_row(row) for row in rows]

    def pin(self, experience_id: int, pinned: bool = True) -> bool:
        """Pinned lessons survive the bound and come first; unpinning re-applies the bound. False if unknown."""
        with self.transaction() as db:
            exp = self.get_experience(experience_id)
            if exp is None:
                return False
            db.table("experiences").update(experience_id, {"pinned": int(pinned)})
            if not pinned:
                self._enforce_bound(exp.task_family, exp.hardware, exp.positive)
            return True

    def delete(self, experience_id: int) -> bool:
        """Forget one lesson (a wrong summary, say). False if there was none with that id."""
        with self.transaction() as db:
            cursor = db.execute("delete from experiences where id = ?", [experience_id])
            return cursor.rowcount > 0

    def rule_stats(self, task_family: str, hardware: str) -> dict[str, RuleStats]:
        """Per rule (origin "rule:<name>"), how its rewrites fared on this family and hardware."""
        rows = self._rows("select * from experiences where task_family = ? and hardware = ? "
                          "and substr(origin, 1, 5) = 'rule:'", [task_family, hardware])
        return summarize_rules([Experience.from_row(row) for row in rows])
