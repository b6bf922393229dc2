"""Progress events the search emits, for a terminal progress line or the editor's $/progress."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchEvent:
    """`kind` is "started", "evaluated", "replayed" (memory replay done), "iteration", "finished" or
    "cancelled"."""

    kind: str
    iteration: int
    iterations: int
    evaluated: int
    best_latency_ms: float | None
    best_peak_percent: float | None
    speedup: float | None
    message: str = ""
