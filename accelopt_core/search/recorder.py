"""The search's recorder: what a search leaves in the optimization memory, and the progress it reports.

Every evaluated candidate and every finished iteration is written to memory as it happens, so a killed
search resumes from its last finished iteration without re-evaluating anything. Lessons from slow->fast
pairs go to memory as experiences.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict

from ..agents.base import Agent, Candidate, SearchContext
from ..memory import SearchMemory
from ..profiling import ProfileResult
from .config import SearchConfig
from .events import SearchEvent
from .policy import verdict_of


class SearchRecorder:
    """Writes one search to `memory` (None: nothing is written) and sends its progress to `on_event`."""

    def __init__(self, memory: SearchMemory | None, on_event: Callable[[SearchEvent], None] | None,
                 iterations: int):
        self.memory = memory
        self.on_event = on_event or (lambda event: None)
        self.iterations = iterations
        self.search_id: int | None = None

    def start(self, context: SearchContext, config: SearchConfig, base: Candidate, planners: Sequence[Agent]
              ) -> None:
        """A new search of `base` in memory, under the settings and planners it runs with."""
        if self.memory is None:
            return
        self.memory.add_kernel(base.source)
        self.search_id = self.memory.start_search(context.task, context.hardware, asdict(config), base.hash,
                                                  "+".join(a.name for a in planners))
        self.record(base)

    def resume(self, search_id: int) -> tuple[int, list[str], list[Candidate]]:
        """The search `search_id` as memory holds it: its last finished iteration, its beam's kernel hashes and
        every candidate recorded with its source and result, in the order they were evaluated."""
        assert self.memory is not None, "resuming needs the optimization memory"
        state = self.memory.search_state(search_id)
        self.search_id = search_id
        candidates = []
        for record in state.candidates:
            source = self.memory.kernel_source(record.kernel_hash)
            if source is None or record.result is None:
                continue
            candidates.append(Candidate(source, record.kernel_hash, ProfileResult.from_dict(record.result),
                                        record.parent_hash, record.plan, record.origin, record.iteration))
        return state.iteration, list(state.beam), candidates

    def refresh(self, context: SearchContext) -> None:
        """What memory has learnt for this task family so far, for the agents' next plans."""
        if self.memory is not None:
            context.experiences = self.memory.top_experiences(context.task_family, context.hardware)
            context.rule_stats = self.memory.rule_stats(context.task_family, context.hardware)

    def record(self, candidate: Candidate) -> None:
        """One evaluated candidate (again, when a later check replaced its result)."""
        if self.memory is None or self.search_id is None:
            return
        self.memory.add_kernel(candidate.source)
        self.memory.record_candidate(self.search_id, candidate.iteration, candidate.hash, candidate.parent,
                                     candidate.plan, candidate.origin, candidate.result.to_dict(),
                                     verdict_of(candidate))

    def learn(self, parent: Candidate, child: Candidate, verified: bool, author: Agent,
              context: SearchContext) -> None:
        """Turn a slow->fast (or fast->slow) pair into an experience, in the words of `author`; memory applies
        the thresholds. A speed-up is a lesson only once the faster kernel was checked at the size it was
        timed (`verified`); a slow-down is one for a kernel left unchecked too (it was timed: too slow to be
        worth checking)."""
        verdict = child.result.correct
        if (self.memory is None or verdict is False or child.result.error or not parent.latency_ms
                or not child.latency_ms):
            return
        if child.latency_ms < parent.latency_ms and (verdict is None or not verified):
            return
        self.memory.add_kernel(parent.source)
        self.memory.add_experience(task=context.task, task_family=context.task_family, hardware=context.hardware,
                                   slow_hash=parent.hash, fast_hash=child.hash,
                                   speedup=parent.latency_ms / child.latency_ms, plan=child.plan,
                                   summary=author.summarize(parent, child, context), origin=child.origin,
                                   backend=child.result.backend, search_id=self.search_id)

    def finish_iteration(self, iteration: int, beam: Sequence[Candidate]) -> None:
        if self.memory is not None and self.search_id is not None:
            self.memory.finish_iteration(self.search_id, iteration, [c.hash for c in beam])

    def finish(self, cancelled: bool, best: Candidate) -> None:
        if self.memory is not None and self.search_id is not None:
            self.memory.finish_search(self.search_id, "cancelled" if cancelled else "finished", best.hash)

    def emit(self, kind: str, iteration: int, best: Candidate, base: Candidate | None, evaluated: int,
             message: str = "") -> None:
        """A progress event: `best` so far, its speed-up over `base`, `evaluated` kernels so far."""
        speedup = base.latency_ms / best.latency_ms if base is not None and best.latency_ms else None
        self.on_event(SearchEvent(kind, iteration, self.iterations, evaluated, best.result.latency_ms,
                                  best.result.peak_percent, speedup, message))
