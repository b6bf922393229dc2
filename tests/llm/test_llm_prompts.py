"""The prompt templates and what fills them, and the agent's behaviour around the summarizer, the
fixer and prefetching, against the scripted server."""

from __future__ import annotations

import re
import string

import pytest
from llm_fakes import LESSON, PLAN_FUSE, PLAN_WIDEN, SILU, Reply, Request, fenced, fused, kernel_in

from accelopt_core.agents.base import Candidate, SearchContext
from accelopt_core.agents.llm import LLMAgent, prompts
from accelopt_core.memory import Experience
from accelopt_core.profiling import ProfileResult
from accelopt_core.profiling.profiler import kernel_hash


def candidate(source: str, latency: float, plan: str = "", iteration: int = 0) -> Candidate:
    result = ProfileResult("candidate.py", "silu", "trn1", "simulator", correct=True, latency_ms=latency,
                           peak_percent=40.0, bottleneck="vector",
                           profile={"vector_engine_active_time_percent": 0.7, "hbm_read_bytes": 1 << 20},
                           lines=[{"line": 16, "time_ms": 0.6, "engine": "vector", "instructions": 10,
                                   "engines": {"vector": 0.4, "scalar": 0.2}},
                                  {"line": 15, "time_ms": 0.2, "engine": "dma", "instructions": 5}])
    return Candidate(source, kernel_hash(source), result, None, plan, "llm:m", iteration)


CONTEXT = SearchContext("silu", "elementwise", "trn1")


@pytest.mark.parametrize("role", prompts.ROLES)
def test_every_template_has_its_role_a_user_part_and_only_known_placeholders(role: str) -> None:
    text = prompts.template_text(role)
    assert text.startswith(f"# Role: {role}\n") and text.count(prompts.SPLIT) == 1
    names = {m.group("braced") or m.group("named") for m in string.Template.pattern.finditer(text)
             if m.group("braced") or m.group("named")}
    expected = {
        "planner": {"primer", "units", "task", "hardware", "kernel", "backend", "profile", "experiences",
                    "variant_hint"},
        "executor": {"primer", "task", "plan", "kernel"},
        "summarizer": {"units", "task", "family", "hardware", "plan", "result", "slow_latency", "fast_latency",
                       "slow_profile", "fast_profile", "slow_kernel", "fast_kernel", "direction"},
        "fixer": {"primer", "task", "plan", "error", "kernel", "reference", "attempt", "tries"},
    }[role]
    assert names == expected


def test_the_primer_states_the_hardware_rules_and_techniques() -> None:
    primer = prompts.template_text("nki_primer")
    for fact in ("at most 128", "512 float32", "8 banks", "K <= 128", "M <= 128", "N <= 512", "affine_range",
                 "sequential_range", "no bfloat16", "never hard-code", "returning an input"):
        assert fact in primer, fact
    assert len(primer) < 6000  # it rides along with most calls: keep it compact


def test_profile_summary_uses_neuron_profile_names_and_ranks_lines() -> None:
    text = prompts.profile_summary(candidate(SILU, 1.2).result, SILU)
    assert "vector_engine_active_time_percent=0.7" in text and "hbm_read_bytes=1_048_576" in text
    first, second = text.index("line 16: 75%"), text.index("line 15: 25%")
    assert first < second and "(vector 0.4 ms, scalar 0.2 ms)" in text
    assert "| denominator = nl.add(nl.exp(nl.negative(tile)), 1.0)" in text
    assert prompts.profile_summary(ProfileResult("k", None, "trn1", "simulator")) == "no profile available"


@pytest.mark.parametrize("role", ["planner", "summarizer"])
def test_the_roles_that_read_profiles_are_told_their_units(role: str) -> None:
    """The fields arrive as neuron-profile writes them, from either backend: a model must not read 0.7 as 0.7 %."""
    values = dict.fromkeys(("task", "hardware", "kernel", "backend", "profile", "experiences", "variant_hint", "family",
                            "plan", "result", "slow_latency", "fast_latency", "slow_profile", "fast_profile",
                            "slow_kernel", "fast_kernel", "direction"), "-")
    system = prompts.render(role, **values).system
    assert prompts.PROFILE_UNITS in system and "0.74 means 74 %" in system


def test_experiences_show_what_worked_and_what_to_avoid() -> None:
    good = Experience("silu", "elementwise", "trn1", "a", "b", 1.3, "fuse", "Fusing helps.")
    bad = Experience("softmax", "softmax", "trn1", "a", "c", 0.7, "narrow tiles", "Narrow tiles hurt.", positive=False)
    text = prompts.experiences_block([good, bad])
    assert re.search(r"Worked.*\n- 1.30x on silu \(elementwise\): Fusing helps. \(plan: fuse\)\nAvoid.*\n"
                     r"- 0.70x on softmax: Narrow", text)
    assert prompts.experiences_block([]) == "None yet for this hardware."


def test_task_brief_from_the_reference_and_for_unknown_tasks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    brief = prompts.task_brief("mamba")
    assert brief.startswith("mamba: the selective scan") and "small: M=1024, C=256, S=8" in brief
    assert "below 3e-05" in brief and "def reference(" in brief
    assert prompts.task_brief("no_such_task") == "no_such_task: make the kernel faster without changing its results."
    ref = tmp_path / "mine_ref.py"
    ref.write_text('"""mine: doubles x."""\n\ndef forward(x):\n    return 2 * x\n')
    assert prompts.task_brief(str(ref)).startswith("mine: doubles x.") and "def forward" in prompts.task_brief(str(ref))


def test_planner_and_executor_are_told_which_function_is_the_kernel_in_a_file_of_several() -> None:
    named = Candidate(SILU, "base", ProfileResult("versions.py", "silu", "trn1", "simulator", function="silu_v2"))
    planner = prompts.planner_prompt(named, SearchContext("silu", "elementwise", "trn1")).user
    executor = prompts.executor_prompt(named, "fuse the chain", "silu").user
    assert all("The kernel is the function `silu_v2`" in text for text in (planner, executor))
    alone = Candidate(SILU, "base", ProfileResult("silu.py", "silu", "trn1", "simulator"))
    assert "The kernel is the function" not in prompts.executor_prompt(alone, "fuse the chain", "silu").user


def test_summarizer_is_asked_only_for_lessons_memory_keeps(fake_llm) -> None:
    server = fake_llm(lambda r: LESSON)
    slow = candidate(SILU, 1.2)
    with LLMAgent(server.settings(summaries_per_iteration=2)) as agent:
        neutral = agent.summarize(slow, candidate(fused(SILU), 1.19, "tiny change"), CONTEXT)
        assert neutral.startswith("tiny change made the kernel faster (1.01x") and not server.requests
        assert agent.summarize(slow, candidate(fused(SILU), 0.9, "fuse"), CONTEXT) == LESSON
        assert agent.summarize(slow, candidate(fused(SILU), 2.0, "split"), CONTEXT) == LESSON  # a warning
        capped = agent.summarize(slow, candidate(fused(SILU), 0.8, "third"), CONTEXT)
        assert capped.startswith("third made the kernel faster") and len(server.requests) == 2
        assert agent.summarize(slow, candidate(fused(SILU), 0.8, "next", iteration=1), CONTEXT) == LESSON
    warning = server.requests[1].user
    assert "0.60x slower" in warning and "warning about what to avoid" in warning
    assert "Profile: latency 1.2 ms, 40.0% of peak, vector-bound" in warning


def test_summarizer_failure_falls_back_to_a_template_lesson(fake_llm) -> None:
    server = fake_llm(lambda r: Reply("broken", status=400))
    with LLMAgent(server.settings()) as agent:
        lesson = agent.summarize(candidate(SILU, 1.2), candidate(fused(SILU), 0.9, "fuse"), CONTEXT)
    assert lesson == "fuse made the kernel faster (1.33x, 1.2 ms -> 0.9 ms) on silu (trn1)."


def test_the_fixer_gives_up_after_its_tries_with_the_last_reason(fake_llm) -> None:
    server = fake_llm(lambda r: fenced("def kernel(x):\n    return (\n") if r.role == "fixer" else PLAN_FUSE)
    with LLMAgent(server.settings(fixer_tries=2)) as agent:
        draft = agent.fix("def kernel(x)\n", "candidate.py:1: syntax error: expected ':'", SILU)
    assert draft.source is None and draft.error is not None
    assert draft.error.startswith("not repaired after 2 fixer tries: candidate.py:2: syntax error")
    assert [r.user.count("This is attempt") for r in server.requests] == [1, 1]
    assert "attempt 2 of 2" in server.requests[1].user


def test_a_fixer_that_hands_back_the_working_version_is_not_a_new_kernel(fake_llm) -> None:
    server = fake_llm(lambda r: fenced(SILU, "Reverting to the original."))
    with LLMAgent(server.settings()) as agent:
        draft = agent.fix("def kernel(x)\n", "candidate.py:1: syntax error: expected ':'", SILU)
    assert draft.source is None and draft.error == "fixer: returned the last working version unchanged"


def test_repair_passes_the_checkers_message(fake_llm) -> None:
    server = fake_llm(lambda r: fenced(fused(SILU)))
    failed = candidate(fused(SILU).replace("tile_p = nl.tile_size.pmax", "tile_p = 256"), 1.0, "bigger tiles")
    failed.result.error = "candidate.py:10: hardware rule: partition dimension 256 exceeds 128"
    with LLMAgent(server.settings()) as agent:
        draft = agent.repair(failed, candidate(SILU, 1.2))
    assert draft.source == fused(SILU)
    assert "partition dimension 256 exceeds 128" in server.requests[0].user
    assert "bigger tiles" in server.requests[0].user


def test_without_prefetch_realize_asks_for_exactly_k_samples(fake_llm) -> None:
    def respond(request: Request) -> Reply | str:
        if request.role == "planner":
            return PLAN_WIDEN if "proposal 2 of" in request.user else PLAN_FUSE
        return fenced(fused(kernel_in(request.user)))

    server = fake_llm(respond)
    with LLMAgent(server.settings(), prefetch=False) as agent:
        proposals = agent.propose(candidate(SILU, 1.2), CONTEXT, 3)
        assert [p.description for p in proposals] == [
            "replace the exp/add/divide chain with one nl.silu activation",
            "widen the free-axis tile from 512 to 1024 columns"]  # the third plan repeated the first
        assert not server.by_role("executor")
        drafts = agent.realize(candidate(SILU, 1.2), proposals[0], 2)
        assert [d.source for d in drafts] == [fused(SILU), fused(SILU)]
        assert len(server.by_role("executor")) == 2
        assert "Usage" not in agent.usage_line() and agent.usage_line().startswith("LLM: 5 calls (0 failed")


def test_profile_summary_tells_the_planner_what_the_latency_assumes_weightiest_first() -> None:
    """A plan that swaps loops around a load assumed reused loses that reuse: the planner must see it."""
    result = ProfileResult("k", 1.0, "trn1", "simulator", profile={"assumptions": [
        {"kind": "loops merged", "line": 9, "bytes_not_moved": 0, "bytes_added": 0, "description": "loops merged: ..."},
        {"kind": "repeated load removed", "line": 18, "bytes_not_moved": 12_582_912, "bytes_added": 0,
         "description": "repeated load removed: 384 times this line loads HBM data"},
    ]})
    text = prompts.profile_summary(result)
    first = text.index("the latency assumes, line 18: repeated load removed: 384 times")
    assert first < text.index("the latency assumes, line 9: loops merged")
