"""Experiences: the lessons the summarizer distils from a slow -> fast kernel pair (AccelOpt's
optimization memory), and the arithmetic that decides which ones are worth keeping."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

# From the AccelOpt paper's runs: a rewrite teaches something when it is clearly faster (positive)
# or clearly slower (negative, a warning); the band in between is measurement noise.
POSITIVE_SPEEDUP = 1.04
NEGATIVE_SLOWDOWN = 1.15
KEEP_PER_KIND = 16
RULE_PREFIX = "rule:"


@dataclass
class Experience:
    """One lesson. `speedup` is slow latency / fast latency, so a negative experience (the "fast"
    kernel turned out slower) has a speedup below one."""

    task: str
    task_family: str
    hardware: str
    slow_hash: str
    fast_hash: str
    speedup: float
    plan: str = ""
    summary: str = ""
    origin: str = ""
    backend: str = "simulator"
    search_id: int | None = None
    positive: bool = True
    pinned: bool = False
    id: int | None = None
    created: str | None = None
    imported: bool = False  # from a shared file (`accelopt memory import`): its speedup was not measured here

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_row(row: dict[str, Any]) -> Experience:
        """SQLite stores booleans as integers; turn them back so callers compare with True/False."""
        fields = {k: row[k] for k in Experience.__dataclass_fields__ if k in row}
        fields["positive"] = bool(fields.get("positive", True))
        fields["pinned"] = bool(fields.get("pinned", False))
        fields["imported"] = bool(fields.get("imported", False))
        return Experience(**fields)

    @property
    def label(self) -> str:
        """Where the lesson came from, as lists show it: the agent or rule, marked when imported."""
        return f"{self.origin or '-'} (imported)" if self.imported else self.origin


def classify(speedup: float) -> bool | None:
    """True for a positive lesson, False for a negative one, None for the neutral band (not kept)."""
    if speedup > POSITIVE_SPEEDUP:
        return True
    if speedup < 1.0 / NEGATIVE_SLOWDOWN:
        return False
    return None


def least_useful_first(positive: bool) -> str:
    """SQL ordering of one group, the first rows being the ones to drop when the group is over its bound:
    the smallest gain for positive lessons, the mildest slowdown for negative ones; the oldest first on ties."""
    return "speedup asc, id asc" if positive else "speedup desc, id asc"


RETRIEVAL_ORDER = ("pinned desc, (task_family = :family) desc, positive desc, "
                   "case when positive then -speedup else speedup end asc, id asc")
"""Pinned lessons first, then the same task family, then the biggest wins, then the worst slowdowns."""


@dataclass
class RuleStats:
    """How one rewrite rule fared on similar kernels, so the rule-based optimizer tries winners first."""

    rule: str
    wins: int = 0
    losses: int = 0
    best_speedup: float = 0.0
    mean_speedup: float = 0.0  # geometric mean: speedups are ratios, 2x and 0.5x should cancel


def rule_name(origin: str) -> str | None:
    """`rule:hoist_load` -> `hoist_load`; None for lessons that came from an LLM planner."""
    return origin[len(RULE_PREFIX):] if origin.startswith(RULE_PREFIX) else None


def summarize_rules(experiences: list[Experience]) -> dict[str, RuleStats]:
    """Group experiences by rule and count wins, losses, the best and the mean speedup."""
    speedups: dict[str, list[float]] = {}
    stats: dict[str, RuleStats] = {}
    for exp in experiences:
        name = rule_name(exp.origin)
        if name is None:
            continue
        entry = stats.setdefault(name, RuleStats(name))
        entry.wins += exp.positive
        entry.losses += not exp.positive
        entry.best_speedup = max(entry.best_speedup, exp.speedup)
        speedups.setdefault(name, []).append(exp.speedup)
    for name, values in speedups.items():
        stats[name].mean_speedup = math.exp(sum(math.log(v) for v in values) / len(values))
    return stats
