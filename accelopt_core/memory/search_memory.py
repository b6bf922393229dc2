"""What a beam search writes to the optimization memory and reads back from it: the SQLite `Memory`
is one; anything else a search is handed instead (a test's, a remote store) must be one too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .experiences import Experience, RuleStats
from .searches import SearchState


@runtime_checkable
class SearchMemory(Protocol):
    """Kernels by content, the records that let a killed search resume, and the lessons planners read.
    Every write is on record when the call returns (a search killed right after loses nothing)."""

    def add_kernel(self, source: str) -> str:
        """Store a kernel's source once; returns its hash."""
        ...

    def kernel_source(self, kernel_hash: str) -> str | None:
        ...

    def start_search(self, task: str, hardware: str, config: dict[str, Any], base_kernel_hash: str | None,
                     planner: str) -> int:
        """A new search's id, for the records that follow."""
        ...

    def record_candidate(self, search_id: int, iteration: int, kernel_hash: str, parent_hash: str | None,
                         plan: str, origin: str | None, result: dict[str, Any] | None, status: str) -> None:
        ...

    def finish_iteration(self, search_id: int, iteration: int, beam: Sequence[str]) -> None:
        """The point a resumed search restarts from: the iteration done and the kernel hashes it kept."""
        ...

    def finish_search(self, search_id: int, status: str, best_hash: str | None) -> None:
        ...

    def search_state(self, search_id: int) -> SearchState:
        """Everything a resumed search needs; KeyError for an unknown search."""
        ...

    def add_experience(self, task: str, task_family: str, hardware: str, slow_hash: str, fast_hash: str,
                       speedup: float, plan: str = "", summary: str = "", origin: str = "",
                       backend: str = "simulator", search_id: int | None = None) -> Experience | None:
        """Keep a lesson from a slow -> fast pair if it is clearly one way or the other (None if not kept)."""
        ...

    def top_experiences(self, task_family: str, hardware: str, limit: int = 8,
                        include_negative: bool = True) -> list[Experience]:
        """The lessons a planner is shown for this task family and hardware, most useful first."""
        ...

    def rule_stats(self, task_family: str, hardware: str) -> dict[str, RuleStats]:
        """How each rule's rewrites fared on this task family and hardware."""
        ...
