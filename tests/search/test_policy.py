"""The beam policy on plain candidates: no profiler, no process, no thread."""

from __future__ import annotations

from accelopt_core.agents.base import Candidate, Draft, Proposal, SearchContext
from accelopt_core.profiling import ProfileResult
from accelopt_core.profiling.profiler import kernel_hash
from accelopt_core.search.config import SearchConfig
from accelopt_core.search.policy import BeamPolicy, lineage, sort_key, winning_bar, wins_over

CONFIG = SearchConfig(beam_width=2, plans_per_candidate=3, samples_per_plan=1, patience=2)


def kernel(name: str, latency: float | None, correct: bool | None = True, parent: str | None = None,
           origin: str = "rule:test", error: str | None = None) -> Candidate:
    result = ProfileResult(name, "t", "trn1", "simulator", correct=correct, latency_ms=latency, error=error)
    return Candidate(f"# {name}\n", name, result, parent, f"plan {name}", origin)


class Lister:
    """Proposes the plans it was given, realizes each as one kernel named after the plan."""

    def __init__(self, name: str, plans: list[str], memory_plans: tuple[str, ...] = ()):
        self.name, self.plans, self.memory_plans = name, plans, memory_plans

    def propose(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        return [Proposal(p, f"{self.name}:x") for p in self.plans][:count]

    def recall(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        return [Proposal(p, f"{self.name}:x") for p in self.memory_plans][:count]

    def realize(self, parent: Candidate, proposal: Proposal, samples: int) -> list[Draft]:
        return [Draft(f"{parent.source}# {proposal.description}\n")]

    def summarize(self, slow: Candidate, fast: Candidate, context: SearchContext) -> str:
        return fast.plan


class Fixer(Lister):
    def repair(self, failed: Candidate, parent: Candidate) -> Draft:
        return Draft(parent.source)


def test_the_beam_is_the_b_fastest_correct_kernels_each_once() -> None:
    policy = BeamPolicy([Lister("a", [])], CONFIG)
    a, b, wrong, unchecked = kernel("a", 2.0), kernel("b", 1.0), kernel("w", 0.1, False), kernel("u", 0.2, None)
    assert policy.best_correct([a, wrong, b, unchecked, kernel("c", 3.0), b]) == [b, a]


def test_equal_latencies_are_ordered_by_hash_not_by_arrival() -> None:
    assert sorted([kernel("b", 1.0), kernel("a", 1.0)], key=sort_key)[0].hash == "a"


def test_the_bar_to_enter_the_beam_is_the_bth_correct_latency_once_there_are_b() -> None:
    policy = BeamPolicy([Lister("a", [])], CONFIG)
    bar = policy.enters_beam([kernel("base", 4.0)])
    assert bar([]) == float("inf")  # one correct kernel, the beam holds two: any kernel enters
    assert bar([kernel("x", 3.0), kernel("wrong", 1.0, False)]) == 4.0
    assert bar([kernel("x", 3.0), kernel("y", 2.0)]) == 3.0


def test_patience_stops_after_that_many_iterations_without_a_gain_and_zero_never_stops() -> None:
    assert not BeamPolicy([], CONFIG).stops(1) and BeamPolicy([], CONFIG).stops(2)
    assert not BeamPolicy([], SearchConfig(patience=0)).stops(100)


def test_plans_are_taken_from_each_agent_in_turn_and_each_parents_best_comes_first() -> None:
    policy = BeamPolicy([Lister("a", ["a1", "a2", "a3"]), Lister("b", ["b1"])], CONFIG)
    first, second = kernel("p", 2.0), kernel("q", 3.0)
    drafts = policy.draft([first, second], SearchContext("t", "t", "trn1"), {"p": first, "q": second})
    assert [(parent.hash, proposal.description) for _, parent, proposal in drafts] == [
        ("p", "a1"), ("q", "a1"), ("p", "b1"), ("q", "b1"), ("p", "a2"), ("q", "a2")]  # N = 3 per parent


def test_a_draft_evaluated_before_is_not_drafted_again_and_recall_asks_for_memorys_plans() -> None:
    policy = BeamPolicy([Lister("a", ["a1", "a2"], memory_plans=("a2",))], CONFIG)
    parent = kernel("p", 2.0)
    seen = Candidate("# p\n# a1\n", "", parent.result)
    evaluated = {parent.hash: parent, kernel_hash(seen.source): seen}
    context = SearchContext("t", "t", "trn1")
    assert [p.description for _, _, p in policy.draft([parent], context, evaluated)] == ["a2"]
    assert [p.description for _, _, p in policy.draft([parent], context, {}, recall=True)] == ["a2"]


def test_failed_children_go_to_the_agent_that_wrote_them_when_it_can_repair() -> None:
    policy = BeamPolicy([Lister("plain", []), Fixer("fixer", [])], CONFIG)
    parent = kernel("p", 2.0)
    wrong = kernel("w", 1.0, False, parent="p", origin="fixer:x")
    crashed = kernel("c", None, None, parent="p", origin="fixer:x", error="boom")
    plain_wrong = kernel("pw", 1.0, False, parent="p", origin="plain:x")
    orphan = kernel("o", 1.0, False, parent="gone", origin="fixer:x")
    repairs = policy.repairable([wrong, crashed, plain_wrong, orphan, kernel("ok", 1.0, parent="p")], {"p": parent})
    assert [(c.hash, agent.name) for c, agent in repairs] == [("w", "fixer"), ("c", "fixer")]


def test_a_remembered_rewrite_wins_only_checked_correct_and_faster_by_a_lesson() -> None:
    parent = kernel("p", 1.0)
    assert wins_over(kernel("c", 0.5), parent) and not wins_over(kernel("c", 0.5, None), parent)
    assert not wins_over(kernel("c", 0.9999), parent)
    assert winning_bar(parent)([]) < 1.0


def test_the_lineage_runs_from_the_baseline_to_the_kernel() -> None:
    base, mid, best = kernel("b", 3.0), kernel("m", 2.0, parent="b"), kernel("x", 1.0, parent="m")
    assert lineage(best, {"b": base, "m": mid, "x": best}) == [base, mid, best]
    assert lineage(best, {"x": best}) == [best]


class Crasher(Lister):
    """Its executor raises on every plan (as RuleAgent reports a rule's bug): a draft with no source, crashed."""

    def realize(self, parent: Candidate, proposal: Proposal, samples: int) -> list[Draft]:
        return [Draft(None, f"ValueError: cannot write {proposal.description}", crashed=True)]


def test_a_crashed_rewrite_is_kept_by_the_policy_and_a_plan_that_does_not_fit_is_not() -> None:
    """A plan that does not fit (a draft with an error) is routine; one whose executor raised is our bug, kept
    with its origin, plan and error so the search's results name it."""
    policy = BeamPolicy([Crasher("rule", ["p1"]), Lister("fine", ["p2"])], CONFIG)
    drafts = policy.draft([kernel("a", 1.0)], SearchContext("t", "t", "trn1"), {})
    assert [proposal.description for _, _, proposal in drafts] == ["p2"]
    assert [(c.origin, c.plan, c.error) for c in policy.crashed] == [("rule:x", "p1", "ValueError: cannot write p1")]
