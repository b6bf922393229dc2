"""The rule-based optimizer as a search agent: rules propose plans, the same rules write them.

Plans rank by the share of kernel time they address (from the profile). Memory acts in one place: the
rules that won on similar kernels before (the optimization memory's rule statistics) are what the agent
recalls when the search replays memory before its first iteration. (Boosting remembered rules inside
every iteration as well pushed the profile's best plans out of a small beam and lost wins.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager

from ...profiling.result import ProfileResult
from ..base import Candidate, Draft, Proposal, SearchContext
from .base import Plan, Rule, RuleError
from .cst_util import focus

log = logging.getLogger(__name__)


def focus_of(profile: ProfileResult | None) -> AbstractContextManager[None]:
    """The rules plan and write on the function the profile ran: the one named in a file of several."""
    return focus(profile.function if profile is not None else None)


class RuleAgent:
    """Planner and executor over a list of rules."""

    name = "rule"

    def __init__(self, rules: Sequence[Rule]):
        self.rules = list(rules)

    def propose(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        ranked = [self._proposal(rule, plan) for rule, plan in self.ranked_plans(parent.source, parent.result)]
        return self._untried(ranked, parent, context)[:count]

    def ranked_plans(self, source: str, profile: ProfileResult | None, skip_failing: bool = False
                     ) -> list[tuple[Rule, Plan]]:
        """Every rule's plans for a kernel, the largest share of kernel time first (rules in their order among
        equals). `skip_failing`: a rule that raises while planning is logged and left out (the editor's quick
        fixes must not all fail for one rule's bug; a search lets it surface)."""
        plans: list[tuple[Rule, Plan]] = []
        with focus_of(profile):
            for rule in self.rules:
                try:
                    plans += [(rule, plan) for plan in rule.plan(source, profile)]
                except Exception:
                    if not skip_failing:
                        raise
                    log.exception("rule %s failed to plan", rule.name)
        return sorted(plans, key=lambda item: -item[1].priority)

    def recall(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        """Plans of the rules that won more often than they lost on this family, the rule with the
        biggest mean speedup first, each rule's plans in their own order."""
        winners = {name: stats.mean_speedup for name, stats in context.rule_stats.items()
                   if stats.wins > stats.losses and stats.mean_speedup > 1.0}
        rules = sorted((r for r in self.rules if r.name in winners), key=lambda r: -winners[r.name])
        with focus_of(parent.result):
            plans = [self._proposal(rule, plan) for rule in rules for plan in rule.plan(parent.source, parent.result)]
        return self._untried(plans, parent, context)[:count]

    @staticmethod
    def _untried(proposals: list[Proposal], parent: Candidate, context: SearchContext) -> list[Proposal]:
        """The proposals the search has not already tried on `parent`."""
        return [p for p in proposals if (parent.hash, p.origin, p.description) not in context.tried]

    @staticmethod
    def _proposal(rule: Rule, plan: Plan) -> Proposal:
        return Proposal(plan.description, f"rule:{rule.name}", (rule, plan), plan.priority)

    def realize(self, parent: Candidate, proposal: Proposal, samples: int) -> list[Draft]:
        rule, plan = proposal.payload
        assert isinstance(plan, Plan)
        try:
            with focus_of(parent.result):
                return [Draft(rule.apply(parent.source, plan))]
        except RuleError as exc:
            return [Draft(None, str(exc))]
        except Exception as exc:  # the rule's own bug: the search goes on without this rewrite and reports it
            log.exception("rule %s failed to write its plan %s", rule.name, plan.key)
            return [Draft(None, f"{type(exc).__name__}: {exc}", crashed=True)]

    def summarize(self, slow: Candidate, fast: Candidate, context: SearchContext) -> str:
        rule = next((r for r in self.rules if f"rule:{r.name}" == fast.origin), None)
        speedup = slow.latency_ms / fast.latency_ms if fast.latency_ms else 1.0
        lesson = rule.summary if rule else fast.origin
        direction = "faster" if speedup >= 1 else "slower"
        plan = fast.plan.rstrip().rstrip(".")  # plans are sentences: "... each iteration." took a second period
        return (f"{lesson} Applied as: {plan}. Result: {speedup:.2f}x {direction} on {context.task} "
                f"({context.hardware}, {fast.result.backend}).")
