"""The LLM agents in a real beam search: the real `openai` client against a local scripted server, real
sandboxed evaluation of the silu task, and the optimization memory. Each test asserts on the search's
result and on what reached memory.

The win a lesson is asserted for is the widening (512 -> 1024 columns: half the instructions, twice the
bytes per DMA), which pays whether the model finds silu DMA- or engine-bound; fusing the formula into one
activation only pays when an engine is the bottleneck, so the tests ask of it only that it stays correct."""

from __future__ import annotations

import itertools
from pathlib import Path

from llm_fakes import (
    KEY,
    LESSON,
    MODEL,
    PLAN_FUSE,
    PLAN_WIDEN,
    SILU,
    WIDEN_LESSON,
    Reply,
    Request,
    fenced,
    fused,
    kernel_in,
    widened,
)

from accelopt_core.agents.llm import LLMAgent
from accelopt_core.config import BudgetLimits
from accelopt_core.memory import Memory
from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.search import BeamSearch, SearchConfig

TASK = TaskRef("silu")


def config(**changes: int) -> SearchConfig:
    values = dict(beam_width=2, plans_per_candidate=2, samples_per_plan=1, iterations=3, workers=2, seeds=2,
                  patience=1)
    values.update(changes)
    return SearchConfig(**values)


def run(agent: LLMAgent, memory: Memory, search_config: SearchConfig):  # type: ignore[no-untyped-def]
    profiler = SimulatorProfiler(seeds=search_config.seeds, check_variant="small")
    return BeamSearch(profiler, [agent], search_config, memory).run(SILU, TASK, "trn1", "elementwise")


def test_good_plan_and_kernel_reach_the_best_kernel_and_memory(fake_llm, tmp_path: Path) -> None:
    def respond(request: Request) -> Reply | str:
        if request.role == "planner":
            kernel = request.user
            if "nl.silu" not in kernel:
                return PLAN_FUSE  # both planner calls agree: one plan after de-duplication
            if "min(cols, 512)" in kernel:
                return PLAN_WIDEN
            return "Plan: nothing left to change\nSteps:\n- keep the kernel"
        if request.role == "executor":
            kernel = kernel_in(request.user)
            if "nl.silu activation" in request.user:
                return fenced(fused(kernel))
            if "1024 columns" in request.user:
                return fenced(widened(kernel))
            return fenced(kernel, "The kernel is already optimal.")
        if request.role == "summarizer":
            before = request.user.split("## Before")[1].split("## After")[0]
            return f"Lesson: {LESSON}" if "nl.silu" not in before else WIDEN_LESSON
        return Reply("unexpected role", status=400)

    server = fake_llm(respond)
    with Memory(tmp_path / "m.db") as memory, LLMAgent(server.settings()) as agent:
        result = run(agent, memory, config())
        assert result.best.result.correct and result.speedup > 1.04
        assert "nl.silu(tile)" in result.best.source and "min(cols, 1024)" in result.best.source
        assert [step.plan for step in result.lineage[1:]] == [
            "replace the exp/add/divide chain with one nl.silu activation",
            "widen the free-axis tile from 512 to 1024 columns"]
        assert all(step.origin == f"llm:{MODEL}" for step in result.lineage[1:])

        lessons = memory.top_experiences("elementwise", "trn1")
        widen = next(e for e in lessons if "1024 columns" in e.plan)
        assert widen.positive and widen.speedup > 1.04 and widen.summary == WIDEN_LESSON
        assert widen.origin == f"llm:{MODEL}"
        assert all(e.speedup > 1.04 for e in lessons if e.positive)  # memory's threshold for a lesson
        assert any("duplicate" in note.reason for note in agent.notes)
        assert any("unchanged" in note.reason for note in agent.notes)

    planner = server.by_role("planner")
    first = planner[0].user
    assert "16 |             denominator = nl.add(nl.exp(nl.negative(tile)), 1.0)" in first  # numbered kernel
    assert "vector_engine_active_time_percent=" in first and "hbm_read_bytes=" in first  # neuron-profile names
    assert "line 16: " in first and "vector" in first  # hot lines with their share and engine
    assert "None yet" in first
    later = next(r.user for r in planner if "min(cols, 1024)" in r.user)  # a planner call after the widening
    assert "Worked (speedup of the rewrite):" in later and WIDEN_LESSON in later
    assert all(r.model == MODEL and r.authorization == f"Bearer {KEY}" for r in server.requests)
    assert all("## NKI on one Trainium NeuronCore" in r.system for r in server.requests if r.role != "summarizer")

    usage = agent.usage()
    assert usage.calls == len(server.requests) and usage.failures == 0
    assert usage.tokens_in > 0 and usage.tokens_out > 0
    assert abs(usage.cost_usd - (usage.tokens_in * 3 + usage.tokens_out * 15) / 1e6) < 1e-9
    assert set(agent.usage_by_role()) == {"planner", "executor", "summarizer"}


def test_reply_without_code_fails_its_sample_and_the_fixer_repairs_code_that_does_not_compile(
        fake_llm, tmp_path: Path) -> None:
    def respond(request: Request) -> Reply | str:
        if request.role == "planner":
            # two different plans for the baseline; later kernels get a plan the executor answers in prose
            if "nl.silu" in request.user:
                return "Plan: stop here\nSteps:\n- nothing"
            if "1024 columns" in request.user:  # the widened kernel, or a lesson about widening
                return "Plan: stop here\nSteps:\n- nothing"
            return PLAN_WIDEN if "proposal 2 of" not in request.user else PLAN_FUSE
        if request.role == "executor":
            if "1024 columns" in request.user and "min(cols, 512)" in kernel_in(request.user):
                broken = widened(kernel_in(request.user)).replace("for c in nl.affine_range(cols // tile_f):",
                                                                  "for c in nl.affine_range(cols // tile_f)")
                return fenced(broken)
            return "I believe the kernel cannot be improved further; one activation would not help."
        if request.role == "fixer":
            assert "syntax error" in request.user and "candidate.py:14" in request.user
            assert "14 |         for c in nl.affine_range(cols // tile_f)" in request.user  # numbered lines
            return fenced(widened(SILU), "The for statement lacked its colon.")
        if request.role == "summarizer":
            return LESSON
        return Reply("unexpected", status=400)

    server = fake_llm(respond)
    with Memory(tmp_path / "m.db") as memory, LLMAgent(server.settings()) as agent:
        result = run(agent, memory, config(iterations=2))
        assert result.best.result.correct and "min(cols, 1024)" in result.best.source
        reasons = [note.reason for note in agent.notes]
        assert any("no fenced python code block" in r for r in reasons)
        assert any("syntax error" in r for r in reasons)
        assert len(server.by_role("fixer")) == 1
        assert [e.summary for e in memory.top_experiences("elementwise", "trn1")] == [LESSON]
        state = memory.search_state(result.search_id)
        assert len(state.candidates) == 2  # the baseline and the repaired kernel: failed drafts cost no evaluation


def test_cheating_kernels_are_rejected_and_never_reach_memory(fake_llm, tmp_path: Path) -> None:
    samples = itertools.count()

    def respond(request: Request) -> Reply | str:
        if request.role == "planner":
            return "Plan: skip the arithmetic and store the loaded tile directly\nSteps:\n- drop lines 16-17"
        if request.role == "executor":
            kernel = kernel_in(request.user)
            if next(samples) % 2 == 0:  # skips the work: fast and wrong
                return fenced(kernel.replace("result = nl.divide(tile, denominator)", "result = tile"))
            return fenced(kernel.replace("    return out", "    return x"))  # hands back its input
        if request.role == "summarizer":
            raise AssertionError("a wrong kernel must never be summarized")
        return Reply("unexpected", status=400)

    server = fake_llm(respond)
    with Memory(tmp_path / "m.db") as memory, LLMAgent(server.settings()) as agent:
        result = run(agent, memory, config(samples_per_plan=2, iterations=1))
        assert result.best is result.base
        state = memory.search_state(result.search_id)
        cheats = [c for c in state.candidates if c.parent_hash is not None]
        assert len(cheats) == 2 and all(c.status == "incorrect" for c in cheats)
        assert memory.list_experiences() == []
    assert not server.by_role("summarizer")


def test_a_hanging_endpoint_times_out_is_retried_and_the_search_goes_on(fake_llm, tmp_path: Path) -> None:
    def respond(request: Request) -> Reply | str:
        if request.role == "planner":
            return PLAN_FUSE if "proposal 2 of" in request.user else PLAN_WIDEN
        if request.role == "executor":
            if "nl.silu activation" in request.user:
                return Reply(fenced(fused(kernel_in(request.user))), delay=3.0)  # beyond the client's timeout
            return fenced(widened(kernel_in(request.user)))
        if request.role == "summarizer":
            return LESSON
        return Reply("unexpected", status=400)

    server = fake_llm(respond)
    settings = server.settings(timeout=1.0, max_retries=1, max_retry_wait=0.2)
    with Memory(tmp_path / "m.db") as memory, LLMAgent(settings) as agent:
        result = run(agent, memory, config(iterations=1))
        assert result.best.result.correct and "min(cols, 1024)" in result.best.source
        assert "nl.silu(tile)" not in result.best.source  # the hung sample never produced a kernel
        executor = agent.usage_by_role()["executor"]
        assert executor.failures == 1 and executor.retries == 1 and executor.calls == 1
        assert any("timed out" in n.reason and "after 2 attempts" in n.reason for n in agent.notes)
        assert [e.summary for e in memory.top_experiences("elementwise", "trn1")] == [LESSON]
    assert len([r for r in server.by_role("executor") if "nl.silu activation" in r.user]) == 2


def test_a_budget_that_runs_out_mid_search_stops_it_cleanly_with_the_best_so_far(fake_llm, tmp_path: Path) -> None:
    def respond(request: Request) -> Reply | str:
        if request.role == "planner":
            return PLAN_FUSE if "min(cols, 1024)" in request.user else PLAN_WIDEN
        if request.role == "executor":
            kernel = kernel_in(request.user)
            return fenced(widened(kernel) if "1024 columns" in request.user else fused(kernel))
        return LESSON

    server = fake_llm(lambda r: _with_usage(respond(r)))
    # every call reports 400 tokens: plan, kernel and lesson of the first iteration spend the 1200
    settings = server.settings(budget=BudgetLimits(max_tokens=1200))
    with Memory(tmp_path / "m.db") as memory, LLMAgent(settings) as agent:
        result = run(agent, memory, config(plans_per_candidate=1, iterations=4, patience=0))
        assert len(result.history) == 1 and not result.cancelled
        assert "min(cols, 1024)" in result.best.source and "nl.silu(tile)" not in result.best.source
        assert agent.stop_reason and "token budget spent" in agent.stop_reason
        assert "token budget spent" in agent.usage_line()
        assert agent.usage().tokens == 1200
        assert [e.summary for e in memory.top_experiences("elementwise", "trn1")] == [LESSON]
        assert memory.get_search(result.search_id).status == "finished"
    assert [r.role for r in server.requests] == ["planner", "executor", "summarizer"]


def test_a_refused_key_stops_the_agent_and_the_search_keeps_its_baseline(fake_llm, tmp_path: Path) -> None:
    server = fake_llm(lambda r: Reply("invalid api key", status=401))
    with Memory(tmp_path / "m.db") as memory, LLMAgent(server.settings()) as agent:
        result = run(agent, memory, config())
        assert result.best is result.base and result.history == []
        assert agent.stop_reason and "HTTP 401" in agent.stop_reason
    assert len(server.requests) <= 2  # one round of planner calls, no retries


def _with_usage(reply: Reply | str) -> Reply:
    reply = Reply(reply) if isinstance(reply, str) else reply
    reply.tokens_in, reply.tokens_out = 300, 100
    return reply


def test_a_candidate_that_fails_when_it_runs_goes_to_the_fixer_and_its_repair_is_evaluated(
        fake_llm, tmp_path: Path) -> None:
    """AccelOpt's fixer in the loop: the executor's kernel passes the cheap checks but breaks a hardware rule
    when it runs; the fixer gets the error and the failing line, and the repaired kernel is evaluated and wins."""
    def respond(request: Request) -> Reply | str:
        if request.role == "planner":
            return PLAN_WIDEN if "min(cols, 512)" in request.user else "Plan: stop here\nSteps:\n- nothing"
        if request.role == "executor":
            return fenced(widened(kernel_in(request.user)).replace("tile_p = nl.tile_size.pmax", "tile_p = 256"))
        if request.role == "fixer":
            assert "tile_p = 256" in request.user and "128" in request.user
            return fenced(widened(SILU), "The partition dimension is at most 128.")
        if request.role == "summarizer":
            return WIDEN_LESSON
        return Reply("unexpected", status=400)

    server = fake_llm(respond)
    with Memory(tmp_path / "m.db") as memory, LLMAgent(server.settings()) as agent:
        result = run(agent, memory, config(iterations=1, plans_per_candidate=1))
        assert result.best.result.correct and result.speedup > 1.04
        assert result.best.source == widened(SILU)
        assert result.best.plan.startswith("widen the free-axis tile from 512 to 1024 columns (repaired after: ")
        assert len(server.by_role("fixer")) == 1
        assert [c.origin for c in result.failures] == [f"llm:{MODEL}"]
        assert "128" in (result.failures[0].result.error or "")
        state = memory.search_state(result.search_id)
        assert len(state.candidates) == 3  # the baseline, the failed kernel and its repair
