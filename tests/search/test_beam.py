"""The beam search end to end: real sandboxed evaluations of silu rewrites, memory, events,
cancellation and resume after kill -9."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from accelopt_core.agents.base import Draft, Proposal
from accelopt_core.memory import Memory
from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.search import BeamSearch, SearchConfig, SearchError, SearchEvent
from accelopt_core.search.scheduler import TimeBudget
from accelopt_core.tasks.registry import task_files

sys.path.insert(0, str(Path(__file__).parent))
from scripted_agent import ScriptedAgent, SleepyAgent

SILU = Path(task_files("silu").kernel).read_text()
TASK = TaskRef("silu")
CONFIG = SearchConfig(beam_width=2, plans_per_candidate=4, samples_per_plan=1, iterations=4, workers=2, seeds=2)


class CountingProfiler(SimulatorProfiler):
    """The real profiler, counting how many kernels it was asked to evaluate."""

    def __init__(self) -> None:
        super().__init__(seeds=2, check_variant="small")
        self.calls = 0

    def profile(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().profile(*args, **kwargs)


def test_search_finds_the_scripted_wins(tmp_path: Path) -> None:
    events: list[SearchEvent] = []
    with Memory(tmp_path / "m.db") as memory:
        search = BeamSearch(CountingProfiler(), [ScriptedAgent()], CONFIG, memory, events.append)
        result = search.run(SILU, TASK, "trn1", "elementwise")
        assert result.best.result.correct and result.speedup > 1.04
        assert "tile_f = min(cols, 1024)" in result.best.source  # the widening that pays in any regime
        fastest = min((c for c in search.evaluated.values() if c.result.correct), key=lambda c: c.latency_ms)
        assert result.best.latency_ms == fastest.latency_ms
        assert events[0].kind == "started" and events[-1].kind == "finished"
        assert any(e.kind == "evaluated" for e in events) and events[-1].speedup == pytest.approx(result.speedup)
        state = memory.search_state(result.search_id)
        statuses = {c.plan: c.status for c in state.candidates}
        assert statuses["break the kernel (wrong results)"] == "incorrect"
        failed = {c.plan: c.result for c in result.failures}  # what failed is reported, with why
        assert "relative L2 error" in (failed["break the kernel (wrong results)"].check_message or "")
        assert all(statuses[plan] == "incorrect" for plan in failed)
        assert all(memory.kernel_source(c.kernel_hash) for c in state.candidates)
        lessons = memory.top_experiences("elementwise", "trn1")
        assert lessons and all(e.speedup > 1.04 for e in lessons if e.positive)
        assert result.lineage[0].plan == ""  # the lineage starts at the baseline


def test_wrong_baseline_is_refused(tmp_path: Path) -> None:
    broken = SILU.replace("nl.divide(tile, denominator)", "tile")
    with pytest.raises(SearchError, match="wrong results"):
        BeamSearch(CountingProfiler(), [ScriptedAgent()], CONFIG).run(broken, TASK)


def test_cancel_from_another_thread_stops_quickly() -> None:
    cancel = threading.Event()

    def on_event(event: SearchEvent) -> None:
        if event.kind == "started":
            threading.Timer(1.0, cancel.set).start()

    start = time.monotonic()
    result = BeamSearch(CountingProfiler(), [SleepyAgent()], CONFIG, None, on_event, cancel).run(SILU, TASK)
    assert result.cancelled
    assert time.monotonic() - start < 15  # the hanging children were killed, not waited for
    assert result.best is result.base  # the baseline, as checked at the size it is timed


RUNNER = textwrap.dedent('''
    import sys
    sys.path.insert(0, {here!r})
    from scripted_agent import ScriptedAgent
    from accelopt_core.memory import Memory
    from accelopt_core.profiling import SimulatorProfiler, TaskRef
    from accelopt_core.search import BeamSearch, SearchConfig
    from accelopt_core.tasks.registry import task_files
    source = open(task_files("silu").kernel).read()
    config = SearchConfig(beam_width=2, plans_per_candidate=4, samples_per_plan=1, iterations=4, workers=1, seeds=2,
                          patience=0)
    with Memory({db!r}) as memory:
        BeamSearch(SimulatorProfiler(seeds=2, check_variant="small"), [ScriptedAgent()], config, memory).run(
            source, TaskRef("silu"), "trn1", "elementwise")
''')


def test_killed_search_resumes_without_reevaluating(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    child = subprocess.Popen([sys.executable, "-c", RUNNER.format(here=str(Path(__file__).parent), db=str(db))])
    deadline = time.monotonic() + 120
    search_id = None
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.2)
        if db.exists():
            with Memory(db) as memory:
                searches = memory.list_searches()
                if searches and memory.search_state(searches[0].id).iteration >= 0:
                    search_id = searches[0].id
                    break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert search_id is not None, "the child search never finished an iteration"
    with Memory(db) as memory:
        before = memory.search_state(search_id)
        recorded = {c.kernel_hash for c in before.candidates}
        profiler = CountingProfiler()
        search = BeamSearch(profiler, [ScriptedAgent()], SearchConfig(**{**CONFIG.__dict__, "patience": 0}), memory)
        result = search.run(SILU, TASK, "trn1", "elementwise", resume=search_id)
        after = memory.search_state(search_id)
    assert result.best.result.correct
    assert len(after.candidates) - len(before.candidates) == profiler.calls  # each new evaluation recorded once
    assert not ({c.kernel_hash for c in after.candidates[len(before.candidates):]} & recorded)


def _evaluations_to(search: BeamSearch, latency_ms: float) -> int:
    order = list(search.evaluated.values())
    return next(i for i, c in enumerate(order, 1) if c.result.correct and c.latency_ms <= latency_ms)


def test_memory_replay_reaches_the_same_best_in_fewer_evaluations(tmp_path: Path) -> None:
    config = replace(CONFIG, workers=1)  # one at a time: the evaluation order is deterministic
    with Memory(tmp_path / "m.db") as memory:
        cold = BeamSearch(CountingProfiler(), [ScriptedAgent()], config, memory)
        cold_result = cold.run(SILU, TASK, "trn1", "elementwise")
        events: list[SearchEvent] = []
        warm = BeamSearch(CountingProfiler(), [ScriptedAgent()], config, memory, events.append)
        warm_result = warm.run(SILU, TASK, "trn1", "elementwise")
    assert warm_result.best.latency_ms <= cold_result.best.latency_ms
    target = cold_result.best.latency_ms
    assert _evaluations_to(warm, target) < _evaluations_to(cold, target)
    replayed = [c for c in warm.evaluated.values() if c.iteration == -1 and c.parent is not None]
    assert replayed and any(c.result.correct and c.latency_ms < warm_result.base.latency_ms for c in replayed)
    assert any(e.kind == "evaluated" and e.message.startswith("memory replay: ") for e in events)
    [replay_done] = [e for e in events if e.kind == "replayed"]
    assert replay_done.message.endswith(f"of {len(replayed)} evaluated")
    assert all(e.iteration >= 0 for e in events)


def test_no_memory_replay_without_remembered_wins_or_when_switched_off(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        first = BeamSearch(CountingProfiler(), [ScriptedAgent()], CONFIG, memory)
        first.run(SILU, TASK, "trn1", "elementwise")
        assert all(c.iteration >= 0 for c in first.evaluated.values() if c.parent is not None)
        off = BeamSearch(CountingProfiler(), [ScriptedAgent()], replace(CONFIG, replay_steps=0), memory)
        off.run(SILU, TASK, "trn1", "elementwise")
        assert all(c.iteration >= 0 for c in off.evaluated.values() if c.parent is not None)


class SlowStubProfiler:
    """Every kernel checks correct and takes `delay` seconds to evaluate; each `# faster` line it
    carries makes it 10% faster. Records the order it was asked in."""

    backend = "stub"

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.asked: list[str] = []

    def profile(self, source: str, task: TaskRef, hardware: str = "trn1", check: bool = True, *, seeds=None,
                kernel_label: str = "k.py", kernel_name: str | None = None, cancel=None):
        from accelopt_core.profiling import ProfileResult

        self.asked.append(source)
        time.sleep(self.delay)
        return ProfileResult(kernel_label, "t", hardware, self.backend, correct=True,
                             latency_ms=1.0 * 0.9 ** source.count("# faster"))

    def at_timed_size(self) -> None:
        """It checks where it times already: nothing to check again."""
        return None


class ManyPlansAgent(ScriptedAgent):
    """Eight plans for every kernel, the best first: `# faster` lines, or a no-op comment."""

    def propose(self, parent, context, count):
        plans = [Proposal(f"faster {i}", "rule:many", "# faster\n") for i in range(2)]
        plans += [Proposal(f"neutral {i}", "rule:many", f"# neutral {i} of {parent.hash[:6]}\n") for i in range(6)]
        return [p for p in plans if (parent.hash, p.origin, p.description) not in context.tried][:count]

    def realize(self, parent, proposal, samples):
        return [Draft(parent.source + proposal.payload)]


def test_the_time_budget_stops_the_search_before_an_evaluation_would_overrun_it() -> None:
    profiler = SlowStubProfiler(0.4)
    events: list[SearchEvent] = []
    config = replace(CONFIG, beam_width=2, plans_per_candidate=8, iterations=8, workers=1, time_budget_s=2.1,
                     replay_steps=0, screen=False)
    start = time.monotonic()
    result = BeamSearch(profiler, [ManyPlansAgent()], config, None, events.append).run("x = 1\n", TASK)
    assert time.monotonic() - start < 2.1 + 0.1  # no evaluation was started that would end after the budget
    assert len(profiler.asked) == 5  # the baseline and the 4 that fit
    assert result.best.source.count("# faster") == 1  # the best plan went first
    assert any("time budget of 2 s spent" in e.message for e in events)


def test_every_beam_kernel_gets_its_best_plan_evaluated_before_any_gets_its_second() -> None:
    profiler = SlowStubProfiler(0.0)
    config = replace(CONFIG, beam_width=2, plans_per_candidate=3, iterations=2, workers=1, replay_steps=0,
                     patience=0, screen=False)
    search = BeamSearch(profiler, [ManyPlansAgent()], config)
    search.run("x = 1\n", TASK)
    second = [c for c in search.evaluated.values() if c.iteration == 1]
    order = sorted(second, key=lambda c: profiler.asked.index(c.source))
    assert len({c.parent for c in order}) == 2 and order[0].parent != order[1].parent


def test_a_budget_smaller_than_the_baseline_still_evaluates_one_wave() -> None:
    profiler = SlowStubProfiler(0.3)
    config = replace(CONFIG, plans_per_candidate=8, workers=2, time_budget_s=0.2, replay_steps=0, screen=False)
    result = BeamSearch(profiler, [ManyPlansAgent()], config).run("x = 1\n", TASK)
    assert len(profiler.asked) == 3 and result.best.source.count("# faster") == 1


class ScreeningStubProfiler(SlowStubProfiler):
    """Like SlowStubProfiler, but an unchecked run is a timing with no verdict, as the real ones give."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        self.checked: list[str] = []

    def profile(self, source, task, hardware="trn1", check=True, **kwargs):  # type: ignore[no-untyped-def]
        result = super().profile(source, task, hardware, check, **kwargs)
        if check:
            self.checked.append(source)
        else:
            result.correct = None
        return result


def test_where_checks_are_full_size_only_kernels_that_can_enter_the_beam_are_checked(tmp_path: Path) -> None:
    profiler = ScreeningStubProfiler(0.0)
    config = replace(CONFIG, beam_width=2, plans_per_candidate=8, iterations=1, workers=1, replay_steps=0)
    with Memory(tmp_path / "m.db") as memory:
        search = BeamSearch(profiler, [ManyPlansAgent()], config, memory)
        result = search.run("x = 1\n", TASK)
        # the baseline, then the one faster kernel: the neutral ones only tie the beam's second place
        assert profiler.checked == ["x = 1\n", "x = 1\n# faster\n"]
        assert result.best.source.count("# faster") == 1 and result.best.result.correct
        state = memory.search_state(result.search_id)
        statuses = sorted(c.status for c in state.candidates)
        assert statuses == ["correct", "correct", *["unchecked"] * 6]
        unchecked = [c for c in search.evaluated.values() if c.result.correct is None]
        assert all("no faster than the 1 ms it needed to enter the beam" in c.result.check_message
                   for c in unchecked)


def test_screened_kernels_are_checked_fastest_first_and_slower_ones_fill_a_beam_with_room() -> None:
    profiler = ScreeningStubProfiler(0.0)
    config = replace(CONFIG, beam_width=4, plans_per_candidate=8, iterations=1, workers=1, replay_steps=0)
    BeamSearch(profiler, [ManyPlansAgent()], config).run("x = 1\n", TASK)
    # room for 3 beside the baseline: the faster kernel first, then 2 neutral ones; the rest cannot enter
    assert profiler.checked[1] == "x = 1\n# faster\n" and len(profiler.checked) == 4


def test_a_screening_search_keeps_to_its_budget() -> None:
    profiler = ScreeningStubProfiler(0.3)
    config = replace(CONFIG, beam_width=2, plans_per_candidate=8, iterations=8, workers=1, time_budget_s=2.0,
                     replay_steps=0, patience=0)
    start = time.monotonic()
    result = BeamSearch(profiler, [ManyPlansAgent()], config).run("x = 1\n", TASK)
    assert time.monotonic() - start < 2.0 + 0.1
    assert result.best.source.count("# faster") >= 1


class SlowChecksProfiler(ScreeningStubProfiler):
    """A check takes `delay` seconds, a timing alone a hundredth of a second."""

    def profile(self, source, task, hardware="trn1", check=True, **kwargs):  # type: ignore[no-untyped-def]
        self.delay = self.check_delay if check else 0.01
        return super().profile(source, task, hardware, check, **kwargs)


class ModestPlansFirstAgent(ManyPlansAgent):
    """The neutral plans ahead of the faster ones, as a rule's own ranking may put them."""

    def propose(self, parent, context, count):
        plans = super().propose(parent, context, 8)
        return sorted(plans, key=lambda p: p.description.startswith("faster"))[:count]


def test_a_check_waits_for_the_waves_timings_unless_its_kernel_would_lead() -> None:
    profiler = SlowChecksProfiler(0.0)
    profiler.check_delay = 0.3
    # the budget holds the baseline's check and one more: it must go to the faster kernel, timed last
    config = replace(CONFIG, beam_width=4, plans_per_candidate=8, iterations=1, workers=1, time_budget_s=0.75,
                     replay_steps=0)
    result = BeamSearch(profiler, [ModestPlansFirstAgent()], config).run("x = 1\n", TASK)
    assert profiler.checked == ["x = 1\n", "x = 1\n# faster\n"]
    assert result.best.source.count("# faster") == 1


def test_a_check_started_beside_others_is_counted_as_sharing_the_cores() -> None:
    budget = TimeBudget(10, workers=1)
    budget.start()
    budget.longest[True], budget.started[True] = 4.0, 1
    assert not budget.out_of_time(True)  # alone: 4 s of the 10 left
    budget.checking = 2
    assert budget.out_of_time(True)  # beside two others: the three take 12 s together


def test_under_a_tight_budget_a_level_deeper_beats_a_wider_beam() -> None:
    profiler = SlowChecksProfiler(0.0)
    profiler.check_delay = 0.5
    # after the baseline and the first level's best, the budget holds one more iteration's timings and
    # check, not a check of a kernel that does not lead as well
    config = replace(CONFIG, beam_width=4, plans_per_candidate=8, iterations=3, workers=1, time_budget_s=2.0,
                     replay_steps=0, patience=0)
    search = BeamSearch(profiler, [ManyPlansAgent()], config)
    result = search.run("x = 1\n", TASK)
    assert result.best.source.count("# faster") == 2
    assert all("faster" in source for source in profiler.checked[1:])
    skipped = [c for c in search.evaluated.values() if "kept for the next iteration" in (c.result.check_message or "")]
    assert skipped and all(c.result.correct is None for c in skipped)


class TwoWinsAgent(ScriptedAgent):
    """A big win and a small one for every kernel, the big one first."""

    def propose(self, parent, context, count):
        plans = [Proposal("big win", "rule:wins", "# faster\n# faster\n"),
                 Proposal("small win", "rule:wins", "# faster\n")]
        return [p for p in plans if (parent.hash, p.origin, p.description) not in context.tried][:count]

    def realize(self, parent, proposal, samples):
        return [Draft(parent.source + proposal.payload)]


class SlowTimingProfiler(SlowChecksProfiler):
    """Timing the kernel with `slow` `# faster` lines takes 0.1 s longer: the other win is timed first."""

    def __init__(self, slow: int) -> None:
        super().__init__(0.0)
        self.slow = slow

    def profile(self, source, task, hardware="trn1", check=True, **kwargs):  # type: ignore[no-untyped-def]
        if not check and source.count("# faster") == self.slow:
            time.sleep(0.1)
        return super().profile(source, task, hardware, check, **kwargs)


def test_a_kernel_slower_than_one_being_checked_does_not_lead() -> None:
    profiler = SlowTimingProfiler(slow=1)  # the small win is timed while the big one is checked
    profiler.check_delay = 0.4
    config = replace(CONFIG, beam_width=4, plans_per_candidate=2, iterations=1, workers=2, time_budget_s=1.5,
                     replay_steps=0)
    BeamSearch(profiler, [TwoWinsAgent()], config).run("x = 1\n", TASK)
    # the small win waited for the big one's check, then the budget was kept for a level deeper
    assert profiler.checked == ["x = 1\n", "x = 1\n# faster\n# faster\n"]


class SlowBaselineCheckProfiler(SlowChecksProfiler):
    """The baseline's check takes three times as long as its rewrites' (its intermediates whole arrays)."""

    def profile(self, source, task, hardware="trn1", check=True, **kwargs):  # type: ignore[no-untyped-def]
        self.check_delay = 0.6 if source == "x = 1\n" else 0.2
        return super().profile(source, task, hardware, check, **kwargs)


def test_a_kernels_check_is_expected_to_take_as_long_as_its_parents() -> None:
    profiler = SlowBaselineCheckProfiler(0.0)
    # after the baseline (0.6 s) and the first level's best (0.2 s), 0.45 s are left: not the baseline's
    # check time, but enough for a rewrite of the first level's best to be timed and checked
    config = replace(CONFIG, beam_width=1, plans_per_candidate=2, iterations=2, workers=1, time_budget_s=1.3,
                     replay_steps=0, patience=0)
    result = BeamSearch(profiler, [ManyPlansAgent()], config).run("x = 1\n", TASK)
    assert result.best.source.count("# faster") == 2 and result.best.result.correct


def test_under_a_tight_budget_a_leader_waits_for_the_waves_timings() -> None:
    profiler = SlowTimingProfiler(slow=2)  # the small win is timed first
    profiler.check_delay = 0.4
    config = replace(CONFIG, beam_width=4, plans_per_candidate=2, iterations=1, workers=2, time_budget_s=1.5,
                     replay_steps=0)
    BeamSearch(profiler, [TwoWinsAgent()], config).run("x = 1\n", TASK)
    # the small win led while the big one was timed, but the budget held one more check, not two
    assert profiler.checked == ["x = 1\n", "x = 1\n# faster\n# faster\n"]


class BaselineOutOfOurLimits(CountingProfiler):
    """The real profiler, with a check budget too small for the baseline alone (a full-size baseline on a busy
    machine): every other kernel is checked as usual."""

    def profile(self, source, *args, **kwargs):  # type: ignore[no-untyped-def]
        own = copy.copy(self)
        if source == SILU:
            own.limits = replace(self.limits, check_memory_mb=0)
        return CountingProfiler.profile(own, source, *args, **kwargs)


def test_a_baseline_our_check_cannot_finish_is_optimized_and_only_checked_kernels_replace_it() -> None:
    events: list[SearchEvent] = []
    result = BeamSearch(BaselineOutOfOurLimits(), [ScriptedAgent()], replace(CONFIG, iterations=1), None,
                        events.append).run(SILU, TASK)
    assert result.base.result.unchecked == "the check needs more than 0 MB here"
    assert result.base.result.error is None and result.base.latency_ms
    assert "baseline timed but unchecked (the check needs more than 0 MB here)" in events[0].message
    assert result.best.result.correct and result.speedup > 1.0


def test_a_baseline_our_limits_cannot_even_time_is_refused_with_the_limit() -> None:
    profiler = CountingProfiler()
    profiler.limits = replace(profiler.limits, check_seconds=0.0)
    with pytest.raises(SearchError, match="cannot be timed here: the timing needs more than 0 s here"):
        BeamSearch(profiler, [ScriptedAgent()], CONFIG).run(SILU, TASK)
