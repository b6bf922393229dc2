"""One chat client for every agent, over the `openai` package and any OpenAI-compatible endpoint.

The `openai` client's own retries are switched off: this module retries 429, 5xx, timeouts and
connection errors itself (exponential backoff with jitter, Retry-After honoured), so every attempt is
counted, a budget is checked before each one, and the concurrency limit covers only the time a request
is actually in flight.
"""

from __future__ import annotations

import email.utils
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ...config import BudgetLimits, LLMSettings

log = logging.getLogger("accelopt.llm")

RETRYABLE_STATUS = frozenset({408, 409, 429})  # plus every 5xx
FATAL_STATUS = frozenset({401, 403, 404})  # the endpoint, key or model is wrong: no later call will work
BACKOFF_BASE = 1.0  # seconds before the first retry (doubled each time, with jitter)
CHARS_PER_TOKEN = 4  # estimate used only when an endpoint reports no usage


class LLMError(Exception):
    """One call that failed for good (after its retries, or at once for a request the server refuses)."""


class LLMFatalError(LLMError):
    """The endpoint refuses us (bad key, no such model, forbidden): stop asking it."""


class BudgetExceeded(LLMError):  # noqa: N818 - the name the issue and callers use
    """The budget (tokens, USD or wall time) is spent; raised before a call, never after one."""


@dataclass
class Usage:
    """Counts for a set of calls. `calls` are completed requests; failed ones are in `failures`."""

    calls: int = 0
    failures: int = 0
    retries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0  # time spent in requests, summed over calls (they overlap)
    unpriced_calls: int = 0  # calls whose model has no configured price (their cost counts as 0)
    estimated_calls: int = 0  # calls whose endpoint reported no token usage (estimated from characters)

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def add(self, other: Usage) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Completion:
    """One successful call: the reply text and what it cost."""

    text: str
    role: str
    model: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    seconds: float
    attempts: int = 1
    finish_reason: str | None = None
    usage_estimated: bool = False


class Budget:
    """Limits on total tokens, USD and wall time, shared by all agents of one search (thread-safe).

    It is checked before a call starts, so concurrent calls may overshoot it by at most what is in
    flight (max_concurrency calls). The wall clock starts at the first check, i.e. the first call."""

    def __init__(self, max_tokens: int | None = None, max_usd: float | None = None, max_seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.max_tokens, self.max_usd, self.max_seconds = max_tokens, max_usd, max_seconds
        self.clock = clock
        self.tokens = 0
        self.usd = 0.0
        self.started: float | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_limits(cls, limits: BudgetLimits) -> Budget:
        return cls(limits.max_tokens, limits.max_usd, limits.max_seconds)

    def elapsed(self) -> float:
        return 0.0 if self.started is None else self.clock() - self.started

    def exhausted(self) -> str | None:
        """Why no further call may start, or None."""
        with self._lock:
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return f"token budget spent ({self.tokens:,} of {self.max_tokens:,} tokens)"
            if self.max_usd is not None and self.usd >= self.max_usd:
                return f"cost budget spent (${self.usd:.4f} of ${self.max_usd:.2f})"
            if self.max_seconds is not None and self.elapsed() >= self.max_seconds:
                return f"time budget spent ({self.elapsed():.0f} of {self.max_seconds:.0f} s)"
        return None

    def check(self) -> None:
        with self._lock:
            if self.started is None:
                self.started = self.clock()
        reason = self.exhausted()
        if reason:
            raise BudgetExceeded(reason)

    def seconds_left(self) -> float:
        return float("inf") if self.max_seconds is None else self.max_seconds - self.elapsed()

    def charge(self, tokens: int, usd: float) -> None:
        with self._lock:
            self.tokens += tokens
            self.usd += usd


def retry_after_seconds(headers: Any) -> float | None:
    """The server's requested wait: `retry-after-ms`, or `retry-after` in seconds or as an HTTP date."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class _Attempt:
    """How one failed attempt should be handled."""

    reason: str
    retryable: bool
    fatal: bool = False
    wait: float | None = None  # the server's Retry-After


@dataclass
class LLMClient:
    """Chat completions for the agents, with retries, a concurrency limit, accounting and a budget.

    `openai_client` replaces the real one (built from the settings) for callers that bring their own;
    `sleep` and `jitter` are there so waits can be observed."""

    settings: LLMSettings
    budget: Budget | None = None
    openai_client: Any = field(default=None, repr=False)
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = random.random
    _usage: dict[str, Usage] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = Budget.from_limits(self.settings.budget)
        self._slots = threading.BoundedSemaphore(max(1, self.settings.max_concurrency))
        if self.openai_client is None:
            if not self.settings.configured():
                raise LLMError("no LLM endpoint configured: missing " + ", ".join(self.settings.missing()))
            import openai  # only here, so the offline optimizer never needs the package

            assert self.settings.api_key is not None
            self.openai_client = openai.OpenAI(base_url=self.settings.base_url,
                                               api_key=self.settings.api_key.reveal(),
                                               timeout=self.settings.timeout, max_retries=0)

    # --- accounting ------------------------------------------------------------------------------
    def usage(self, role: str | None = None) -> Usage:
        """Totals for one agent, or for all of them."""
        with self._lock:
            if role is not None:
                return Usage(**self._usage.get(role, Usage()).to_dict())
            total = Usage()
            for usage in self._usage.values():
                total.add(usage)
            return total

    def usage_by_role(self) -> dict[str, Usage]:
        with self._lock:
            return {role: Usage(**u.to_dict()) for role, u in self._usage.items()}

    def _count(self, role: str, **delta: float) -> None:
        with self._lock:
            usage = self._usage.setdefault(role, Usage())
            for name, value in delta.items():
                setattr(usage, name, getattr(usage, name) + value)

    # --- calls -----------------------------------------------------------------------------------
    def complete(self, role: str, system: str, user: str, model: str | None = None,
                 temperature: float | None = None, max_tokens: int | None = None) -> Completion:
        """One chat completion for one agent. LLMError when it fails for good, BudgetExceeded when the
        budget is spent before a (re)try, LLMFatalError when the endpoint refuses the key or model."""
        assert self.budget is not None
        chosen = self.settings.for_role(role)
        model = model or chosen.model
        request: dict[str, Any] = {"model": model, "messages": [{"role": "system", "content": system},
                                                                {"role": "user", "content": user}]}
        temperature = chosen.temperature if temperature is None else temperature
        if temperature is not None:
            request["temperature"] = temperature
        request[self.settings.token_limit_param] = max_tokens or chosen.max_tokens
        attempt = 0
        while True:
            self.budget.check()
            started = time.monotonic()
            try:
                with self._slots:
                    started = time.monotonic()
                    response = self.openai_client.chat.completions.create(**request)
            except Exception as exc:  # classified below; unknown errors are not retried
                outcome = _classify(exc)
                outcome.reason = self._scrub(outcome.reason)
                if outcome.fatal or not outcome.retryable or attempt >= self.settings.max_retries:
                    self._count(role, failures=1, seconds=time.monotonic() - started)
                    tries = f" after {attempt + 1} attempts" if attempt else ""
                    log.warning("%s call to %s failed%s: %s", role, model, tries, outcome.reason)
                    error = LLMFatalError if outcome.fatal else LLMError
                    raise error(f"{role} call failed{tries}: {outcome.reason}") from None
                try:
                    wait = self._wait(attempt, outcome)
                except LLMError:
                    self._count(role, failures=1)
                    raise
                self._count(role, retries=1)
                log.info("%s call to %s: %s; retrying in %.1f s", role, model, outcome.reason, wait)
                if wait >= self.budget.seconds_left():
                    self._count(role, failures=1)
                    raise BudgetExceeded(f"time budget would run out while waiting {wait:.0f} s to retry "
                                         f"({outcome.reason})") from None
                self.sleep(wait)
                attempt += 1
                continue
            return self._finish(role, model, request, response, time.monotonic() - started, attempt + 1)

    def _scrub(self, text: str) -> str:
        """A server may echo the key in an error message: never pass it on to logs, notes or drafts."""
        key = self.settings.api_key.reveal() if self.settings.api_key is not None else ""
        return text.replace(key, "***") if len(key) >= 4 else text

    def _wait(self, attempt: int, outcome: _Attempt) -> float:
        """The server's Retry-After when it gives one, else exponential backoff with jitter."""
        if outcome.wait is not None:
            if outcome.wait > self.settings.max_retry_wait:
                raise LLMError(f"{outcome.reason}; the server asks to wait {outcome.wait:.0f} s, more than "
                               f"max_retry_wait ({self.settings.max_retry_wait:.0f} s)")
            return outcome.wait
        delay = min(self.settings.max_retry_wait, BACKOFF_BASE * 2 ** attempt)
        return delay * (0.5 + 0.5 * self.jitter())

    def _finish(self, role: str, model: str, request: dict[str, Any], response: Any, seconds: float,
                attempts: int) -> Completion:
        choice = response.choices[0] if getattr(response, "choices", None) else None
        text = (getattr(getattr(choice, "message", None), "content", None) or "") if choice else ""
        usage = getattr(response, "usage", None)
        estimated = usage is None or getattr(usage, "prompt_tokens", None) is None
        if estimated:
            prompt_chars = sum(len(m["content"]) for m in request["messages"])
            tokens_in, tokens_out = prompt_chars // CHARS_PER_TOKEN, len(text) // CHARS_PER_TOKEN
        else:
            tokens_in, tokens_out = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
        price = self.settings.price_for(model) or self.settings.price_for(getattr(response, "model", "") or "")
        cost = price.cost(tokens_in, tokens_out) if price else 0.0
        assert self.budget is not None
        self.budget.charge(tokens_in + tokens_out, cost)
        self._count(role, calls=1, tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=cost, seconds=seconds,
                    unpriced_calls=int(price is None), estimated_calls=int(estimated))
        finish = getattr(choice, "finish_reason", None) if choice else None
        log.debug("%s call to %s: %d in, %d out, $%.5f, %.1f s", role, model, tokens_in, tokens_out, cost, seconds)
        return Completion(text, role, model, tokens_in, tokens_out, cost, seconds, attempts, finish, estimated)


def _classify(exc: Exception) -> _Attempt:
    """Retry rate limits, server errors, timeouts and dropped connections; not bad requests."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return _Attempt("the request timed out", True)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        return _Attempt(f"connection error{f' ({cause})' if cause else ''}", True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = _short(_error_message(exc))
        reason = f"HTTP {status}: {message}"
        if status in FATAL_STATUS:
            return _Attempt(reason, False, fatal=True)
        retryable = status in RETRYABLE_STATUS or status >= 500
        return _Attempt(reason, retryable, wait=retry_after_seconds(exc.response.headers) if retryable else None)
    return _Attempt(f"{type(exc).__name__}: {_short(str(exc))}", False)


def _error_message(exc: Exception) -> str:
    """The server's own words: `error.message` of an OpenAI-style body, else the exception's text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    text = getattr(exc, "message", "") or str(exc)
    return text.split(" - ", 1)[1] if text.startswith("Error code:") and " - " in text else text


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
