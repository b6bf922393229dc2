"""Sharing lessons within a team: a JSON-lines file, one record per line, that stands alone (experiences
carry the sources of their slow and fast kernels) and merges into any memory without duplicates.

An imported lesson is marked `imported`: its speedup is the other memory's claim (the search measures
any rewrite it replays again). Cached profiles are not imported at all: a profile is a verdict (correct,
how fast) that the editor and the search trust without running the kernel, so only this installation's
own runs may fill that cache. Every field of a record is checked (numbers finite and meaningful, times
parsed, texts bounded) and `pinned` is never read: a lesson pinned or claiming an infinite speedup would
head every planner prompt and never be dropped."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from .store import Memory, source_hash

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


MAX_SPEEDUP = 1000.0  # a claim beyond a thousandfold either way is no lesson another kernel can learn from
SPEEDUP_TOLERANCE = 1.05  # a claimed speedup may exceed what this memory measured by run-to-run noise only
MAX_NAME_CHARS = 200  # task, family, hardware, backend, origin, a kernel hash
MAX_TEXT_CHARS = 4000  # a plan or a summary: what a planner prompt shows of a lesson
MAX_SOURCE_CHARS = 1_000_000  # an embedded kernel source


def text_field(record: dict[str, Any], name: str, limit: int, required: bool = False) -> str | None:
    """A string field of at most `limit` characters (None when absent and not required)."""
    value = record.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise ImportFormatError(f"{name} is not a text" if name in record else f"missing field {name!r}")
    if len(value) > limit:
        raise ImportFormatError(f"{name} is longer than {limit} characters")
    return value


def speedup_field(record: dict[str, Any]) -> float:
    """The claimed speedup: a finite number within a thousandfold of 1 (never infinite, zero or negative)."""
    value = record.get("speedup")
    if "speedup" not in record:
        raise ImportFormatError("missing field 'speedup'")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ImportFormatError(f"speedup {str(value)[:40]} is not a finite number")
    if not 1.0 / MAX_SPEEDUP <= value <= MAX_SPEEDUP:
        raise ImportFormatError(f"speedup {value:g} is outside [1/{MAX_SPEEDUP:g}, {MAX_SPEEDUP:g}]")
    return float(value)


def date_field(record: dict[str, Any], name: str) -> str | None:
    """An ISO-8601 time, as UTC in the memory's own form; not later than now (a lesson from the future
    would sort before every real one)."""
    value = text_field(record, name, MAX_NAME_CHARS)
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ImportFormatError(f"{name} {value[:40]!r} is not an ISO-8601 time") from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if moment > datetime.now(UTC) + timedelta(days=1):
        raise ImportFormatError(f"{name} {value[:40]!r} is in the future")
    return moment.isoformat(timespec="milliseconds")


def measured_latency(memory: Memory, kernel_hash: str, hardware: str, backend: str) -> float | None:
    """The fastest latency this memory measured itself for a kernel (a correct cached profile), or None."""
    rows = memory.db.execute("select result from profiles where kernel_hash = ? and hardware = ? and backend = ?",
                             [kernel_hash, hardware, backend]).fetchall()
    latencies = [result.get("latency_ms") for result in (json.loads(row[0]) for row in rows)
                 if result.get("correct") is not False and not result.get("error")]
    known = [value for value in latencies if isinstance(value, int | float) and value > 0]
    return min(known) if known else None


def check_against_profiles(memory: Memory, lesson: dict[str, Any]) -> None:
    """A claim no larger than what this memory's own profiles of both kernels show, when it has them."""
    slow, fast = (measured_latency(memory, lesson[name], lesson["hardware"], lesson["backend"])
                  for name in ("slow_hash", "fast_hash"))
    if slow is not None and fast is not None and lesson["speedup"] > slow / fast * SPEEDUP_TOLERANCE:
        raise ImportFormatError(f"speedup {lesson['speedup']:g} is more than this memory measured ({slow / fast:.3g})")


def checked_source(record: dict[str, Any], name: str, expected_hash: str) -> str | None:
    """An embedded kernel source, refused when its content does not match the hash it claims."""
    source = text_field(record, name, MAX_SOURCE_CHARS)
    if source is not None and source_hash(source) != expected_hash:
        raise ImportFormatError(f"kernel source does not match its hash {expected_hash[:12]}")
    return source


def experience_fields(record: dict[str, Any]) -> dict[str, Any]:
    """Every field of an experience record checked and bounded; `pinned` is never read (pinning is a local
    user's action, never a file's claim)."""
    lesson: dict[str, Any] = {name: text_field(record, name, MAX_NAME_CHARS, required=True)
                              for name in ("task", "hardware", "slow_hash", "fast_hash")}
    lesson["task_family"] = text_field(record, "task_family", MAX_NAME_CHARS) or lesson["task"]
    lesson["speedup"] = speedup_field(record)
    for name, limit in (("plan", MAX_TEXT_CHARS), ("summary", MAX_TEXT_CHARS), ("origin", MAX_NAME_CHARS)):
        lesson[name] = text_field(record, name, limit) or ""
    lesson["backend"] = text_field(record, "backend", MAX_NAME_CHARS) or "simulator"
    lesson["created"] = date_field(record, "created")
    return lesson


def import_experience(memory: Memory, record: dict[str, Any]) -> int:
    """Checked field by field, then re-classified and bounded like a fresh lesson; 1 if it was new and kept."""
    lesson = experience_fields(record)
    sources = [checked_source(record, f"{side}_source", lesson[f"{side}_hash"]) for side in ("slow", "fast")]
    check_against_profiles(memory, lesson)
    for source in sources:
        if source is not None:
            memory.add_kernel(source)
    if memory.get_experience_by_pair(lesson["task"], lesson["hardware"], lesson["slow_hash"],
                                     lesson["fast_hash"]) is not None:
        return 0
    added = memory.add_experience(**lesson, imported=True)
    return int(added is not None)


def import_kernel(memory: Memory, record: dict[str, Any]) -> int:
    kernel_hash = text_field(record, "hash", MAX_NAME_CHARS, required=True)
    source = checked_source({"source": record.get("source")}, "source", kernel_hash) if "source" in record else None
    if source is None:
        raise ImportFormatError("missing field 'source'")
    known = memory.kernel_source(kernel_hash) is not None
    memory.add_kernel(source)
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


def import_jsonl(memory: Memory, source: str | Path | IO[str], notes: list[str] | None = None,
                 refusals: list[str] | None = None) -> int:
    """Merge a file in one transaction. Every record is checked field by field; one that is refused
    (not JSON, a field missing, out of range or too long, a source not matching its hash) is reported in
    `refusals` (else in `notes`) as "line N: why", and the rest are imported. Kinds this version does not
    know are skipped, so files from a newer accelopt still load; kinds it refuses (profiles) are counted in
    `notes`. Returns new records added."""
    added = 0
    refused: dict[str, int] = {}
    rejected = refusals if refusals is not None else []
    with opened(source, "r") as handle, memory.transaction():
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = parse_line(number, line)
                kind = record.get("kind", "")
                importer = IMPORTERS.get(kind)
                if importer is None:
                    if kind in NOT_IMPORTED:
                        refused[kind] = refused.get(kind, 0) + 1
                    continue
                added += importer(memory, record)
            except ImportFormatError as exc:
                message = str(exc)
                rejected.append(message if message.startswith("line ") else f"line {number}: {message}")
    if notes is not None:
        notes.extend(f"{count} {kind} record{'s' * (count != 1)} not imported: {NOT_IMPORTED[kind]}"
                     for kind, count in refused.items())
        if refusals is None:
            notes.extend(f"refused {message}" for message in rejected)
    return added
