"""AccelOpt's LLM agents as one search agent: the planner proposes, the executor writes (the fixer
repairs what fails the cheap checks), the summarizer turns slow->fast pairs into lessons.

Every failure is a value, not an exception: a failed call or an unusable reply becomes a `Draft` with
its reason (also kept in `notes`), so the search goes on. When the budget is spent, or the endpoint
refuses the key or model, the agent stops asking: it proposes nothing more, the beam search finds no
new drafts and ends with its best kernel so far.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from ...config import LLMSettings
from ...memory.experiences import classify
from ..base import Candidate, Draft, Proposal, SearchContext
from . import prompts
from .checks import same_program, static_problem
from .client import BudgetExceeded, LLMClient, LLMError, LLMFatalError, Usage
from .parsing import extract_code, extract_lesson, extract_plan, normalized

log = logging.getLogger("accelopt.llm")
T = TypeVar("T")
NOTES_KEPT = 500


@dataclass(frozen=True)
class Note:
    """Something that went wrong (or was skipped), for the user and for tests: which agent, about what."""

    role: str
    subject: str
    reason: str


@dataclass(frozen=True)
class LLMPlan:
    """The LLM planner's plan, its title and text (a rule's is rules.base.Plan), carried in Proposal.payload to
    the executor."""

    title: str
    text: str


class LLMAgent:
    """Planner, executor, summarizer and fixer over one OpenAI-compatible endpoint.

    `prefetch` starts the executor samples for every proposed plan at once (within the concurrency
    limit), because the beam search realizes plans one after another; samples of plans the search does
    not pick are cancelled if they have not started. Turn it off when another agent shares the search
    and LLM cost matters more than wall time."""

    name = "llm"

    def __init__(self, settings: LLMSettings, client: LLMClient | None = None, prefetch: bool = True):
        self.settings = settings
        self.client = client or LLMClient(settings)
        self.prefetch = prefetch
        self.notes: deque[Note] = deque(maxlen=NOTES_KEPT)
        self.stop_reason: str | None = None
        self._pool = ThreadPoolExecutor(max_workers=max(1, settings.max_concurrency), thread_name_prefix="llm")
        self._pending: dict[int, list[Future[Draft]]] = {}  # id(plan) -> prefetched samples
        self._summaries: dict[int, int] = {}  # iteration -> summarizer calls made
        self._samples_hint = 1  # samples to prefetch per plan: the search's K once known
        self._task = ""  # the task of the current search (SearchContext.task)
        self._lock = threading.Lock()

    # --- lifecycle and reporting -----------------------------------------------------------------
    def close(self) -> None:
        """Cancel queued work and let running calls finish in the background."""
        self._cancel_unclaimed()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> LLMAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def origin(self) -> str:
        return f"llm:{self.settings.for_role('planner').model}"

    def usage(self) -> Usage:
        return self.client.usage()

    def usage_by_role(self) -> dict[str, Usage]:
        return self.client.usage_by_role()

    def usage_line(self) -> str:
        """One line for the CLI's summary."""
        u = self.usage()
        cost = f"${u.cost_usd:.4f}" + (" (some calls unpriced)" if u.unpriced_calls else "")
        text = (f"LLM: {u.calls} calls ({u.failures} failed, {u.retries} retries), {u.tokens_in:,} tokens in, "
                f"{u.tokens_out:,} out, {cost}")
        return text + (f"; stopped: {self.stop_reason}" if self.stop_reason else "")

    def _note(self, role: str, subject: str, reason: str) -> None:
        self.notes.append(Note(role, subject, reason))
        log.info("%s (%s): %s", role, subject, reason)

    def _call(self, role: str, prompt: prompts.Prompt, subject: str) -> str | None:
        """One call's text, or None (with a note) when it fails; a spent budget or a refusing endpoint
        stops the agent for the rest of the search."""
        if self.stop_reason:
            return None
        try:
            return self.client.complete(role, prompt.system, prompt.user).text
        except BudgetExceeded as exc:
            self._stop(f"budget: {exc}")
        except LLMFatalError as exc:
            self._stop(f"the endpoint refused the request: {exc}")
        except LLMError as exc:
            self._note(role, subject, str(exc))
        return None

    def _stop(self, reason: str) -> None:
        with self._lock:
            first = self.stop_reason is None
            self.stop_reason = self.stop_reason or reason
        if first:
            self._note("agent", "search", f"no more LLM calls: {reason}")

    def _parallel(self, jobs: list[Callable[[], T]]) -> list[T]:
        futures = [self._pool.submit(job) for job in jobs]
        return [f.result() for f in futures]

    # --- planner ---------------------------------------------------------------------------------
    def propose(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        """`count` planner calls in parallel; identical plans are kept once."""
        self._cancel_unclaimed()
        if self.stop_reason or count <= 0:
            return []
        self._task = context.task

        def plan_call(i: int) -> LLMPlan | None:
            reply = self._call("planner", prompts.planner_prompt(parent, context, i, count), f"plan {i + 1}")
            if reply is None:
                return None
            parsed = extract_plan(reply)
            if parsed is None:
                self._note("planner", f"plan {i + 1}", "the reply holds no plan")
                return None
            return LLMPlan(parsed.title, parsed.text)

        plans = self._parallel([lambda i=i: plan_call(i) for i in range(count)])
        proposals: list[Proposal] = []
        seen: set[str] = set()
        for rank, plan in enumerate(plans):
            if plan is None:
                continue
            key = normalized(plan.text)
            if key in seen:
                self._note("planner", plan.title, "duplicate of an earlier plan: dropped")
                continue
            seen.add(key)
            proposals.append(Proposal(plan.title, self.origin, plan, priority=-rank))
        if self.prefetch:
            for proposal in proposals:
                self._start_samples(parent, proposal)
        return proposals

    # --- executor (+ fixer) ----------------------------------------------------------------------
    def realize(self, parent: Candidate, proposal: Proposal, samples: int) -> list[Draft]:
        """K executor samples for one plan; samples that fail the cheap checks go to the fixer."""
        plan = proposal.payload
        if not isinstance(plan, LLMPlan):
            return [Draft(None, "not a plan of this agent")]
        self._samples_hint = max(1, samples)
        with self._lock:
            futures = self._pending.pop(id(plan), None)
        if futures is None or len(futures) < samples:
            futures = (futures or []) + [self._pool.submit(self._sample, parent, plan)
                                         for _ in range(samples - len(futures or []))]
        drafts = []
        for future in futures[:samples]:
            if future.cancelled():
                drafts.append(Draft(None, "cancelled"))
                continue
            drafts.append(future.result())
        for future in futures[samples:]:
            future.cancel()
        return drafts

    def _start_samples(self, parent: Candidate, proposal: Proposal) -> None:
        futures = [self._pool.submit(self._sample, parent, proposal.payload) for _ in range(self._samples_hint)]
        with self._lock:
            self._pending[id(proposal.payload)] = futures

    def expect_samples(self, samples: int) -> None:
        """The search's K, so prefetching starts the right number of samples per plan from the first plan
        on (otherwise it learns K from the first realize)."""
        self._samples_hint = max(1, samples)

    def _cancel_unclaimed(self) -> None:
        """Prefetched samples for plans the search did not pick: cancel what has not started."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for futures in pending.values():
            for future in futures:
                future.cancel()

    def _sample(self, parent: Candidate, plan: LLMPlan) -> Draft:
        """One executor call, checked; the fixer gets what fails the checks. Never raises."""
        try:
            return self._sample_unsafe(parent, plan)
        except Exception as exc:  # a bug here must cost one sample, not the search
            log.exception("executor sample for %r failed", plan.title)
            self._note("executor", plan.title, f"internal error: {type(exc).__name__}: {exc}")
            return Draft(None, f"internal error: {type(exc).__name__}: {exc}")

    def _sample_unsafe(self, parent: Candidate, plan: LLMPlan) -> Draft:
        task = self._task or parent.result.task or ""
        reply = self._call("executor", prompts.executor_prompt(parent, plan.text, task), plan.title)
        if reply is None:
            return Draft(None, self._last_reason("executor", plan.title, "the executor call failed"))
        found = extract_code(reply)
        if found.code is None:
            reason = f"executor: {found.reason}"
            self._note("executor", plan.title, reason)
            return Draft(None, reason)
        return self._checked(found.code, parent, plan, task)

    def _checked(self, source: str, parent: Candidate, plan: LLMPlan, task: str) -> Draft:
        if same_program(source, parent.source):
            self._note("executor", plan.title, "the kernel came back unchanged")
            return Draft(None, "executor: the kernel came back unchanged")
        problem = static_problem(source, parent.source)
        if problem is None:
            return Draft(source)
        self._note("executor", plan.title, f"rejected before running: {problem}")
        return self.fix(source, problem, parent.source, plan.text, task)

    def fix(self, source: str, error: str, reference: str, plan: str = "", task: str = "") -> Draft:
        """Up to `fixer_tries` fixer calls for a kernel and its error; a Draft with the repaired kernel, or
        with the last reason it is still broken. Also for the search, with a checker's error message.
        `reference` is the last working version; `task` a task name or reference path (see task_brief)."""
        tries = max(0, self.settings.fixer_tries)
        last = error
        for attempt in range(1, tries + 1):
            prompt = prompts.fixer_prompt(source, error, reference, plan, task, attempt, tries)
            reply = self._call("fixer", prompt, f"fix {attempt}")
            if reply is None:
                return Draft(None, self._last_reason("fixer", f"fix {attempt}", "the fixer call failed"))
            found = extract_code(reply)
            if found.code is None:
                last = f"fixer: {found.reason}"
                self._note("fixer", f"fix {attempt}", last)
                continue
            if same_program(found.code, reference):
                last = "fixer: returned the last working version unchanged"
                self._note("fixer", f"fix {attempt}", last)
                return Draft(None, last)
            problem = static_problem(found.code, reference)
            if problem is None:
                return Draft(found.code)
            self._note("fixer", f"fix {attempt}", f"still broken: {problem}")
            source, error, last = found.code, problem, problem
        return Draft(None, f"not repaired after {tries} fixer tries: {last}" if tries else last)

    def repair(self, failed: Candidate, parent: Candidate) -> Draft:
        """The fixer for a candidate the search evaluated: a hardware-rule or load error with its line,
        or wrong results with the checker's message; `parent` is the working kernel it rewrote."""
        result = failed.result
        error = result.error or (f"wrong results: {result.check_message}" if result.check_message else
                                 "the kernel's results do not match the reference")
        return self.fix(failed.source, error, parent.source, failed.plan, self._task or result.task or "")

    def _last_reason(self, role: str, subject: str, default: str) -> str:
        if self.stop_reason:
            return f"{role}: {self.stop_reason}"
        last = next((n for n in reversed(self.notes) if n.role == role and n.subject == subject), None)
        return last.reason if last else default

    # --- summarizer ------------------------------------------------------------------------------
    def recall(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        """Nothing to replay without asking the model: lessons reach it through the planner prompt."""
        return []

    def summarize(self, slow: Candidate, fast: Candidate, context: SearchContext) -> str:
        """A 2-4 sentence lesson from the model; a plain template sentence when the pair is in the neutral
        band (memory will not keep it), past the per-iteration bound, or when the model is unavailable."""
        speedup = slow.latency_ms / fast.latency_ms if fast.latency_ms else 1.0
        fallback = self._template_lesson(slow, fast, context, speedup)
        if classify(speedup) is None or self.stop_reason:
            return fallback
        with self._lock:
            made = self._summaries.get(fast.iteration, 0)
            if made >= self.settings.summaries_per_iteration:
                return fallback
            self._summaries[fast.iteration] = made + 1
        prompt = prompts.summarizer_prompt(slow, fast, context)
        reply = self._call("summarizer", prompt, fast.plan or fast.hash[:12])
        lesson = extract_lesson(reply) if reply is not None else None
        return lesson or fallback

    @staticmethod
    def _template_lesson(slow: Candidate, fast: Candidate, context: SearchContext, speedup: float) -> str:
        verdict = "made the kernel faster" if speedup >= 1 else "made the kernel slower"
        return (f"{fast.plan or 'A rewrite'} {verdict} ({speedup:.2f}x, {slow.latency_ms:.4g} ms -> "
                f"{fast.latency_ms:.4g} ms) on {context.task} ({context.hardware}).")

