"""The rule-based optimizer as a search agent: rules propose plans, the same rules write them.

Rules that won on similar kernels before (the optimization memory's rule statistics) rank first among
the plans, and are what the agent recalls when the search replays memory before its first iteration.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..base import Candidate, Draft, Proposal, SearchContext
from .base import Plan, Rule, RuleError

# How much a past win raises a rule's plans, against plan priorities in [0, 1] (share of time).
_MEMORY_WEIGHT = 1.0


class RuleAgent:
    """Planner and executor over a list of rules."""

    name = "rule"

    def __init__(self, rules: Sequence[Rule]):
        self.rules = list(rules)

    def _boost(self, rule: Rule, context: SearchContext) -> float:
        stats = context.rule_stats.get(rule.name)
        if stats is None:
            return 0.0
        return _MEMORY_WEIGHT * (stats.wins - 0.5 * stats.losses) / max(1, stats.wins + stats.losses)

    def propose(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        proposals: list[Proposal] = []
        for rule in self.rules:
            boost = self._boost(rule, context)
            for plan in rule.plan(parent.source, parent.result):
                proposals.append(Proposal(plan.description, f"rule:{rule.name}", (rule, plan), plan.priority + boost))
        proposals.sort(key=lambda p: -p.priority)
        return proposals[:count]

    def recall(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        """Plans of the rules that won more often than they lost on this family, the rule with the
        biggest mean speedup first, each rule's plans in their own order."""
        winners = {name: stats.mean_speedup for name, stats in context.rule_stats.items()
                   if stats.wins > stats.losses and stats.mean_speedup > 1.0}
        proposals: list[Proposal] = []
        for rule in sorted((r for r in self.rules if r.name in winners), key=lambda r: -winners[r.name]):
            proposals += [Proposal(plan.description, f"rule:{rule.name}", (rule, plan), plan.priority)
                          for plan in rule.plan(parent.source, parent.result)]
        return proposals[:count]

    def realize(self, parent: Candidate, proposal: Proposal, samples: int) -> list[Draft]:
        rule, plan = proposal.payload
        assert isinstance(plan, Plan)
        try:
            return [Draft(rule.apply(parent.source, plan))]
        except RuleError as exc:
            return [Draft(None, str(exc))]

    def summarize(self, slow: Candidate, fast: Candidate, context: SearchContext) -> str:
        rule = next((r for r in self.rules if f"rule:{r.name}" == fast.origin), None)
        speedup = slow.latency_ms / fast.latency_ms if fast.latency_ms else 1.0
        lesson = rule.summary if rule else fast.origin
        direction = "faster" if speedup >= 1 else "slower"
        return (f"{lesson} Applied as: {fast.plan}. Result: {speedup:.2f}x {direction} on {context.task} "
                f"({context.hardware}, {fast.result.backend}).")
