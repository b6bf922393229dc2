"""RuleAgent: every rule's plans become proposals by the profile's priorities, rules that won on the
family before are what it recalls for memory replay, and the executor turns a plan into its rewrite."""

from __future__ import annotations

from pathlib import Path

import pytest
from rule_eval import profile

from accelopt_core.agents.base import Candidate, SearchContext
from accelopt_core.agents.rules.agent import RuleAgent
from accelopt_core.agents.rules.base import Plan
from accelopt_core.agents.rules.registry import default_rules
from accelopt_core.memory import RuleStats
from accelopt_core.nki.loader import read_source
from accelopt_core.tasks.registry import task_files

SILU = read_source(task_files("silu").kernel)


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Candidate:
    result = profile(SILU, [(256, 2048)], Path(tmp_path_factory.mktemp("silu")), "silu")
    return Candidate(SILU, "base", result)


def test_without_memory_all_rules_propose_and_nothing_is_recalled(parent: Candidate) -> None:
    agent, context = RuleAgent(default_rules()), SearchContext("silu", "elementwise", "trn1")
    proposals = agent.propose(parent, context, 50)
    assert len({p.origin for p in proposals}) >= 2
    assert [p.priority for p in proposals] == sorted((p.priority for p in proposals), reverse=True)
    assert agent.recall(parent, context, 50) == []


def test_rules_that_won_before_are_recalled_biggest_win_first(parent: Candidate) -> None:
    agent = RuleAgent(default_rules())
    cold_context = SearchContext("silu", "elementwise", "trn1")
    cold = agent.propose(parent, cold_context, 50)
    origins = list(dict.fromkeys(p.origin.removeprefix("rule:") for p in cold))
    small, big = origins[-1], origins[0]
    warm = SearchContext("silu", "elementwise", "trn1", rule_stats={
        small: RuleStats(small, wins=3, losses=1, mean_speedup=1.1),
        big: RuleStats(big, wins=1, losses=0, mean_speedup=1.5)})
    recalled = [p.origin for p in agent.recall(parent, warm, 50)]
    assert set(recalled) == {f"rule:{small}", f"rule:{big}"}
    assert recalled.index(f"rule:{big}") < recalled.index(f"rule:{small}")
    assert len(agent.recall(parent, warm, 1)) == 1
    assert agent.propose(parent, warm, 50) == cold  # memory does not reorder the beam's plans


def test_a_rule_that_lost_more_than_it_won_is_not_recalled(parent: Candidate) -> None:
    agent = RuleAgent(default_rules())
    name = agent.propose(parent, SearchContext("silu", "elementwise", "trn1"), 1)[0].origin.removeprefix("rule:")
    context = SearchContext("silu", "elementwise", "trn1",
                            rule_stats={name: RuleStats(name, wins=1, losses=4, mean_speedup=0.9)})
    assert agent.recall(parent, context, 50) == []


def test_plans_already_tried_on_this_kernel_leave_room_for_others(parent: Candidate) -> None:
    agent = RuleAgent(default_rules())
    first, second, *_ = agent.propose(parent, SearchContext("silu", "elementwise", "trn1"), 50)
    context = SearchContext("silu", "elementwise", "trn1", tried={(parent.hash, first.origin, first.description)})
    assert agent.propose(parent, context, 1) == [second]
    other = SearchContext("silu", "elementwise", "trn1", tried={("another kernel", first.origin, first.description)})
    assert agent.propose(parent, other, 1) == [first]


def test_realize_writes_the_rewrite_and_summarize_names_it(parent: Candidate) -> None:
    agent = RuleAgent(default_rules())
    context = SearchContext("silu", "elementwise", "trn1")
    proposal = agent.propose(parent, context, 1)[0]
    [draft] = agent.realize(parent, proposal, 1)
    assert draft.error is None and draft.source and draft.source != SILU
    fast = Candidate(draft.source, "fast", parent.result, "base", proposal.description, proposal.origin)
    lesson = agent.summarize(parent, fast, context)
    assert proposal.description in lesson and "silu" in lesson


def test_in_a_file_of_several_kernels_the_rules_work_on_the_one_profiled(tmp_path: Path) -> None:
    """A tutorial file keeps every version of its kernel: the profile names the one that ran, and only
    that one is planned on and rewritten."""
    head, body = SILU.split("@nki.jit\n")
    versions = head + "".join(f"@nki.jit\n{body.replace('def kernel(', f'def silu_{v}(')}\n\n" for v in ("v1", "v2"))
    second = versions[:versions.index("def silu_v2(")].count("\n") + 1
    agent = RuleAgent(default_rules())
    for function, inside in (("silu_v1", lambda line: line < second), ("silu_v2", lambda line: line >= second)):
        result = profile(versions, [(256, 2048)], tmp_path, "silu", function=function)
        parent = Candidate(versions, "base", result)
        proposals = agent.propose(parent, SearchContext("silu", "elementwise", "trn1"), 50)
        assert proposals and all(inside(int(plan.line)) for _, plan in (p.payload for p in proposals))
        draft = agent.realize(parent, proposals[0], 1)[0]
        assert draft.source is not None
        kept = "silu_v2" if function == "silu_v1" else "silu_v1"
        assert _function_text(draft.source, kept) == _function_text(versions, kept)
        assert _function_text(draft.source, function) != _function_text(versions, function)


def _function_text(source: str, name: str) -> str:
    start = source.index(f"def {name}(")
    end = source.find("@nki.jit", start)
    return source[start:end if end >= 0 else None]


class _BrokenRule:
    """A rule whose writer has a bug: it plans, then raises something other than RuleError."""

    name = "broken"
    summary = "never writes"

    def plan(self, source: str, profile: object) -> list[Plan]:
        return [Plan(self.name, 1, "rewrite line 1", {}, 0.5)]

    def apply(self, source: str, plan: Plan) -> str:
        raise SyntaxError("the rewrite printed `f(a,, b)`")


def test_a_rule_that_raises_is_reported_as_crashed_not_ended_the_search(parent: Candidate) -> None:
    """A bug in one rule's writer (balance_engines once printed `data=x,,`) ended the whole search with a
    traceback; the draft now says it crashed and why, so the search goes on and reports it."""
    agent = RuleAgent([_BrokenRule()])
    [proposal] = agent.propose(parent, SearchContext("silu", "elementwise", "trn1"), 5)
    [draft] = agent.realize(parent, proposal, 1)
    assert draft.source is None and draft.crashed and draft.error == "SyntaxError: the rewrite printed `f(a,, b)`"
