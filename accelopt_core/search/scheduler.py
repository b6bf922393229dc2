"""The search's evaluation scheduler: runs candidates on the profiler from a pool of workers, within the time
budget, until cancelled; checks a kept kernel again at the size it was timed; sends failed rewrites to their
agents' fixers.

Where a task has no small variant, every check is a full-size simulation (minutes) while a timing alone
takes seconds: each candidate is then timed unchecked first, and checked only if it is fast enough to
enter the beam (the bar the policy sets), the fastest first; the rest are recorded unchecked.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from ..agents.base import Candidate, Proposal, Repairer
from ..profiling import Profiler, ProfileResult, TaskRef
from ..profiling.profiler import kernel_hash
from .policy import Bar, DraftItem, fastest

EVALUATION_MARGIN = 1.25  # a child's evaluation may take this much longer than its parent's

# what the scheduler reports for each kernel evaluated: (the candidate, the wave's candidates so far, a label)
OnEvaluated = Callable[[Candidate, list[Candidate], str], None]


class TimeBudget:
    """The search's wall-clock budget (None: no limit), and how long checks and timings have taken so far:
    after the first wave of each kind, no evaluation starts that would not end within it."""

    def __init__(self, seconds: float | None, workers: int):
        self.seconds = seconds
        self.workers = max(1, workers)
        self.deadline: float | None = None
        self.longest = {True: 0.0, False: 0.0}  # seconds the longest checked / unchecked evaluation took
        self.took: dict[tuple[str, bool], float] = {}  # seconds each kernel's check / timing took
        self.started = {True: 0, False: 0}  # checked / unchecked evaluations of candidates started
        self.checking = 0  # checks under way
        self._lock = threading.Lock()

    def start(self) -> None:
        """The clock starts now."""
        if self.seconds:
            self.deadline = time.monotonic() + self.seconds

    def out_of_time(self, check: bool = True, parent: Candidate | None = None) -> bool:
        """Whether an evaluation of a child of `parent` started now would end after the budget (see
        `seconds_of`); a screen needs the time for its check too. A full-size check spreads its seeds over
        every core, so one started beside others shares them: it is counted as long as they all take
        together. The first wave of each kind always runs: a search that evaluates nothing is not a search."""
        if self.deadline is None or self.started[check] < self.workers:
            return False
        needed = self.check_seconds(parent) if check else (self.seconds_of(True, parent)
                                                           + self.seconds_of(False, parent))
        return time.monotonic() + needed > self.deadline

    def seconds_of(self, check: bool, parent: Candidate | None) -> float:
        """How long a check (or a timing) of a child of `parent` may take alone: the parent's own, with a
        margin, where it was measured, else the longest so far. A rewrite changes a kernel's evaluation
        time less than kernels differ: a compiler-style baseline, its intermediates whole arrays, takes a
        third longer to check than its rewrites do (gqa_full: 150 s, then 110 s)."""
        longest = self.longest[check]
        own = self.took.get((parent.hash, check)) if parent is not None else None
        return longest if own is None else min(longest, own * EVALUATION_MARGIN)

    def check_seconds(self, parent: Candidate | None = None) -> float:
        """How long a check of a child of `parent` started now may take: alone, times the checks that would
        share the cores with it."""
        return self.seconds_of(True, parent) * (1 + self.checking)

    def spares_a_level(self, checks: int = 1, parent: Candidate | None = None) -> bool:
        """Whether `checks` checks of children of `parent` started now would still leave time for the next
        iteration: a timing and the check of its best kernel. A kernel that would not lead is worth checking
        (it widens the beam) only then: under a tight budget a level deeper is worth more than a wider beam."""
        if self.deadline is None:
            return True
        needed = checks * self.check_seconds(parent) + self.seconds_of(False, parent) + self.seconds_of(True, parent)
        return time.monotonic() + needed <= self.deadline

    def timed(self, evaluate: Callable[[], ProfileResult], check: bool = True, kernel: str | None = None
              ) -> ProfileResult:
        """`evaluate()`, counted among the checks under way while it runs and timed for the estimates."""
        start = time.monotonic()
        with self._lock:
            self.checking += check
        try:
            return evaluate()
        finally:
            with self._lock:
                self.checking -= check
            seconds = time.monotonic() - start
            self.longest[check] = max(self.longest[check], seconds)
            if kernel is not None:
                self.took[kernel, check] = seconds


class EvaluationScheduler:
    """Evaluates kernels on `profiler` with `workers` threads, within `budget`, until `cancel` is set.
    `verified`: the kernels checked at the size they were timed (only those may be kept)."""

    def __init__(self, profiler: Profiler, workers: int, budget: TimeBudget, cancel: threading.Event,
                 screen: bool = True):
        self.profiler = profiler
        self.workers = max(1, workers)
        self.budget = budget
        self.cancel = cancel
        self.kernel_name: str | None = None  # the kernel function, in a file of several
        self.kernel_label = "candidate.py"  # the user's file, by its absolute path: its folder's helpers import
        # checks at the timed size; None when the profiler already checks at the size it times
        self.verifier = profiler.at_timed_size()
        # when the profiler checks at the size it times (no small variant to check on), a check is minutes of
        # full-size simulation while the timing alone is seconds: a kernel too slow to enter the beam is not checked
        self.screens = screen and self.verifier is None
        self.verified: set[str] = set()

    def evaluate(self, source: str, task: TaskRef, hardware: str, check: bool = True) -> ProfileResult:
        return self.budget.timed(lambda: self.profiler.profile(source, task, hardware, check,
                                                               kernel_name=self.kernel_name,
                                                               kernel_label=self.kernel_label, cancel=self.cancel),
                                 check, kernel_hash(source))

    def evaluate_all(self, drafts: list[DraftItem], task: TaskRef, hardware: str, iteration: int, best: Candidate,
                     bar: Bar, on_evaluated: OnEvaluated) -> list[Candidate]:
        """Evaluate new kernels in parallel; `on_evaluated` hears of each one as soon as it is done.

        When screening, each kernel is timed unchecked first and checked only while its timing beats
        `bar(the candidates checked so far)`, the fastest first. A check waits for the wave's screens and
        the checks under way unless the kernel would lead (faster than every correct one so far and every
        one being checked): a check costs minutes and takes every core, and spending them on a modest
        kernel while a faster one is still being timed or checked can leave no time for that one, or for a
        level deeper. One left unchecked is recorded with its timing and no verdict."""
        budget, screening = self.budget, self.screens
        todo = list(reversed(drafts))
        waiting: list[tuple[float, int, DraftItem, ProfileResult]] = []  # heap of screened
        order = itertools.count()  # equal timings: the kernel screened first is checked first
        done: list[Candidate] = []
        busy = [0]
        timing = [0]  # screens under way
        in_check: dict[int, float] = {}  # this wave's checks under way: the timing of each kernel, by its draft's id
        raised: list[BaseException] = []
        turn = threading.Condition()

        def finish(item: DraftItem, result: ProfileResult, label: str) -> None:
            source, parent, proposal = item
            candidate = Candidate(source, kernel_hash(source), result, parent.hash, proposal.description,
                                  proposal.origin, iteration)
            done.append(candidate)
            on_evaluated(candidate, done, label)

        def leave_unchecked(reason: str) -> None:
            while waiting:
                latency, _, item, result = heapq.heappop(waiting)
                finish(item, replace(result, check_message=reason.format(latency)), " (not checked)")

        def next_job() -> tuple[bool, DraftItem] | None:
            """Under `turn`: the next (check?, draft) to run, or None when there is nothing left to do."""
            while not self.cancel.is_set() and not raised:
                correct = [c for c in done if c.result.correct]
                limit = bar(correct)
                if waiting and waiting[0][0] >= limit:  # the fastest waiting kernel cannot win: none can
                    leave_unchecked(f"not checked: timed at {{:.4g}} ms, no faster than the {limit:.4g} ms "
                                    "it needed to enter the beam")
                if waiting and budget.out_of_time(True, waiting[0][2][1]):
                    leave_unchecked("not checked: timed at {:.4g} ms, no time left in the budget to check it")
                can_screen = bool(todo) and not budget.out_of_time(not screening, todo[-1][1])
                # a kernel leads if it is faster than every correct one and every one being checked
                lead = min([fastest([best, *correct]).latency_ms, *in_check.values()])
                leads = bool(waiting) and waiting[0][0] < lead
                pending = can_screen or timing[0] or in_check
                # while the wave is still being timed, a faster kernel may come: unless the budget holds its
                # check too, and a level deeper, the leader waits for the wave's timings
                parent = waiting[0][2][1] if waiting else None
                if leads and (can_screen or timing[0]) and not budget.spares_a_level(2, parent):
                    leads = False
                if waiting and not leads and not pending and not budget.spares_a_level(1, parent):
                    leave_unchecked("not checked: timed at {:.4g} ms, not faster than the best kernel, and the "
                                    "budget left is kept for the next iteration's best")
                if waiting and (leads or not pending):
                    budget.started[True] += 1
                    latency, _, item, _ = heapq.heappop(waiting)
                    in_check[id(item)] = latency
                    return True, item
                if can_screen:
                    budget.started[not screening] += 1
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
                    result = self.evaluate(item[0], task, hardware, check)
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

        workers = [threading.Thread(target=work, daemon=True) for _ in range(self.workers)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        if raised:
            raise raised[0]
        return done

    def verify_all(self, candidates: Sequence[Candidate], task: TaskRef, hardware: str,
                   on_checked: Callable[[Candidate], None]) -> list[Candidate]:
        """`candidates`, each checked at the size it was timed (in parallel): the checked run becomes its
        result, so what is kept is what was checked; `on_checked` hears of each as it is done. A cancelled
        check, or one our limits stop, leaves a candidate unverified."""
        verifier = self.verifier
        if verifier is None:
            self.verified.update(c.hash for c in candidates)
            return list(candidates)
        checked: dict[str, Candidate] = {}

        def one(candidate: Candidate) -> None:
            if self.budget.out_of_time():
                return  # left unverified, so it is not kept
            result = self.budget.timed(lambda: verifier.profile(candidate.source, task, hardware,
                                                                kernel_name=self.kernel_name,
                                                                kernel_label=self.kernel_label, cancel=self.cancel),
                                       kernel=candidate.hash)
            if (self.cancel.is_set() and result.error) or result.unchecked:
                return  # left unverified, so it is not kept: our limits are no verdict on it
            if not result.correct:
                result.correct = False
                result.check_message = f"at the size it is timed: {result.error or result.check_message}"
            checked[candidate.hash] = replace(candidate, result=result)
            self.verified.add(candidate.hash)
            on_checked(checked[candidate.hash])

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            list(pool.map(one, [c for c in candidates if c.hash not in self.verified]))
        return [checked.get(c.hash, c) for c in candidates]

    def repair_all(self, repairs: Sequence[tuple[Candidate, Repairer]], evaluated: Mapping[str, Candidate],
                   task: TaskRef, hardware: str, iteration: int, best: Candidate, bar: Bar,
                   on_evaluated: OnEvaluated) -> list[Candidate]:
        """AccelOpt's fixer in the loop: each failed child goes back to the agent that wrote it with its error
        and the parent it rewrote; the repaired kernels are evaluated like any other, within the budget.
        Returns them."""
        if not repairs or self.cancel.is_set() or self.budget.out_of_time(not self.screens):
            return []

        def repair(item: tuple[Candidate, Repairer]) -> tuple[Candidate, str | None]:
            child, agent = item
            return child, agent.repair(child, evaluated[child.parent or ""]).source

        drafts: list[DraftItem] = []
        seen = set(evaluated)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            for child, source in pool.map(repair, repairs):
                digest = kernel_hash(source) if source is not None else None
                if source is None or digest in seen:
                    continue
                seen.add(digest)
                why = (child.result.error or child.result.check_message or "wrong results").splitlines()[0]
                drafts.append((source, evaluated[child.parent or ""],
                               Proposal(f"{child.plan} (repaired after: {why[:160]})", child.origin)))
        return self.evaluate_all(drafts, task, hardware, iteration, best, bar, on_evaluated) if drafts else []
