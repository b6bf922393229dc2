"""The beam policy: which kernels the search keeps and which rewrites it tries next.

Everything here decides from candidates already evaluated and from what the agents propose; nothing here
runs a kernel, waits on a thread or writes memory, so each decision is testable with plain candidates.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..agents.base import Agent, Candidate, Proposal, Repairer, SearchContext
from ..memory import POSITIVE_SPEEDUP
from ..profiling.profiler import kernel_hash
from .config import SearchConfig

DraftItem = tuple[str, Candidate, Proposal]  # a rewrite to evaluate: its source, the kernel it rewrote, the plan
Bar = Callable[[list[Candidate]], float]  # the latency a kernel must beat, given the candidates checked so far

VERDICT_WORDS = {"correct": "checked correct", "unchecked": "unchecked", "incorrect": "wrong", "failed": "failed"}
FAILED = ("incorrect", "failed")  # the verdicts a fixer may repair and `SearchResult.failures` lists


@dataclass(frozen=True)
class CrashedRewrite:
    """A plan whose executor raised instead of writing a kernel or saying why it could not: a bug of ours, kept
    so the search's results name it (`origin`, e.g. "rule:balance_engines"; the plan; the exception)."""

    origin: str
    plan: str
    error: str


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


def sort_key(candidate: Candidate) -> tuple[float, str]:
    """Fastest first; equal latencies in hash order, so the beam does not depend on evaluation order."""
    return candidate.latency_ms, candidate.hash


def fastest(candidates: Iterable[Candidate]) -> Candidate:
    return min(candidates, key=sort_key)


def wins_over(child: Candidate, parent: Candidate) -> bool:
    """A replayed rewrite is kept only as the win memory would teach (faster by POSITIVE_SPEEDUP): a
    greedy walk that kept every 0.1% step could end slower than the plain search."""
    return bool(child.result.correct and child.latency_ms and parent.latency_ms
                and parent.latency_ms / child.latency_ms > POSITIVE_SPEEDUP)


def winning_bar(current: Candidate) -> Bar:
    """The memory replay's screen: a kernel is worth checking only if its timing is a win over `current`."""
    return lambda checked: current.latency_ms / POSITIVE_SPEEDUP


def lineage(candidate: Candidate, evaluated: Mapping[str, Candidate]) -> list[Candidate]:
    """`candidate` and the kernels it was rewritten from, the baseline first (as far as `evaluated` knows)."""
    chain = [candidate]
    while chain[-1].parent is not None and chain[-1].parent in evaluated and len(chain) <= len(evaluated):
        chain.append(evaluated[chain[-1].parent])
    return chain[::-1]


class BeamPolicy:
    """Beam width B, N plans per kernel taken in turn from each agent, K samples per plan (see SearchConfig)."""

    def __init__(self, agents: Sequence[Agent], config: SearchConfig):
        self.agents = list(agents)
        self.config = config
        self.crashed: list[CrashedRewrite] = []

    def best_correct(self, candidates: Iterable[Candidate]) -> list[Candidate]:
        """The B fastest correct candidates, each kernel once: the beam, before verification."""
        return sorted({c.hash: c for c in candidates if c.result.correct}.values(), key=sort_key)[
            : self.config.beam_width]

    def enters_beam(self, beam: Sequence[Candidate]) -> Bar:
        """The bar of the main loop's screen: the latency to beat to be among the best B correct kernels
        of the beam and the candidates checked so far (none while fewer than B)."""
        def bar(checked: list[Candidate]) -> float:
            times = sorted(c.latency_ms for c in [*beam, *checked] if c.result.correct)
            return times[self.config.beam_width - 1] if len(times) >= self.config.beam_width else float("inf")
        return bar

    def stops(self, iterations_without_gain: int) -> bool:
        """Patience: stop after this many iterations found no faster kernel (never when patience is 0)."""
        return bool(self.config.patience) and iterations_without_gain >= self.config.patience

    def agent_of(self, candidate: Candidate) -> Agent | None:
        """The agent whose rewrite `candidate` is (its origin is `<agent name>:<detail>`)."""
        return next((a for a in self.agents if candidate.origin.split(":", 1)[0] == a.name), None)

    def repairable(self, children: Sequence[Candidate], evaluated: Mapping[str, Candidate]
                   ) -> list[tuple[Candidate, Repairer]]:
        """The children that failed to run or failed their check, each with the agent that wrote it when that
        agent can repair (and the kernel it rewrote is known)."""
        failed = [c for c in children if verdict_of(c) in FAILED and c.parent in evaluated]
        return [(c, agent) for c in failed if isinstance(agent := self.agent_of(c), Repairer)]

    def draft(self, beam: Sequence[Candidate], context: SearchContext, evaluated: Mapping[str, Candidate],
              recall: bool = False) -> list[DraftItem]:
        """N plans per beam kernel (taken in turn from each agent), K samples per plan; only kernels
        never evaluated before. `recall`: only the plans memory saw win (the agents' `recall`)."""
        per_parent: list[list[DraftItem]] = []
        seen = set(evaluated)
        context.tried = {(c.parent, c.origin, c.plan) for c in evaluated.values() if c.parent is not None}
        for parent in beam:
            drafts: list[DraftItem] = []
            per_parent.append(drafts)
            for agent, proposal in self._plans(parent, context, recall):
                for draft in agent.realize(parent, proposal, self.config.samples_per_plan):
                    if draft.source is None:
                        if draft.crashed:
                            self.crashed.append(CrashedRewrite(proposal.origin, proposal.description,
                                                               draft.error or ""))
                        continue
                    digest = kernel_hash(draft.source)
                    if digest not in seen:
                        seen.add(digest)
                        drafts.append((draft.source, parent, proposal))
        # each parent's best plan first, then each one's second...: under a time budget every beam
        # kernel gets its most promising rewrites evaluated before any gets its least
        return [d for rank in itertools.zip_longest(*per_parent) for d in rank if d is not None]

    def _plans(self, parent: Candidate, context: SearchContext, recall: bool) -> list[tuple[Agent, Proposal]]:
        """Up to N plans for `parent`, the agents' best first, taken from each agent in turn."""
        wanted = self.config.plans_per_candidate
        per_agent = [(a.recall if recall else a.propose)(parent, context, wanted) for a in self.agents]
        chosen: list[tuple[Agent, Proposal]] = []
        while len(chosen) < wanted and any(per_agent):
            for agent, proposals in zip(self.agents, per_agent, strict=True):
                if proposals and len(chosen) < wanted:
                    chosen.append((agent, proposals.pop(0)))
        return chosen
