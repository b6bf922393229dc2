"""Sharing lessons within a team: a JSON-lines file, one record per line, that stands alone (experiences
carry the sources of their slow and fast kernels) and merges into any memory without duplicates.

An imported lesson is marked `imported`: its speedup is the other memory's claim (the search measures
any rewrite it replays again). Cached profiles are not imported at all: a profile is a verdict (correct,
how fast) that the editor and the search trust without running the kernel, so only this installation's
own runs may fill that cache."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store import Memory

KINDS = ("experiences", "kernels", "profiles")
PROFILE_KEY = ("kernel_hash", "task", "hardware", "backend", "mode")
LOCAL_ONLY = ("id", "search_id")  # meaningless in another database


class ImportFormatError(ValueError):
    """A line that is not what an export writes; names the line so the file can be fixed."""


@contextmanager
def opened(target: str | Path | IO[str], mode: str) -> Iterator[IO[str]]:
    """Accept a path or an already open text stream (stdout, an in-memory buffer) alike."""
    if isinstance(target, str | Path):
        with open(target, mode, encoding="utf-8") as handle:
            yield handle
    else:
        yield target


def experience_records(memory: Memory) -> Iterator[dict[str, Any]]:
    for exp in memory.list_experiences():
        record = {k: v for k, v in exp.to_dict().items() if k not in LOCAL_ONLY}
        record["slow_source"] = memory.kernel_source(exp.slow_hash)
        record["fast_source"] = memory.kernel_source(exp.fast_hash)
        yield {"kind": "experience", **record}


def kernel_records(memory: Memory) -> Iterator[dict[str, Any]]:
    for row in memory.db.table("kernels").rows_where(order_by="created, hash"):
        yield {"kind": "kernel", **row}


def profile_records(memory: Memory) -> Iterator[dict[str, Any]]:
    for row in memory.db.table("profiles").rows_where(order_by="created"):
        yield {"kind": "profile", **row, "result": json.loads(row["result"])}


EXPORTERS: dict[str, Callable[[Memory], Iterator[dict[str, Any]]]] = {
    "experiences": experience_records, "kernels": kernel_records, "profiles": profile_records}


def export_jsonl(memory: Memory, target: str | Path | IO[str], what: Sequence[str] = ("experiences",)) -> int:
    """Write the chosen kinds of record, one JSON object per line; returns the number of lines."""
    unknown = sorted(set(what) - set(KINDS))
    if unknown:
        raise ValueError(f"cannot export {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    count = 0
    with opened(target, "w") as out:
        for kind in what:
            for record in EXPORTERS[kind](memory):
                out.write(json.dumps(record, sort_keys=True) + "\n")
                count += 1
    return count


def store_source(memory: Memory, expected_hash: str, source: str | None) -> None:
    """Keep an embedded kernel source, refusing one whose content does not match the hash it claims."""
    if source is None:
        return
    if memory.add_kernel(source) != expected_hash:
        raise ImportFormatError(f"kernel source does not match its hash {expected_hash[:12]}")


def import_experience(memory: Memory, record: dict[str, Any]) -> int:
    """Re-classified and bounded like a fresh lesson; 1 if it was new and kept."""
    store_source(memory, record["slow_hash"], record.get("slow_source"))
    store_source(memory, record["fast_hash"], record.get("fast_source"))
    if memory.get_experience_by_pair(record["task"], record["hardware"], record["slow_hash"],
                                     record["fast_hash"]) is not None:
        return 0
    added = memory.add_experience(
        record["task"], record.get("task_family") or record["task"], record["hardware"], record["slow_hash"],
        record["fast_hash"], float(record["speedup"]), plan=record.get("plan") or "",
        summary=record.get("summary") or "", origin=record.get("origin") or "",
        backend=record.get("backend") or "simulator", pinned=bool(record.get("pinned")),
        created=record.get("created"), imported=True)
    return int(added is not None)


def import_kernel(memory: Memory, record: dict[str, Any]) -> int:
    known = memory.kernel_source(record["hash"]) is not None
    store_source(memory, record["hash"], record["source"])
    return int(not known)


IMPORTERS: dict[str, Callable[[Memory, dict[str, Any]], int]] = {
    "experience": import_experience, "kernel": import_kernel}
NOT_IMPORTED = {"profile": "cached profiles are verdicts this installation did not measure; the kernels are "
                           "profiled again here when they are needed"}


def parse_line(number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"line {number}: not JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise ImportFormatError(f"line {number}: expected a JSON object")
    return record


def import_jsonl(memory: Memory, source: str | Path | IO[str], notes: list[str] | None = None) -> int:
    """Merge a file in one transaction, so a bad line leaves the memory as it was. Kinds this version
    does not know are skipped, so files from a newer accelopt still load; kinds it refuses (profiles) are
    counted in `notes`. Returns new records added."""
    added = 0
    refused: dict[str, int] = {}
    with opened(source, "r") as handle, memory.transaction():
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record = parse_line(number, line)
            kind = record.get("kind", "")
            importer = IMPORTERS.get(kind)
            if importer is None:
                if kind in NOT_IMPORTED:
                    refused[kind] = refused.get(kind, 0) + 1
                continue
            try:
                added += importer(memory, record)
            except KeyError as exc:
                raise ImportFormatError(f"line {number}: missing field {exc.args[0]!r}") from None
            except ImportFormatError as exc:
                raise ImportFormatError(f"line {number}: {exc}") from None
    if notes is not None:
        notes.extend(f"{count} {kind} record{'s' * (count != 1)} not imported: {NOT_IMPORTED[kind]}"
                     for kind, count in refused.items())
    return added
