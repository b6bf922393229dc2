"""The two roles every optimizer plays in the beam search: a planner proposes what to change in a
kernel, an executor writes the changed kernel. Rules and LLM agents implement both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..memory.experiences import Experience, RuleStats
from ..profiling import ProfileResult


@dataclass(frozen=True)
class Candidate:
    """A kernel the search has evaluated."""

    source: str
    hash: str
    result: ProfileResult
    parent: str | None = None
    plan: str = ""
    origin: str = "baseline"
    iteration: int = -1

    @property
    def latency_ms(self) -> float:
        return self.result.latency_ms if self.result.latency_ms is not None else float("inf")


@dataclass(frozen=True)
class Proposal:
    """One plan for one parent: what to do, who proposed it, and what the executor needs."""

    description: str
    origin: str  # "rule:<name>" or "llm:<model>"
    payload: Any = field(default=None, compare=False)
    priority: float = 0.0


@dataclass
class Draft:
    """An executor's output: a new kernel source, or why none came out. `crashed`: the executor itself raised
    (a bug of ours, reported with the search's results), not a plan that turned out not to fit."""

    source: str | None
    error: str | None = None
    crashed: bool = False


@dataclass
class SearchContext:
    """What planners may read: the task, the hardware, and lessons from the optimization memory."""

    task: str
    task_family: str
    hardware: str
    experiences: list[Experience] = field(default_factory=list)
    rule_stats: dict[str, RuleStats] = field(default_factory=dict)
    tried: set[tuple[str, str, str]] = field(default_factory=set)  # (parent hash, origin, plan) evaluated


class Agent(Protocol):
    """A planner and executor pair."""

    name: str

    def propose(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        ...

    def recall(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        """Plans for `parent` that the optimization memory saw win on similar kernels, most promising
        first; empty when memory knows none. Cheap: the search asks before every memory replay step."""
        ...

    def realize(self, parent: Candidate, proposal: Proposal, samples: int) -> list[Draft]:
        ...

    def summarize(self, slow: Candidate, fast: Candidate, context: SearchContext) -> str:
        """A short, general lesson from a slow->fast pair, for the optimization memory."""
        ...


@runtime_checkable
class Repairer(Protocol):
    """An agent that can repair a kernel it wrote that failed when evaluated (AccelOpt's fixer): it gets
    the failed candidate with its error and the parent it rewrote, and returns the repaired kernel."""

    def repair(self, failed: Candidate, parent: Candidate) -> Draft:
        ...
