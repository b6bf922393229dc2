"""The rule-based optimizer as a search agent: rules propose plans, the same rules write them.

Plans rank by the share of kernel time they address (from the profile). Memory acts in one place: the
rules that won on similar kernels before (the optimization memory's rule statistics) are what the agent
recalls when the search replays memory before its first iteration. (Boosting remembered rules inside
every iteration as well pushed the profile's best plans out of a small beam and lost wins.)
"""

from __future__ import annotations

from collections.abc import Sequence

from ..base import Candidate, Draft, Proposal, SearchContext
from .base import Plan, Rule, RuleError


class RuleAgent:
    """Planner and executor over a list of rules."""

    name = "rule"

    def __init__(self, rules: Sequence[Rule]):
        self.rules = list(rules)

    def propose(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        proposals = sorted(self._proposals(self.rules, parent, context), key=lambda p: -p.priority)
        return proposals[:count]

    def recall(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        """Plans of the rules that won more often than they lost on this family, the rule with the
        biggest mean speedup first, each rule's plans in their own order."""
        winners = {name: stats.mean_speedup for name, stats in context.rule_stats.items()
                   if stats.wins > stats.losses and stats.mean_speedup > 1.0}
        rules = sorted((r for r in self.rules if r.name in winners), key=lambda r: -winners[r.name])
        return self._proposals(rules, parent, context)[:count]

    @staticmethod
    def _proposals(rules: Sequence[Rule], parent: Candidate, context: SearchContext) -> list[Proposal]:
        """Every plan of `rules` for `parent` that the search has not already tried on it."""
        proposals: list[Proposal] = []
        for rule in rules:
            origin = f"rule:{rule.name}"
            proposals += [Proposal(plan.description, origin, (rule, plan), plan.priority)
                          for plan in rule.plan(parent.source, parent.result)
                          if (parent.hash, origin, plan.description) not in context.tried]
        return proposals

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
