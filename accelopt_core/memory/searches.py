"""Records of beam searches: what a search was asked to do, every candidate it evaluated and the beam
after each finished iteration, enough to resume a killed search without redoing any work."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


def load_json(text: str | None) -> Any:
    """Stored JSON columns may be NULL (a candidate that never ran has no result)."""
    return None if text is None else json.loads(text)


@dataclass
class SearchInfo:
    """One search as listed: its task, settings, and how it ended (status "running" until finished)."""

    id: int
    task: str
    hardware: str
    config: dict[str, Any]
    base_hash: str | None
    planner: str | None
    status: str
    best_hash: str | None
    created: str
    finished: str | None

    @staticmethod
    def from_row(row: dict[str, Any]) -> SearchInfo:
        return SearchInfo(row["id"], row["task"], row["hardware"], load_json(row["config"]) or {},
                          row["base_hash"], row["planner"], row["status"], row["best_hash"], row["created"],
                          row["finished"])


@dataclass
class CandidateRecord:
    """One evaluated kernel: where it came from (parent, plan, origin) and what the profiler said."""

    iteration: int
    kernel_hash: str
    parent_hash: str | None
    plan: str
    origin: str | None
    result: dict[str, Any] | None
    status: str

    @staticmethod
    def from_row(row: dict[str, Any]) -> CandidateRecord:
        return CandidateRecord(row["iteration"], row["kernel_hash"], row["parent_hash"], row["plan"], row["origin"],
                         load_json(row["result"]), row["status"])


@dataclass
class SearchState:
    """Where a search stands: resume from `iteration + 1` with `beam`, skipping recorded candidates."""

    search_id: int
    config: dict[str, Any]
    iteration: int = -1
    beam: list[str] = field(default_factory=list)
    candidates: list[CandidateRecord] = field(default_factory=list)

    def recorded(self, kernel_hash: str) -> CandidateRecord | None:
        """The latest record of this kernel: the same source gives the same result, so never re-run it."""
        for candidate in reversed(self.candidates):
            if candidate.kernel_hash == kernel_hash:
                return candidate
        return None
