"""The remote backend: a `Profiler` that sends jobs to the profiling service (accelopt serve).

The search and the language server use it when settings name a service URL. It submits a job,
long-polls its status with backoff, cancels it when the caller cancels, retries connection errors
and 5xx answers, waits as told by 429 Retry-After when the service is full, and says plainly when
the service cannot be reached. Only if the user allowed it does it fall back to the local
simulator, and the result then says backend "simulator".

Standard library only (urllib), so the client adds no dependency to the engine.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

from ..tasks.declared import default_task_name
from .profiler import Profiler, SimulatorProfiler, TaskRef
from .result import ProfileResult
from .sandbox import CANCELLED

FINISHED = ("done", "failed", "cancelled")


class ServiceUnreachableError(Exception):
    """No usable answer from the service after the retries (connection errors or 5xx)."""


class ServiceRefusedError(Exception):
    """The service answered with a client error (bad token, too large, invalid job)."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class _CancelledError(Exception):
    pass


class _OverdueError(Exception):
    pass


@dataclass
class _Answer:
    status: int
    body: Any
    headers: dict[str, str]


def _detail(body: Any) -> str:
    if isinstance(body, dict) and "detail" in body:
        detail = body["detail"]
        if isinstance(detail, list):  # FastAPI's validation errors
            return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail
                             if isinstance(d, dict))
        return str(detail)
    return str(body)[:300]


class RemoteProfiler:
    """Profiles through an AccelOpt profiling service at `url` (e.g. http://trn-host:8765).

    `timeout` bounds one whole profile (queueing included); `retries` is how many times a request is
    repeated after a connection error or a 5xx answer; `allow_fallback` permits profiling on the
    local simulator when the service is unreachable."""

    backend = "remote"

    def __init__(self, url: str, token: str, timeout: float = 900.0, retries: int = 3, allow_fallback: bool = False,
                 *, request_timeout: float = 30.0, long_poll: float = 1.0, fallback: Profiler | None = None,
                 ssl_context: ssl.SSLContext | None = None, check_variant: str | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"the profiling service URL must be http(s)://HOST[:PORT], not {url!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.allow_fallback = allow_fallback
        self.request_timeout = request_timeout
        self.long_poll = long_poll
        self.check_variant = check_variant
        self.ssl_context = ssl_context
        self._fallback = fallback
        self._sleep = sleep
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),  # the service is not proxied
                                                   urllib.request.HTTPSHandler(context=ssl_context))

    # HTTP -----------------------------------------------------------------------------------------

    def _send(self, method: str, path: str, payload: Any = None, timeout: float | None = None) -> _Answer:
        data = json.dumps(payload).encode("utf-8") if payload is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "application/json",
            **({"Content-Type": "application/json"} if data is not None else {})})
        try:
            with self._opener.open(request, timeout=timeout or self.request_timeout) as response:
                raw, status, headers = response.read(), response.status, dict(response.headers)
        except urllib.error.HTTPError as exc:
            raw, status, headers = exc.read(), exc.code, dict(exc.headers or {})
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        return _Answer(status, body, headers)

    def _request(self, method: str, path: str, payload: Any = None, *, deadline: float,
                 cancel: threading.Event | None = None, timeout: float | None = None) -> _Answer:
        """One call with retries: connection errors and 5xx back off and retry; 429 waits as told."""
        failures = 0
        while True:
            if cancel is not None and cancel.is_set():
                raise _CancelledError()
            try:
                answer = self._send(method, path, payload, timeout)
            except (urllib.error.URLError, OSError, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                problem = f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason
            else:
                if answer.status == 429:
                    wait = _retry_after(answer.headers, default=1.0)
                    self._pause(min(wait, max(0.0, deadline - time.monotonic())), cancel, deadline)
                    continue
                if answer.status < 500:
                    return answer
                problem = f"HTTP {answer.status}: {_detail(answer.body)}"
            failures += 1
            if failures > self.retries:
                raise ServiceUnreachableError(problem)
            self._pause(min(0.25 * 2 ** (failures - 1), 5.0) * (0.5 + random.random()), cancel, deadline)

    def _pause(self, seconds: float, cancel: threading.Event | None, deadline: float) -> None:
        if time.monotonic() + seconds > deadline:
            raise _OverdueError()
        if cancel is not None:
            if cancel.wait(seconds):
                raise _CancelledError()
        else:
            self._sleep(seconds)

    # the Profiler interface -----------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """The service's capacity (no token needed); raises ServiceUnreachableError."""
        answer = self._request("GET", "/v1/health", deadline=time.monotonic() + self.request_timeout * 2)
        if answer.status != 200:
            raise ServiceRefusedError(answer.status, _detail(answer.body))
        return answer.body

    def at_timed_size(self) -> Self | None:
        """This client asking the service to check at the size it times (see CheckingProfiler)."""
        if not self.check_variant:
            return None
        timed = copy.copy(self)
        timed.check_variant, timed._fallback = None, None
        return timed

    def job_payload(self, kernel_source: str, task: TaskRef, hardware: str, check: bool,
                    seeds: Sequence[int] | None, kernel_label: str, kernel_name: str | None) -> dict[str, Any]:
        payload: dict[str, Any] = {"kernel": kernel_source, "hardware": hardware, "check": check,
                                   "kernel_label": os.path.basename(kernel_label) or "candidate.py"}
        if task.reference:
            with open(task.reference, encoding="utf-8") as handle:
                payload["reference"] = handle.read()
            payload["reference_name"] = os.path.basename(task.reference)
            if task.variant:
                payload["reference_variant"] = task.variant
        else:
            payload["task"] = task.name
        if kernel_name:
            payload["kernel_name"] = kernel_name
        if self.check_variant:
            payload["check_variant"] = self.check_variant
        if seeds is not None:
            payload["seeds"] = list(seeds)
        if task.grid is not None:
            payload["grid"] = list(task.grid)
        return payload

    def profile(self, kernel_source: str, task: TaskRef, hardware: str = "trn1", check: bool = True,
                seeds: Sequence[int] | None = None, kernel_label: str = "candidate.py",
                kernel_name: str | None = None, cancel: threading.Event | None = None) -> ProfileResult:
        """Profile on the service; failures come back as `ProfileResult.error`, never as exceptions."""
        task_name = task.name or default_task_name(task.reference or "")
        failed = ProfileResult(kernel_label, task_name, hardware, self.backend, function=kernel_name)
        deadline = time.monotonic() + self.timeout
        job_id: str | None = None
        try:
            payload = self.job_payload(kernel_source, task, hardware, check, seeds, kernel_label, kernel_name)
            answer = self._request("POST", "/v1/jobs", payload, deadline=deadline, cancel=cancel)
            if answer.status not in (200, 201, 202):
                raise ServiceRefusedError(answer.status, _detail(answer.body))
            job_id = answer.body["id"]
            state = self._wait(job_id, deadline, cancel)
        except ServiceUnreachableError as exc:
            message = f"profiling service at {self.url} is unreachable: {exc}"
            if self.allow_fallback:
                return self._fall_back(message, kernel_source, task, hardware, check, seeds, kernel_label,
                                       kernel_name, cancel)
            failed.error = message
            return failed
        except ServiceRefusedError as exc:
            failed.error = _refusal(self.url, exc)
            return failed
        except _CancelledError:
            self._cancel_quietly(job_id)
            failed.error = CANCELLED
            return failed
        except _OverdueError:
            self._cancel_quietly(job_id)
            failed.error = f"profiling service at {self.url} did not finish the job within {self.timeout:g} s"
            return failed
        except OSError as exc:  # the reference file could not be read
            failed.error = f"cannot send the job: {exc}"
            return failed
        if state["status"] == "done" and state.get("result"):
            result = ProfileResult.from_dict(state["result"])
            result.kernel = kernel_label
            return result
        failed.error = (CANCELLED if state["status"] == "cancelled" else
                        f"profiling service at {self.url} could not profile the kernel: {state.get('error')}")
        return failed

    def _wait(self, job_id: str, deadline: float, cancel: threading.Event | None) -> dict[str, Any]:
        """Long-poll the job; if the service answers early (an older server), back off between polls."""
        backoff = 0.05
        while True:
            wait = max(0.0, min(self.long_poll, deadline - time.monotonic()))
            asked = time.monotonic()
            answer = self._request("GET", f"/v1/jobs/{job_id}?wait={wait:.2f}", deadline=deadline, cancel=cancel,
                                   timeout=self.request_timeout + wait)
            if answer.status != 200:
                raise ServiceRefusedError(answer.status, _detail(answer.body))
            if answer.body.get("status") in FINISHED:
                return answer.body
            if time.monotonic() >= deadline:
                raise _OverdueError()
            if time.monotonic() - asked < wait / 2:
                self._pause(min(backoff, max(0.0, deadline - time.monotonic())), cancel, deadline)
                backoff = min(backoff * 2, 2.0)
            elif cancel is not None and cancel.is_set():
                raise _CancelledError()

    def _cancel_quietly(self, job_id: str | None) -> None:
        if job_id is None:
            return
        with contextlib.suppress(urllib.error.URLError, OSError):
            self._send("DELETE", f"/v1/jobs/{job_id}", timeout=5.0)

    def _fall_back(self, message: str, kernel_source: str, task: TaskRef, hardware: str, check: bool,
                   seeds: Sequence[int] | None, kernel_label: str, kernel_name: str | None,
                   cancel: threading.Event | None) -> ProfileResult:
        if self._fallback is None:
            self._fallback = SimulatorProfiler(check_variant=self.check_variant)
        result = self._fallback.profile(kernel_source, task, hardware, check, seeds=seeds, kernel_label=kernel_label,
                                        kernel_name=kernel_name, cancel=cancel)
        result.profile = {**result.profile, "fallback": message}
        return result


def _retry_after(headers: dict[str, str], default: float) -> float:
    for name, value in headers.items():
        if name.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                return default
    return default


def _refusal(url: str, exc: ServiceRefusedError) -> str:
    if exc.status == 401:
        return f"profiling service at {url} refused the token (HTTP 401): check the token setting"
    if exc.status == 413:
        return f"profiling service at {url} refused the job as too large (HTTP 413): {exc.detail}"
    return f"profiling service at {url} refused the job ({exc})"
