"""AccelOpt's beam search: keep the best B kernels; for each, N plans; for each plan, K executor
samples; evaluate every new kernel (in parallel, sandboxed); keep the best B correct ones; repeat.

Three parts do the work: the policy (policy.py) says what to keep and what to expand, the scheduler
(scheduler.py) evaluates kernels within the time budget, the recorder (recorder.py) writes memory and
progress events. `BeamSearch` runs the loop that joins them.

Before the first iteration, a memory replay walks greedily from the baseline through the rewrites
that won on this task family before (best remembered first, one wave of parallel evaluations at a
time, keeping each verified improvement), so a search on a kernel like one optimized before starts
where that one ended instead of rediscovering it.

Candidates are checked on a small variant of the task (a cheap pre-filter) and timed at full size.
Every kernel that enters the beam (and so may be offered as the result) or becomes a lesson in memory
is then checked again at the size it was timed, on one fresh seed, and that checked run is its timing:
a kernel whose control flow depends on the size, the seed or a trace-only run gains nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..agents.base import Agent, Candidate, SearchContext
from ..memory import SearchMemory
from ..profiling import Profiler, TaskRef
from ..profiling.profiler import kernel_hash
from .config import SearchConfig
from .events import SearchEvent
from .policy import (
    FAILED,
    Bar,
    BeamPolicy,
    CrashedRewrite,
    DraftItem,
    fastest,
    lineage,
    tally,
    verdict_of,
    winning_bar,
    wins_over,
)
from .recorder import SearchRecorder
from .scheduler import EvaluationScheduler, TimeBudget


class SearchError(Exception):
    """The search cannot start (e.g. the baseline kernel is wrong) or cannot resume."""


@dataclass
class IterationRecord:
    iteration: int
    best_latency_ms: float
    best_peak_percent: float | None
    evaluated: int
    correct: int


@dataclass
class SearchResult:
    search_id: int | None
    base: Candidate
    best: Candidate
    beam: list[Candidate]
    history: list[IterationRecord] = field(default_factory=list)
    evaluated: int = 0
    cancelled: bool = False
    seconds: float = 0.0
    lineage: list[Candidate] = field(default_factory=list)  # base first, best last
    failures: list[Candidate] = field(default_factory=list)  # candidates that failed to run or gave wrong results
    crashed: list[CrashedRewrite] = field(default_factory=list)  # plans whose executor raised (our bugs)

    @property
    def speedup(self) -> float:
        return self.base.latency_ms / self.best.latency_ms if self.best.latency_ms else 1.0


REPLAY_ITERATION = -1  # memory replay's candidates come before the first iteration, like the baseline


class BeamSearch:
    """The search loop. `agents` propose and write rewrites; `profiler` checks and times them."""

    def __init__(self, profiler: Profiler, agents: Sequence[Agent], config: SearchConfig,
                 memory: SearchMemory | None = None, on_event: Callable[[SearchEvent], None] | None = None,
                 cancel: threading.Event | None = None):
        if not agents:
            raise SearchError("a search needs at least one planner")
        self.config = config
        self.cancel = cancel or threading.Event()
        self.policy = BeamPolicy(agents, config)
        self.budget = TimeBudget(config.time_budget_s, config.workers)
        self.scheduler = EvaluationScheduler(profiler, config.workers, self.budget, self.cancel, config.screen)
        self.recorder = SearchRecorder(memory, on_event, config.iterations)
        self.evaluated: dict[str, Candidate] = {}  # every kernel evaluated, in the order it was
        self._base: Candidate | None = None

    # --- what the parts report ------------------------------------------------------------------------
    def _emit(self, kind: str, iteration: int, best: Candidate, message: str = "") -> None:
        self.recorder.emit(kind, iteration, best, self._base, len(self.evaluated), message)

    def _evaluated_one(self, best: Candidate) -> Callable[[Candidate, list[Candidate], str], None]:
        """What is done with each kernel the scheduler evaluates: kept, recorded, reported with the leader."""
        def done(candidate: Candidate, wave: list[Candidate], label: str) -> None:
            self.evaluated[candidate.hash] = candidate
            self.recorder.record(candidate)
            leader = fastest([best, *[c for c in wave if c.result.correct]])
            replayed = "memory replay: " if candidate.iteration == REPLAY_ITERATION else ""
            self._emit("evaluated", max(candidate.iteration, 0), leader,
                       f"{replayed}{candidate.origin}: {candidate.plan}{label}")
        return done

    def _checked(self, candidate: Candidate) -> None:
        """A kernel checked at the size it was timed: that run is its result from now on."""
        if self._base is not None and candidate.hash == self._base.hash:
            self._base = candidate  # the speed-up is measured between checked runs
        if candidate.hash in self.evaluated:
            self.evaluated[candidate.hash] = candidate
            self.recorder.record(candidate)

    def _evaluate_wave(self, drafts: list[DraftItem], task: TaskRef, hardware: str, iteration: int,
                       best: Candidate, bar: Bar) -> list[Candidate]:
        return self.scheduler.evaluate_all(drafts, task, hardware, iteration, best, bar, self._evaluated_one(best))

    def _verify(self, candidates: Sequence[Candidate], task: TaskRef, hardware: str) -> list[Candidate]:
        return self.scheduler.verify_all(candidates, task, hardware, self._checked)

    def _learn(self, parent: Candidate, child: Candidate, context: SearchContext) -> None:
        author = self.policy.agent_of(child) or self.policy.agents[0]
        self.recorder.learn(parent, child, child.hash in self.scheduler.verified, author, context)

    def _admit(self, candidates: Sequence[Candidate], task: TaskRef, hardware: str) -> list[Candidate]:
        """The best B correct candidates, every one verified at the timed size (one that fails there
        drops out and the next is considered)."""
        candidates, verified = list(candidates), self.scheduler.verified
        while True:
            pool = self.policy.best_correct(candidates)
            unverified = [c for c in pool if c.hash not in verified]
            if not unverified or self.cancel.is_set():
                return [c for c in pool if c.hash in verified]
            checked = {c.hash: c for c in self._verify(unverified, task, hardware)}
            if not any(c.hash in verified for c in unverified):  # none could be checked in the time left
                return [c for c in pool if c.hash in verified]
            candidates = [checked.get(c.hash, c) for c in candidates]

    # --- the loop ---------------------------------------------------------------------------------
    def run(self, source: str, task: TaskRef, hardware: str = "trn1", task_family: str | None = None,
            resume: int | None = None, kernel_name: str | None = None, kernel_label: str = "candidate.py"
            ) -> SearchResult:
        """Search from `source` (or resume a search of the memory). `kernel_name`: the kernel function when
        the file has several; every candidate is profiled as it, and only it is rewritten. `kernel_label`: the
        kernel's file by its absolute path, so every candidate imports the helpers beside it as the file does."""
        start_time = time.monotonic()
        self.scheduler.kernel_name, self.scheduler.kernel_label = kernel_name, kernel_label
        self.budget.start()
        name = task.key.split(":", 1)[0]
        context = SearchContext(task.key, task_family or name, hardware)
        beam, first_iteration = (self._resume(resume) if resume is not None
                                 else self._start(source, task, hardware, context))
        if resume is None and self.config.replay_steps:
            self.recorder.refresh(context)
            beam = self._replay(beam[0], context, task, hardware)
        history: list[IterationRecord] = []
        best = fastest(beam)
        stale = 0
        for iteration in range(first_iteration, self.config.iterations):
            if self.cancel.is_set():
                break
            if self.budget.out_of_time(True, best):
                self._emit("iteration", iteration, best, f"time budget of {self.config.time_budget_s:.0f} s spent")
                break
            self.recorder.refresh(context)
            drafts = self.policy.draft(beam, context, self.evaluated)
            if not drafts:
                self._emit("iteration", iteration, best, "no rewrite applies to any kernel in the beam")
                break
            children = self._iterate(beam, drafts, task, hardware, iteration, best)
            beam = self._admit([*beam, *children], task, hardware) or beam
            children = [self.evaluated.get(c.hash, c) for c in children]
            for child in children:
                parent = self.evaluated.get(child.parent or "")
                if parent is not None:
                    self._learn(parent, child, context)
            improved = beam[0].latency_ms < best.latency_ms
            best = beam[0] if improved else best
            stale = 0 if improved else stale + 1
            history.append(IterationRecord(iteration, best.latency_ms, best.result.peak_percent, len(children),
                                           sum(1 for c in children if c.result.correct)))
            if not self.cancel.is_set():
                self.recorder.finish_iteration(iteration, beam)
            self._emit("iteration", iteration, best, tally(children))
            if self.policy.stops(stale):
                break
        cancelled = self.cancel.is_set()
        self.recorder.finish(cancelled, best)
        self._emit("cancelled" if cancelled else "finished", len(history), best)
        assert self._base is not None
        failures = [c for c in self.evaluated.values() if verdict_of(c) in FAILED]
        return SearchResult(self.recorder.search_id, self._base, best, beam, history, len(self.evaluated) - 1,
                            cancelled, time.monotonic() - start_time, lineage(best, self.evaluated), failures,
                            list(self.policy.crashed))

    def _iterate(self, beam: list[Candidate], drafts: list[DraftItem], task: TaskRef, hardware: str,
                 iteration: int, best: Candidate) -> list[Candidate]:
        """One iteration's new kernels: the drafts, then the fixers' repairs of those that failed."""
        bar = self.policy.enters_beam(beam)
        children = self._evaluate_wave(drafts, task, hardware, iteration, best, bar)
        repairs = self.policy.repairable(children, self.evaluated)
        return children + self.scheduler.repair_all(repairs, self.evaluated, task, hardware, iteration, best, bar,
                                                    self._evaluated_one(best))

    def _replay(self, base: Candidate, context: SearchContext, task: TaskRef, hardware: str) -> list[Candidate]:
        """Greedy descent through remembered wins; returns the first beam (the best B correct kernels
        evaluated so far). Costs nothing when memory knows no winning rewrite for this family, and one
        wave of evaluations when what it knows does not carry over."""
        current, wave, before, kept = base, max(1, self.config.workers), len(self.evaluated), 0
        for _ in range(self.config.replay_steps):
            drafts = self.policy.draft([current], context, self.evaluated, recall=True)
            faster: list[Candidate] = []
            for start in range(0, len(drafts), wave):
                if self.cancel.is_set():
                    break
                children = self._evaluate_wave(drafts[start:start + wave], task, hardware, REPLAY_ITERATION,
                                               current, winning_bar(current))
                self._verify([c for c in children if wins_over(c, current)], task, hardware)
                children = [self.evaluated.get(c.hash, c) for c in children]
                for child in children:
                    self._learn(current, child, context)
                faster = [c for c in children if wins_over(c, current) and c.hash in self.scheduler.verified]
                if faster:
                    break
            if not faster:
                break
            current, kept = fastest(faster), kept + 1
        if len(self.evaluated) > before:
            self._emit("replayed", 0, current, f"memory replay kept {kept} remembered rewrite(s) of "
                       f"{len(self.evaluated) - before} evaluated")
        return self._admit(list(self.evaluated.values()), task, hardware) or [base]

    def _start(self, source: str, task: TaskRef, hardware: str, context: SearchContext
               ) -> tuple[list[Candidate], int]:
        result = self.scheduler.evaluate(source, task, hardware)
        base = Candidate(source, kernel_hash(source), result)
        if result.error:
            raise SearchError(f"the kernel to optimize fails: {result.error}")
        if result.latency_ms is None:  # not even timed within our limits: there is nothing to beat
            raise SearchError(f"the kernel to optimize cannot be timed here: {result.unchecked}")
        if not result.correct and not result.unchecked:
            raise SearchError(f"the kernel to optimize gives wrong results: {result.check_message}")
        self.evaluated[base.hash] = base
        self._base = base
        self.recorder.start(context, self.config, base, self.policy.agents)
        self._emit("started", 0, base, "baseline evaluated" if not result.unchecked else
                   f"baseline timed but unchecked ({result.unchecked}): the search goes on, every kernel it keeps "
                   "checked as far as the budget allows")
        return [base], 0

    def _resume(self, search_id: int) -> tuple[list[Candidate], int]:
        if self.recorder.memory is None:
            raise SearchError("resuming needs the optimization memory")
        iteration, beam_hashes, candidates = self.recorder.resume(search_id)
        self.evaluated.update((c.hash, c) for c in candidates)
        base = next((c for c in self.evaluated.values() if c.parent is None), None)
        if base is None:
            raise SearchError(f"search {search_id} has no recorded baseline to resume from")
        self._base = base
        beam = ([self.evaluated[h] for h in beam_hashes if h in self.evaluated]
                or self.policy.best_correct(self.evaluated.values()))
        self._emit("started", iteration + 1, fastest(beam), f"resumed search {search_id} after iteration {iteration}")
        return beam, iteration + 1
