"""AccelOpt's beam search: keep the best B kernels; for each, N plans; for each plan, K executor
samples; evaluate every new kernel (in parallel, sandboxed); keep the best B correct ones; repeat.

Before the first iteration, a memory replay walks greedily from the baseline through the rewrites
that won on this task family before (best remembered first, one wave of parallel evaluations at a
time, keeping each verified improvement), so a search on a kernel like one optimized before starts
where that one ended instead of rediscovering it.

Candidates are checked on a small variant of the task (a cheap pre-filter) and timed at full size.
Every kernel that enters the beam (and so may be offered as the result) or becomes a lesson in memory
is then checked again at the size it was timed, on one fresh seed, and that checked run is its timing:
a kernel whose control flow depends on the size, the seed or a trace-only run gains nothing.

Where a task has no small variant, every check is a full-size simulation (minutes) while a timing alone
takes seconds: each candidate is then timed unchecked first, and checked only if it is fast enough to
enter the beam (in the memory replay: to win), the fastest first; the rest are recorded unchecked.

Every evaluated candidate and every finished iteration is written to the optimization memory as
it happens, so a killed search resumes from its last finished iteration without re-evaluating
anything. Lessons from slow->fast pairs go to memory as experiences.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace

from ..agents.base import Agent, Candidate, Proposal, Repairer, SearchContext
from ..memory import POSITIVE_SPEEDUP, SearchMemory
from ..profiling import Profiler, ProfileResult, TaskRef
from ..profiling.profiler import kernel_hash
from .config import SearchConfig
from .events import SearchEvent


class SearchError(Exception):
    """The search cannot start (e.g. the baseline kernel is wrong) or cannot resume."""


@dataclass
class IterationRecord:
    iteration: int
    best_latency_ms: float
    best_peak_percent: float | None
    evaluated: int
    correct: int


VERDICT_WORDS = {"correct": "checked correct", "unchecked": "unchecked", "incorrect": "wrong", "failed": "failed"}
FAILED = ("incorrect", "failed")  # the verdicts a fixer may repair and `SearchResult.failures` lists


def verdict_of(candidate: Candidate) -> str:
    """"correct" (checked and right), "unchecked" (timed only, see SearchConfig.screen), "incorrect" (checked
    and wrong) or "failed" (the kernel did not run)."""
    result = candidate.result
    return ("failed" if result.error else "unchecked" if result.correct is None
            else "correct" if result.correct else "incorrect")


def tally(candidates: list[Candidate]) -> str:
    """`8 evaluated: 3 checked correct, 4 unchecked, 1 wrong`: each verdict counted apart (an unchecked
    kernel is not a correct one), those with none left out."""
    counts = Counter(verdict_of(c) for c in candidates)
    said = [f"{counts[verdict]} {words}" for verdict, words in VERDICT_WORDS.items() if counts[verdict]]
    return f"{len(candidates)} evaluated" + (f": {', '.join(said)}" if said else "")


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

    @property
    def speedup(self) -> float:
        return self.base.latency_ms / self.best.latency_ms if self.best.latency_ms else 1.0


REPLAY_ITERATION = -1  # memory replay's candidates come before the first iteration, like the baseline
EVALUATION_MARGIN = 1.25  # a child's evaluation may take this much longer than its parent's


def _wins_over(child: Candidate, parent: Candidate) -> bool:
    """A replayed rewrite is kept only as the win memory would teach (faster by POSITIVE_SPEEDUP): a
    greedy walk that kept every 0.1% step could end slower than the plain search."""
    return bool(child.result.correct and child.latency_ms and parent.latency_ms
                and parent.latency_ms / child.latency_ms > POSITIVE_SPEEDUP)


def _winning_bar(current: Candidate) -> Callable[[list[Candidate]], float]:
    """The memory replay's screen: a kernel is worth checking only if its timing is a win over `current`."""
    return lambda checked: current.latency_ms / POSITIVE_SPEEDUP


def _sort_key(candidate: Candidate) -> tuple[float, str]:
    return candidate.latency_ms, candidate.hash


class BeamSearch:
    """The search loop. `agents` propose and write rewrites; `profiler` checks and times them."""

    def __init__(self, profiler: Profiler, agents: Sequence[Agent], config: SearchConfig,
                 memory: SearchMemory | None = None, on_event: Callable[[SearchEvent], None] | None = None,
                 cancel: threading.Event | None = None):
        if not agents:
            raise SearchError("a search needs at least one planner")
        self.profiler = profiler
        self.agents = list(agents)
        self.config = config
        self.memory = memory
        self.on_event = on_event or (lambda event: None)
        self.cancel = cancel or threading.Event()
        self.evaluated: dict[str, Candidate] = {}
        self.kernel_name: str | None = None  # the kernel function, in a file of several (see `run`)
        # checks at the timed size; None when the profiler already checks at the size it times
        self.verifier = profiler.at_timed_size()
        self._verified: set[str] = set()
        self._base: Candidate | None = None
        self._deadline: float | None = None
        self._longest = {True: 0.0, False: 0.0}  # seconds the longest checked / unchecked evaluation took
        self._seconds: dict[tuple[str, bool], float] = {}  # seconds each kernel's check / timing took
        self._started = {True: 0, False: 0}  # checked / unchecked evaluations of candidates started
        self._checking = 0  # checks under way
        self._count_lock = threading.Lock()

    # --- the time budget ----------------------------------------------------------------------------
    def _out_of_time(self, check: bool = True, parent: Candidate | None = None) -> bool:
        """Whether an evaluation of a child of `parent` started now would end after the budget (see
        `_seconds_of`); a screen needs the time for its check too. A full-size check spreads its seeds over
        every core, so one started beside others shares them: it is counted as long as they all take
        together. The first wave of each kind always runs: a search that evaluates nothing is not a search."""
        if self._deadline is None or self._started[check] < max(1, self.config.workers):
            return False
        needed = self._check_seconds(parent) if check else (self._seconds_of(True, parent)
                                                            + self._seconds_of(False, parent))
        return time.monotonic() + needed > self._deadline

    def _seconds_of(self, check: bool, parent: Candidate | None) -> float:
        """How long a check (or a timing) of a child of `parent` may take alone: the parent's own, with a
        margin, where it was measured, else the longest so far. A rewrite changes a kernel's evaluation
        time less than kernels differ: a compiler-style baseline, its intermediates whole arrays, takes a
        third longer to check than its rewrites do (gqa_full: 150 s, then 110 s)."""
        longest = self._longest[check]
        own = self._seconds.get((parent.hash, check)) if parent is not None else None
        return longest if own is None else min(longest, own * EVALUATION_MARGIN)

    def _check_seconds(self, parent: Candidate | None = None) -> float:
        """How long a check of a child of `parent` started now may take: alone, times the checks that would
        share the cores with it."""
        return self._seconds_of(True, parent) * (1 + self._checking)

    def _spares_a_level(self, checks: int = 1, parent: Candidate | None = None) -> bool:
        """Whether `checks` checks of children of `parent` started now would still leave time for the next
        iteration: a timing and the check of its best kernel. A kernel that would not lead is worth checking
        (it widens the beam) only then: under a tight budget a level deeper is worth more than a wider beam."""
        if self._deadline is None:
            return True
        needed = checks * self._check_seconds(parent) + self._seconds_of(False, parent) + self._seconds_of(True, parent)
        return time.monotonic() + needed <= self._deadline

    def _timed(self, evaluate: Callable[[], ProfileResult], check: bool = True, kernel: str | None = None
               ) -> ProfileResult:
        start = time.monotonic()
        with self._count_lock:
            self._checking += check
        try:
            return evaluate()
        finally:
            with self._count_lock:
                self._checking -= check
            seconds = time.monotonic() - start
            self._longest[check] = max(self._longest[check], seconds)
            if kernel is not None:
                self._seconds[kernel, check] = seconds

    # --- evaluation -------------------------------------------------------------------------------
    def _evaluate(self, source: str, task: TaskRef, hardware: str, check: bool = True) -> ProfileResult:
        return self._timed(lambda: self.profiler.profile(source, task, hardware, check, kernel_name=self.kernel_name,
                                                         cancel=self.cancel), check, kernel_hash(source))

    def _screens(self) -> bool:
        """Whether a candidate is first timed unchecked: when the profiler checks at the size it times (no
        small variant to check on), a check is minutes of full-size simulation while the timing alone is
        seconds, and a kernel too slow to enter the beam gains nothing from being checked."""
        return self.config.screen and self.verifier is None

    def _evaluate_all(self, drafts: list[tuple[str, Candidate, Proposal]], task: TaskRef, hardware: str,
                      iteration: int, search_id: int | None, best: Candidate,
                      bar: Callable[[list[Candidate]], float] | None = None) -> list[Candidate]:
        """Evaluate new kernels in parallel; record each one in memory as soon as it is done.

        When screening, each kernel is timed unchecked first and checked only while its timing beats
        `bar(the candidates checked so far)`, the fastest first. A check waits for the wave's screens and
        the checks under way unless the kernel would lead (faster than every correct one so far and every
        one being checked): a check costs minutes and takes every core, and spending them on a modest
        kernel while a faster one is still being timed or checked can leave no time for that one, or for a
        level deeper. One left unchecked is recorded with its timing and no verdict."""
        screening = self._screens()
        bar = bar or (lambda done: float("inf"))
        todo = list(reversed(drafts))
        waiting: list[tuple[float, int, tuple[str, Candidate, Proposal], ProfileResult]] = []  # heap of screened
        order = itertools.count()  # equal timings: the kernel screened first is checked first
        done: list[Candidate] = []
        busy = [0]
        timing = [0]  # screens under way
        in_check: dict[int, float] = {}  # this wave's checks under way: the timing of each kernel, by its draft's id
        raised: list[BaseException] = []
        turn = threading.Condition()

        def finish(item: tuple[str, Candidate, Proposal], result: ProfileResult, label: str) -> None:
            source, parent, proposal = item
            candidate = Candidate(source, kernel_hash(source), result, parent.hash, proposal.description,
                                  proposal.origin, iteration)
            self.evaluated[candidate.hash] = candidate
            done.append(candidate)
            self._record(search_id, candidate)
            leader = min([best, *[c for c in done if c.result.correct]], key=_sort_key)
            replayed = "memory replay: " if iteration == REPLAY_ITERATION else ""
            self._emit("evaluated", max(iteration, 0), leader,
                       f"{replayed}{proposal.origin}: {proposal.description}{label}")

        def leave_unchecked(reason: str) -> None:
            while waiting:
                latency, _, item, result = heapq.heappop(waiting)
                finish(item, replace(result, check_message=reason.format(latency)), " (not checked)")

        def next_job() -> tuple[bool, tuple[str, Candidate, Proposal]] | None:
            """Under `turn`: the next (check?, draft) to run, or None when there is nothing left to do."""
            while not self.cancel.is_set() and not raised:
                correct = [c for c in done if c.result.correct]
                limit = bar(correct)
                if waiting and waiting[0][0] >= limit:  # the fastest waiting kernel cannot win: none can
                    leave_unchecked(f"not checked: timed at {{:.4g}} ms, no faster than the {limit:.4g} ms "
                                    "it needed to enter the beam")
                if waiting and self._out_of_time(True, waiting[0][2][1]):
                    leave_unchecked("not checked: timed at {:.4g} ms, no time left in the budget to check it")
                can_screen = bool(todo) and not self._out_of_time(not screening, todo[-1][1])
                # a kernel leads if it is faster than every correct one and every one being checked
                lead = min([min([best, *correct], key=_sort_key).latency_ms, *in_check.values()])
                leads = bool(waiting) and waiting[0][0] < lead
                pending = can_screen or timing[0] or in_check
                # while the wave is still being timed, a faster kernel may come: unless the budget holds its
                # check too, and a level deeper, the leader waits for the wave's timings
                parent = waiting[0][2][1] if waiting else None
                if leads and (can_screen or timing[0]) and not self._spares_a_level(2, parent):
                    leads = False
                if waiting and not leads and not pending and not self._spares_a_level(1, parent):
                    leave_unchecked("not checked: timed at {:.4g} ms, not faster than the best kernel, and the "
                                    "budget left is kept for the next iteration's best")
                if waiting and (leads or not pending):
                    self._started[True] += 1
                    latency, _, item, _ = heapq.heappop(waiting)
                    in_check[id(item)] = latency
                    return True, item
                if can_screen:
                    self._started[not screening] += 1
                    return not screening, todo.pop()
                if not busy[0]:
                    return None
                turn.wait()
            return None

        def work() -> None:
            while True:
                with turn:
                    job = next_job()
                    if job is None:
                        turn.notify_all()
                        return
                    busy[0] += 1
                    check, item = job
                    timing[0] += not check
                try:
                    result = self._evaluate(item[0], task, hardware, check)
                except BaseException as exc:  # raised again in the caller's thread; the others stop
                    with turn:
                        raised.append(exc)
                        busy[0] -= 1
                        turn.notify_all()
                    return
                with turn:  # one step with the count, so an idle worker never sees neither job nor result
                    busy[0] -= 1
                    timing[0] -= not check
                    in_check.pop(id(item), None)
                    if check or result.error:
                        if not (self.cancel.is_set() and result.error):  # killed mid-run: no verdict
                            finish(item, result, f" ({result.unchecked})" if result.unchecked else "")
                    else:
                        heapq.heappush(waiting, (result.latency_ms if result.latency_ms is not None else
                                                 float("inf"), next(order), item, result))
                    turn.notify_all()

        workers = [threading.Thread(target=work, daemon=True) for _ in range(max(1, self.config.workers))]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        if raised:
            raise raised[0]
        return done

    def _repair_all(self, children: Sequence[Candidate], task: TaskRef, hardware: str, iteration: int,
                    search_id: int | None, best: Candidate, bar: Callable[[list[Candidate]], float]
                    ) -> list[Candidate]:
        """AccelOpt's fixer in the loop: each child that failed to run or failed its check goes back to the
        agent that wrote it (one that can repair) with its error and the parent it rewrote; the repaired
        kernels are evaluated like any other, within the budget. Returns them."""
        failed = [c for c in children if verdict_of(c) in FAILED and c.parent in self.evaluated]
        repairs = [(c, agent) for c in failed if isinstance(agent := self._agent_of(c), Repairer)]
        if not repairs or self.cancel.is_set() or self._out_of_time(not self._screens()):
            return []

        def repair(item: tuple[Candidate, Repairer]) -> tuple[Candidate, str | None]:
            child, agent = item
            return child, agent.repair(child, self.evaluated[child.parent or ""]).source

        drafts: list[tuple[str, Candidate, Proposal]] = []
        seen = set(self.evaluated)
        with ThreadPoolExecutor(max_workers=max(1, self.config.workers)) as pool:
            for child, source in pool.map(repair, repairs):
                digest = kernel_hash(source) if source is not None else None
                if source is None or digest in seen:
                    continue
                seen.add(digest)
                why = (child.result.error or child.result.check_message or "wrong results").splitlines()[0]
                drafts.append((source, self.evaluated[child.parent or ""],
                               Proposal(f"{child.plan} (repaired after: {why[:160]})", child.origin)))
        return self._evaluate_all(drafts, task, hardware, iteration, search_id, best, bar) if drafts else []

    def _agent_of(self, candidate: Candidate) -> Agent | None:
        """The agent whose rewrite `candidate` is (its origin is `<agent name>:<detail>`)."""
        return next((a for a in self.agents if candidate.origin.split(":", 1)[0] == a.name), None)

    def _enters_beam(self, beam: Sequence[Candidate]) -> Callable[[list[Candidate]], float]:
        """The bar of the main loop's screen: the latency to beat to be among the best B correct kernels
        of the beam and the candidates checked so far (none while fewer than B)."""
        def bar(checked: list[Candidate]) -> float:
            times = sorted(c.latency_ms for c in [*beam, *checked] if c.result.correct)
            return times[self.config.beam_width - 1] if len(times) >= self.config.beam_width else float("inf")
        return bar

    def _verify_all(self, candidates: Sequence[Candidate], task: TaskRef, hardware: str,
                    search_id: int | None) -> list[Candidate]:
        """`candidates`, each checked at the size it was timed (in parallel): the checked run becomes its
        result, so what is kept is what was checked. A cancelled check leaves a candidate unverified."""
        verifier = self.verifier
        if verifier is None:
            self._verified.update(c.hash for c in candidates)
            return list(candidates)
        checked: dict[str, Candidate] = {}

        def one(candidate: Candidate) -> None:
            if self._out_of_time():
                return  # left unverified, so it is not kept
            result = self._timed(lambda: verifier.profile(candidate.source, task, hardware,
                                                          kernel_name=self.kernel_name, cancel=self.cancel),
                                 kernel=candidate.hash)
            if (self.cancel.is_set() and result.error) or result.unchecked:
                return  # left unverified, so it is not kept: our limits are no verdict on it
            if not result.correct:
                result.correct = False
                result.check_message = f"at the size it is timed: {result.error or result.check_message}"
            checked[candidate.hash] = replace(candidate, result=result)
            self._verified.add(candidate.hash)
            if self._base is not None and candidate.hash == self._base.hash:
                self._base = checked[candidate.hash]  # the speed-up is measured between checked runs
            if candidate.hash in self.evaluated:
                self.evaluated[candidate.hash] = checked[candidate.hash]
                self._record(search_id, checked[candidate.hash])

        with ThreadPoolExecutor(max_workers=max(1, self.config.workers)) as pool:
            list(pool.map(one, [c for c in candidates if c.hash not in self._verified]))
        return [checked.get(c.hash, c) for c in candidates]

    def _admit(self, candidates: Sequence[Candidate], task: TaskRef, hardware: str,
               search_id: int | None) -> list[Candidate]:
        """The best B correct candidates, every one verified at the timed size (one that fails there
        drops out and the next is considered)."""
        candidates = list(candidates)
        while True:
            pool = sorted({c.hash: c for c in candidates if c.result.correct}.values(),
                          key=_sort_key)[: self.config.beam_width]
            unverified = [c for c in pool if c.hash not in self._verified]
            if not unverified or self.cancel.is_set():
                return [c for c in pool if c.hash in self._verified]
            checked = {c.hash: c for c in self._verify_all(unverified, task, hardware, search_id)}
            if not any(c.hash in self._verified for c in unverified):  # none could be checked in the time left
                return [c for c in pool if c.hash in self._verified]
            candidates = [checked.get(c.hash, c) for c in candidates]

    # --- memory -----------------------------------------------------------------------------------
    def _record(self, search_id: int | None, c: Candidate) -> None:
        if self.memory is None or search_id is None:
            return
        self.memory.add_kernel(c.source)
        self.memory.record_candidate(search_id, c.iteration, c.hash, c.parent, c.plan, c.origin,
                                     c.result.to_dict(), verdict_of(c))

    def _learn(self, parent: Candidate, child: Candidate, context: SearchContext, search_id: int | None) -> None:
        """Turn a slow->fast (or fast->slow) pair into an experience; memory applies the thresholds. A
        speed-up is a lesson only once the faster kernel was checked at the size it was timed; a slow-down
        is one for a kernel left unchecked too (it was timed: too slow to be worth checking)."""
        verdict = child.result.correct
        if (self.memory is None or verdict is False or child.result.error or not parent.latency_ms
                or not child.latency_ms):
            return
        if child.latency_ms < parent.latency_ms and (verdict is None or child.hash not in self._verified):
            return
        agent = self._agent_of(child) or self.agents[0]
        speedup = parent.latency_ms / child.latency_ms
        self.memory.add_kernel(parent.source)
        self.memory.add_experience(task=context.task, task_family=context.task_family, hardware=context.hardware,
                                   slow_hash=parent.hash, fast_hash=child.hash, speedup=speedup, plan=child.plan,
                                   summary=agent.summarize(parent, child, context), origin=child.origin,
                                   backend=child.result.backend, search_id=search_id)

    # --- events -----------------------------------------------------------------------------------
    def _emit(self, kind: str, iteration: int, best: Candidate, message: str = "") -> None:
        base = self._base
        speedup = base.latency_ms / best.latency_ms if base is not None and best.latency_ms else None
        self.on_event(SearchEvent(kind, iteration, self.config.iterations, len(self.evaluated),
                                  best.result.latency_ms, best.result.peak_percent, speedup, message))

    # --- the loop ---------------------------------------------------------------------------------
    def run(self, source: str, task: TaskRef, hardware: str = "trn1", task_family: str | None = None,
            resume: int | None = None, kernel_name: str | None = None) -> SearchResult:
        """Search from `source` (or resume a search of the memory). `kernel_name`: the kernel function when
        the file has several; every candidate is profiled as it, and only it is rewritten."""
        start_time = time.monotonic()
        self.kernel_name = kernel_name
        if self.config.time_budget_s:
            self._deadline = start_time + self.config.time_budget_s
        name = task.key.split(":", 1)[0]
        context = SearchContext(task.key, task_family or name, hardware)
        search_id, beam, first_iteration = (self._resume(resume, task) if resume is not None
                                            else self._start(source, task, hardware, context))
        if resume is None and self.config.replay_steps:
            self._refresh_context(context)
            beam = self._replay(beam[0], context, task, hardware, search_id)
        history: list[IterationRecord] = []
        best = min(beam, key=_sort_key)
        stale = 0
        for iteration in range(first_iteration, self.config.iterations):
            if self.cancel.is_set():
                break
            if self._out_of_time(True, best):
                self._emit("iteration", iteration, best, f"time budget of {self.config.time_budget_s:.0f} s spent")
                break
            self._refresh_context(context)
            drafts = self._draft(beam, context)
            if not drafts:
                self._emit("iteration", iteration, best, "no rewrite applies to any kernel in the beam")
                break
            bar = self._enters_beam(beam)
            children = self._evaluate_all(drafts, task, hardware, iteration, search_id, best, bar)
            children += self._repair_all(children, task, hardware, iteration, search_id, best, bar)
            beam = self._admit([*beam, *children], task, hardware, search_id) or beam
            children = [self.evaluated.get(c.hash, c) for c in children]
            for child in children:
                parent = self.evaluated.get(child.parent or "")
                if parent is not None:
                    self._learn(parent, child, context, search_id)
            improved = beam[0].latency_ms < best.latency_ms
            best = beam[0] if improved else best
            stale = 0 if improved else stale + 1
            history.append(IterationRecord(iteration, best.latency_ms, best.result.peak_percent, len(children),
                                           sum(1 for c in children if c.result.correct)))
            if self.memory is not None and search_id is not None and not self.cancel.is_set():
                self.memory.finish_iteration(search_id, iteration, [c.hash for c in beam])
            self._emit("iteration", iteration, best, tally(children))
            if self.config.patience and stale >= self.config.patience:
                break
        cancelled = self.cancel.is_set()
        if self.memory is not None and search_id is not None:
            self.memory.finish_search(search_id, "cancelled" if cancelled else "finished", best.hash)
        self._emit("cancelled" if cancelled else "finished", len(history), best)
        assert self._base is not None
        failures = [c for c in self.evaluated.values() if verdict_of(c) in FAILED]
        return SearchResult(search_id, self._base, best, beam, history, len(self.evaluated) - 1, cancelled,
                            time.monotonic() - start_time, self._lineage(best), failures)

    def _replay(self, base: Candidate, context: SearchContext, task: TaskRef, hardware: str,
                search_id: int | None) -> list[Candidate]:
        """Greedy descent through remembered wins; returns the first beam (the best B correct kernels
        evaluated so far). Costs nothing when memory knows no winning rewrite for this family, and one
        wave of evaluations when what it knows does not carry over."""
        current, wave, before, kept = base, max(1, self.config.workers), len(self.evaluated), 0
        for _ in range(self.config.replay_steps):
            drafts = self._draft([current], context, recall=True)
            faster: list[Candidate] = []
            for start in range(0, len(drafts), wave):
                if self.cancel.is_set():
                    break
                children = self._evaluate_all(drafts[start:start + wave], task, hardware, REPLAY_ITERATION,
                                              search_id, current, _winning_bar(current))
                self._verify_all([c for c in children if _wins_over(c, current)], task, hardware, search_id)
                children = [self.evaluated.get(c.hash, c) for c in children]
                for child in children:
                    self._learn(current, child, context, search_id)
                faster = [c for c in children if _wins_over(c, current) and c.hash in self._verified]
                if faster:
                    break
            if not faster:
                break
            current, kept = min(faster, key=_sort_key), kept + 1
        if len(self.evaluated) > before:
            self._emit("replayed", 0, current, f"memory replay kept {kept} remembered rewrite(s) of "
                       f"{len(self.evaluated) - before} evaluated")
        return self._admit(list(self.evaluated.values()), task, hardware, search_id) or [base]

    def _best_evaluated(self) -> list[Candidate]:
        correct = [c for c in self.evaluated.values() if c.result.correct]
        return sorted(correct, key=_sort_key)[: self.config.beam_width]

    def _lineage(self, candidate: Candidate) -> list[Candidate]:
        chain = [candidate]
        while chain[-1].parent is not None and chain[-1].parent in self.evaluated and len(chain) <= len(self.evaluated):
            chain.append(self.evaluated[chain[-1].parent])
        return chain[::-1]

    def _start(self, source: str, task: TaskRef, hardware: str, context: SearchContext
               ) -> tuple[int | None, list[Candidate], int]:
        result = self._evaluate(source, task, hardware)
        base = Candidate(source, kernel_hash(source), result)
        if result.error:
            raise SearchError(f"the kernel to optimize fails: {result.error}")
        if result.latency_ms is None:  # not even timed within our limits: there is nothing to beat
            raise SearchError(f"the kernel to optimize cannot be timed here: {result.unchecked}")
        if not result.correct and not result.unchecked:
            raise SearchError(f"the kernel to optimize gives wrong results: {result.check_message}")
        self.evaluated[base.hash] = base
        self._base = base
        search_id = None
        if self.memory is not None:
            self.memory.add_kernel(source)
            search_id = self.memory.start_search(context.task, hardware, asdict(self.config), base.hash,
                                                 "+".join(a.name for a in self.agents))
            self._record(search_id, base)
        self._emit("started", 0, base, "baseline evaluated" if not result.unchecked else
                   f"baseline timed but unchecked ({result.unchecked}): the search goes on, every kernel it keeps "
                   "checked as far as the budget allows")
        return search_id, [base], 0

    def _resume(self, search_id: int, task: TaskRef) -> tuple[int, list[Candidate], int]:
        if self.memory is None:
            raise SearchError("resuming needs the optimization memory")
        state = self.memory.search_state(search_id)
        for record in state.candidates:
            source = self.memory.kernel_source(record.kernel_hash)
            if source is None or record.result is None:
                continue
            candidate = Candidate(source, record.kernel_hash, ProfileResult.from_dict(record.result),
                                  record.parent_hash, record.plan, record.origin, record.iteration)
            self.evaluated[candidate.hash] = candidate
        base = next((c for c in self.evaluated.values() if c.parent is None), None)
        if base is None:
            raise SearchError(f"search {search_id} has no recorded baseline to resume from")
        self._base = base
        beam = [self.evaluated[h] for h in state.beam if h in self.evaluated] or self._best_evaluated()
        self._emit("started", state.iteration + 1, min(beam, key=_sort_key),
                   f"resumed search {search_id} after iteration {state.iteration}")
        return search_id, beam, state.iteration + 1

    def _refresh_context(self, context: SearchContext) -> None:
        if self.memory is not None:
            context.experiences = self.memory.top_experiences(context.task_family, context.hardware)
            context.rule_stats = self.memory.rule_stats(context.task_family, context.hardware)

    def _draft(self, beam: Sequence[Candidate], context: SearchContext, recall: bool = False
               ) -> list[tuple[str, Candidate, Proposal]]:
        """N plans per beam kernel (taken in turn from each agent), K samples per plan; only kernels
        never evaluated before. `recall`: only the plans memory saw win (the agents' `recall`)."""
        per_parent: list[list[tuple[str, Candidate, Proposal]]] = []
        seen = set(self.evaluated)
        context.tried = {(c.parent, c.origin, c.plan) for c in self.evaluated.values() if c.parent is not None}
        for parent in beam:
            drafts: list[tuple[str, Candidate, Proposal]] = []
            per_parent.append(drafts)
            per_agent = [(a.recall if recall else a.propose)(parent, context, self.config.plans_per_candidate)
                         for a in self.agents]
            chosen: list[tuple[Agent, Proposal]] = []
            while len(chosen) < self.config.plans_per_candidate and any(per_agent):
                for agent, proposals in zip(self.agents, per_agent, strict=True):
                    if proposals and len(chosen) < self.config.plans_per_candidate:
                        chosen.append((agent, proposals.pop(0)))
            for agent, proposal in chosen:
                for draft in agent.realize(parent, proposal, self.config.samples_per_plan):
                    if draft.source is None:
                        continue
                    digest = kernel_hash(draft.source)
                    if digest not in seen:
                        seen.add(digest)
                        drafts.append((draft.source, parent, proposal))
        # each parent's best plan first, then each one's second...: under a time budget every beam
        # kernel gets its most promising rewrites evaluated before any gets its least
        return [d for rank in itertools.zip_longest(*per_parent) for d in rank if d is not None]
