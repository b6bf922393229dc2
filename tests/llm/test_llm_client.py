"""The LLM client over the real `openai` package and a local scripted server: retries (429 with
Retry-After, 5xx with backoff, timeouts), what is not retried, token and cost accounting, the budget,
the concurrency limit, and that the key never shows."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest
from llm_fakes import KEY, MODEL, Reply, Request

from accelopt_core.agents.llm import Budget, BudgetExceeded, LLMClient, LLMError, LLMFatalError
from accelopt_core.agents.llm.client import retry_after_seconds
from accelopt_core.config import AgentOverride, BudgetLimits, Price


def scripted(*replies: Reply | str):  # type: ignore[no-untyped-def]
    """Answer requests with `replies` in order, then keep answering "ok"."""
    queue = iter(replies)
    lock = threading.Lock()

    def respond(request: Request) -> Reply | str:
        with lock:
            return next(queue, "ok")
    return respond


def test_429_then_success_honours_retry_after_and_counts_the_retry(fake_llm) -> None:
    server = fake_llm(scripted(Reply("slow down", status=429, headers={"retry-after": "0.4"}), "done"))
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    client = LLMClient(server.settings(), sleep=sleep)
    started = time.monotonic()
    completion = client.complete("planner", "# Role: planner", "plan something")
    assert completion.text == "done" and completion.attempts == 2
    assert waits == [0.4] and time.monotonic() - started >= 0.4
    usage = client.usage("planner")
    assert usage.calls == 1 and usage.retries == 1 and usage.failures == 0
    assert len(server.requests) == 2


def test_server_errors_back_off_exponentially_with_jitter_then_give_up(fake_llm) -> None:
    server = fake_llm(lambda r: Reply("overloaded", status=503))
    waits: list[float] = []
    client = LLMClient(server.settings(max_retries=3), sleep=waits.append, jitter=lambda: 1.0)
    with pytest.raises(LLMError, match=r"after 4 attempts: HTTP 503: overloaded"):
        client.complete("executor", "# Role: executor", "write")
    assert waits == [1.0, 2.0, 4.0]
    assert client.usage().failures == 1 and client.usage().retries == 3 and client.usage().calls == 0


def test_a_retry_after_longer_than_allowed_fails_instead_of_waiting(fake_llm) -> None:
    server = fake_llm(lambda r: Reply("come back later", status=429, headers={"retry-after": "3600"}))
    client = LLMClient(server.settings(max_retry_wait=30), sleep=lambda s: pytest.fail("must not wait an hour"))
    with pytest.raises(LLMError, match="asks to wait 3600 s"):
        client.complete("planner", "# Role: planner", "x")


def test_bad_requests_are_not_retried_and_refused_keys_are_fatal(fake_llm) -> None:
    server = fake_llm(scripted(Reply("context too long", status=400), Reply("bad key", status=401),
                               Reply("no such model", status=404)))
    client = LLMClient(server.settings(), sleep=lambda s: pytest.fail("not retried"))
    with pytest.raises(LLMError, match="HTTP 400: context too long") as first:
        client.complete("planner", "# Role: planner", "x")
    assert not isinstance(first.value, LLMFatalError)
    with pytest.raises(LLMFatalError, match="HTTP 401"):
        client.complete("planner", "# Role: planner", "x")
    with pytest.raises(LLMFatalError, match="HTTP 404"):
        client.complete("planner", "# Role: planner", "x")
    assert len(server.requests) == 3 and client.usage().failures == 3


def test_a_timeout_is_retried_and_a_connection_refused_is_a_failure(fake_llm) -> None:
    server = fake_llm(scripted(Reply("late", delay=2.5), "on time"))
    client = LLMClient(server.settings(timeout=1.0, max_retries=1), sleep=lambda s: None)
    assert client.complete("fixer", "# Role: fixer", "fix").text == "on time"
    assert client.usage("fixer").retries == 1

    dead = server.settings(base_url="http://127.0.0.1:9/v1", max_retries=1)  # nothing listens on port 9
    client = LLMClient(dead, sleep=lambda s: None)
    with pytest.raises(LLMError, match="connection error"):
        client.complete("fixer", "# Role: fixer", "fix")
    assert client.usage().failures == 1 and client.usage().retries == 1


def test_tokens_and_cost_come_from_the_reported_usage_and_the_configured_prices(fake_llm) -> None:
    server = fake_llm(scripted(Reply("a", tokens_in=1000, tokens_out=200),
                               Reply("b", tokens_in=500_000, tokens_out=100_000),
                               Reply("c" * 400, usage=False)))
    settings = server.settings(prices={MODEL: Price(3.0, 15.0), "cheap": Price(0.15, 0.60)},
                               agents={"executor": AgentOverride(model="cheap-2025-01")})
    client = LLMClient(settings)
    first = client.complete("planner", "# Role: planner", "x")
    assert (first.tokens_in, first.tokens_out) == (1000, 200)
    assert first.cost_usd == pytest.approx((1000 * 3 + 200 * 15) / 1e6)
    second = client.complete("executor", "# Role: executor", "y")  # priced by its prefix "cheap"
    assert second.model == "cheap-2025-01" and server.requests[1].model == "cheap-2025-01"
    assert second.cost_usd == pytest.approx(0.5 * 0.15 + 0.1 * 0.60)
    third = client.complete("planner", "# Role: planner", "z" * 800)  # no usage block: estimated, 4 chars/token
    assert third.usage_estimated and third.tokens_out == 100 and third.tokens_in == (800 + len("# Role: planner")) // 4
    total = client.usage()
    assert total.calls == 3 and total.estimated_calls == 1
    assert total.cost_usd == pytest.approx(first.cost_usd + second.cost_usd + third.cost_usd)
    assert client.usage("executor").tokens == 600_000
    assert client.budget is not None and client.budget.tokens == total.tokens


def test_unpriced_models_cost_nothing_and_are_counted(fake_llm) -> None:
    server = fake_llm(scripted(Reply("a", tokens_in=10, tokens_out=10)))
    client = LLMClient(server.settings(prices={}))
    assert client.complete("planner", "s", "u").cost_usd == 0.0
    assert client.usage().unpriced_calls == 1


def test_a_spent_budget_raises_before_the_call_reaches_the_server(fake_llm) -> None:
    server = fake_llm(scripted(Reply("a", tokens_in=900, tokens_out=100)))
    client = LLMClient(server.settings(budget=BudgetLimits(max_tokens=1000)))
    client.complete("planner", "s", "u")
    with pytest.raises(BudgetExceeded, match="token budget spent"):
        client.complete("planner", "s", "u")
    assert len(server.requests) == 1

    server = fake_llm(scripted(Reply("a", tokens_in=1_000_000, tokens_out=0)))
    client = LLMClient(server.settings(budget=BudgetLimits(max_usd=2.0)))
    client.complete("planner", "s", "u")  # $3
    with pytest.raises(BudgetExceeded, match=r"cost budget spent \(\$3.0000 of \$2.00\)"):
        client.complete("planner", "s", "u")


def test_the_wall_clock_budget_and_a_retry_wait_that_would_pass_it() -> None:
    now = itertools.count(0.0, 10.0)
    budget = Budget(max_seconds=25, clock=lambda: next(now))
    budget.check()  # starts the clock at 0
    budget.check()  # 10 s
    with pytest.raises(BudgetExceeded, match="time budget spent"):
        budget.check()  # 30 s


def test_retry_waits_beyond_the_time_budget_stop_at_once(fake_llm) -> None:
    server = fake_llm(lambda r: Reply("busy", status=429, headers={"retry-after": "20"}))
    client = LLMClient(server.settings(budget=BudgetLimits(max_seconds=5)), sleep=lambda s: pytest.fail("no wait"))
    with pytest.raises(BudgetExceeded, match="while waiting 20 s"):
        client.complete("planner", "s", "u")


def test_concurrency_is_limited(fake_llm) -> None:
    active, peak = 0, 0
    lock = threading.Lock()

    def respond(request: Request) -> Reply | str:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.15)
        with lock:
            active -= 1
        return "ok"

    server = fake_llm(respond)
    client = LLMClient(server.settings(max_concurrency=2))
    threads = [threading.Thread(target=client.complete, args=("planner", "s", "u")) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2 and client.usage().calls == 6


def test_the_key_is_sent_to_the_endpoint_and_shown_nowhere(fake_llm, caplog: pytest.LogCaptureFixture) -> None:
    server = fake_llm(scripted(Reply("bad", status=500), "fine"))
    settings = server.settings()
    caplog.set_level(logging.DEBUG)
    client = LLMClient(settings, sleep=lambda s: None)
    client.complete("planner", "s", "u")
    assert server.requests[0].authorization == f"Bearer {KEY}"
    shown = [repr(settings), str(settings), f"{settings}", repr(client), str(settings.describe()),
             repr(settings.api_key), caplog.text]
    assert all(KEY not in text for text in shown)
    assert "api_key='***'" in repr(settings) and settings.describe()["api_key_set"] is True


def test_a_key_echoed_in_an_error_is_scrubbed(fake_llm, caplog: pytest.LogCaptureFixture) -> None:
    server = fake_llm(lambda r: Reply(f"Incorrect API key provided: {KEY}", status=401))
    client = LLMClient(server.settings())
    with pytest.raises(LLMFatalError) as refused:
        client.complete("planner", "s", "u")
    assert KEY not in str(refused.value) and "Incorrect API key provided: ***" in str(refused.value)
    assert KEY not in caplog.text


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date in the past
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_a_client_without_an_endpoint_refuses_to_start() -> None:
    from accelopt_core.config import LLMSettings

    with pytest.raises(LLMError, match="no LLM endpoint configured"):
        LLMClient(LLMSettings(model="m"))
