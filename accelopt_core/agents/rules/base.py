"""What every rule shares: the plan it proposes and the interface the search calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ...profiling import ProfileResult


class RuleError(Exception):
    """A plan that no longer applies to the source it is given (the rule must not guess)."""


@dataclass(frozen=True)
class Plan:
    """One concrete rewrite: which rule, where (kernel line), what, and the parameters that make it
    reproducible. `description` is one sentence a person (or an LLM summarizer) can read."""

    rule: str
    line: int
    description: str
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    priority: float = 0.0  # higher first: the estimated share of kernel time it addresses

    @property
    def key(self) -> str:
        """Identity of the plan for de-duplication and memory."""
        items = ",".join(f"{k}={self.params[k]}" for k in sorted(self.params))
        return f"{self.rule}@{self.line}[{items}]"


class Rule(Protocol):
    """A planner and an executor for one kind of rewrite."""

    name: str
    summary: str  # one line: what the rule does and why it helps on Trainium

    def plan(self, source: str, profile: ProfileResult | None) -> list[Plan]:
        """Every place the rewrite applies, most promising first (empty when it does not apply)."""
        ...

    def apply(self, source: str, plan: Plan) -> str:
        """The rewritten kernel source; RuleError if the plan does not fit `source`."""
        ...
