"""The HTTP API of the profiling service (FastAPI): submit, poll, cancel, health.

    POST   /v1/jobs          {kernel, reference | task, hardware, check, ...} -> 202 {id, status}
    GET    /v1/jobs/{id}     -> {status: queued|running|done|failed|cancelled, result, error, ...}
    DELETE /v1/jobs/{id}     -> the job, now cancelled
    GET    /v1/health        -> capacity (the only call without a token)
    GET    /v1/workers, /v1/stats, /openapi.json

`result` is exactly the JSON of `accelopt profile --json`. Every call but health needs
`Authorization: Bearer TOKEN`; the token is compared through fixed-length digests in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlencode

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..hardware import available_hardware
from ..profiling.sandbox import SandboxLimits
from .jobs import JobFinishedError, JobManager, QueueFullError, Runner
from .spec import EvaluatorConfig, JobSpec, SpecError, private_directory, validate_spec

log = logging.getLogger("accelopt.service")

MiB = 1024 * 1024
JOB_ID = r"^[0-9a-f]{32}$"
Status = Literal["queued", "running", "done", "failed", "cancelled"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class JobRequest(BaseModel):
    """A kernel to check and profile against a named task or a reference given as source text."""

    model_config = ConfigDict(extra="forbid")

    kernel: str = Field(description="kernel module source (Python, NKI)")
    reference: str | None = Field(None, description="reference module source (native or NKIBench form)")
    task: str | None = Field(None, max_length=170, description="a named task instead, e.g. `silu` or `silu:small`")
    hardware: str = Field("trn1", json_schema_extra=lambda schema: schema.update(enum=list(available_hardware())),
                          description="the Trainium generation to profile on")
    check: bool = Field(True, description="check correctness on random seeds (false: time only)")
    kernel_name: str | None = Field(None, max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    kernel_label: str | None = Field(None, max_length=255, description="file name used in error messages")
    reference_name: str | None = Field(None, max_length=255, description="reference file name; names the task")
    check_variant: str | None = Field(None, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                                      description="check on this size variant of the task, time at full size")
    reference_variant: str | None = Field(None, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                                          description="the size variant of `reference` to profile at")
    seeds: list[Annotated[int, Field(ge=0, lt=2**32)]] | None = Field(
        None, max_length=32, description="explicit seeds (such jobs are not cached)")
    grid: list[Annotated[int, Field(ge=1, le=65536)]] | None = Field(
        None, min_length=1, max_length=8, description="SPMD launch grid instead of the reference's own")

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, value: str) -> str:
        if value not in available_hardware():
            raise ValueError(f"hardware must be one of {', '.join(available_hardware())}")
        return value

    @field_validator("kernel", "reference", "task", "kernel_label", "reference_name")
    @classmethod
    def _utf8(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("text must be valid UTF-8 (no lone surrogates)") from None
            if "\x00" in value:
                raise ValueError("text must not contain NUL characters")
        return value

    @model_validator(mode="after")
    def _one_task(self) -> JobRequest:
        if (self.task is None) == (self.reference is None):
            raise ValueError("give exactly one of `task` (a name) or `reference` (source text)")
        return self

    def to_spec(self) -> JobSpec:
        return JobSpec(kernel=self.kernel, task=self.task, reference=self.reference,
                       reference_name=self.reference_name, reference_variant=self.reference_variant,
                       hardware=self.hardware, check=self.check,
                       kernel_name=self.kernel_name, kernel_label=_label(self.kernel_label),
                       check_variant=self.check_variant, seeds=tuple(self.seeds) if self.seeds is not None else None,
                       grid=tuple(self.grid) if self.grid is not None else None)


def _label(name: str | None) -> str:
    from .spec import safe_file_name

    return safe_file_name(name, "candidate.py")


class JobCreated(BaseModel):
    id: str
    status: Status


class JobState(BaseModel):
    id: str
    status: Status
    result: dict[str, Any] | None = Field(None, description="the JSON of `accelopt profile --json`")
    error: str | None = Field(None, description="why the service could not evaluate the job")
    cached: bool = False
    attempts: int = 0
    slot: int | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None


class Health(BaseModel):
    status: str
    backend: str
    executor: str
    workers: int
    queued: int
    running: int
    queue_limit: int
    accepting: bool


class ErrorBody(BaseModel):
    detail: Any


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody} for code in codes}


class BodySizeLimit:
    """Refuse request bodies over `limit` bytes with 413 before anything parses them."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(send)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                await self._refuse(send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        await answer_json(send, 413, f"request body larger than {self.limit} bytes")


async def answer_json(send: Send, status: int, detail: str) -> None:
    """A complete `{"detail": ...}` response, sent from an ASGI middleware."""
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


CREDENTIAL_PARAMETER = re.compile(r"(token|key|secret|passw|auth|bearer|credential)", re.IGNORECASE)


class NoCredentialsInQuery:
    """A credential belongs in the Authorization header: a query parameter named like one (`?token=`) is
    refused with 400, and removed from the request first, so that nothing that records URLs (uvicorn's
    access log reads this same scope when it logs the response) ever writes it down."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            kept = [(name, value) for name, value in pairs if not CREDENTIAL_PARAMETER.search(name)]
            if len(kept) != len(pairs):
                scope["query_string"] = urlencode(kept).encode("latin-1")
                await answer_json(send, 400, "credentials go in the Authorization header, never in the URL")
                return
        await self.app(scope, receive, send)


def readable(text: Any) -> str:
    """Text that can be encoded and logged whatever a client sent (lone surrogates become '?')."""
    return str(text).encode("utf-8", "replace").decode("utf-8")


def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 saying where and what is wrong, never echoing the value: it may be a whole kernel, and one with
    a lone surrogate cannot even be encoded (FastAPI's own handler failed with a 500 that logged it)."""
    errors = [{"loc": [readable(part) for part in error.get("loc", ())], "msg": readable(error.get("msg", ""))[:500],
               "type": readable(error.get("type", ""))} for error in exc.errors()]
    return JSONResponse(status_code=422, content={"detail": errors})


BEARER = HTTPBearer(auto_error=False, description="the service's token (see docs/deploy.md)")


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def make_runner(config: EvaluatorConfig, workers: int, ray_address: str | None) -> Runner:
    """The evaluation slots: worker processes on this host, or Ray tasks on a cluster."""
    if ray_address:
        from .ray_backend import RayRunner

        return RayRunner(ray_address, config, slots=workers or None)
    from .workers import ProcessRunner

    return ProcessRunner(workers, config)


def bearer_check(token: str) -> Callable[..., None]:
    """The dependency every call but health has: the token compared through fixed-length digests."""
    expected = _digest(token)

    def authorize(credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]) -> None:
        given = credentials.credentials if credentials is not None else ""
        if not hmac.compare_digest(_digest(given), expected) or not given:
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    return authorize


class Jobs:
    """The job manager while the app runs (its lifespan), for the routes; 503 outside it."""

    def __init__(self) -> None:
        self.current: JobManager | None = None

    def __call__(self) -> JobManager:
        if self.current is None:
            raise HTTPException(503, "the service is starting or stopping")
        return self.current


def job_lifespan(jobs: Jobs, runner: Runner, backend: str, queue_limit: int | None, cache_size: int, job_ttl: float,
                 private_refs: str | None) -> Callable[[FastAPI], Any]:
    """Start the job manager and its workers with the app, stop them (and remove the references clients sent,
    when the folder is ours) after it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        manager = JobManager(runner, backend, queue_limit=queue_limit or 1, cache_size=cache_size, job_ttl=job_ttl)
        manager.start()  # a Ray runner learns its slot count here, from the cluster
        if queue_limit is None:
            manager.queue_limit = 16 * runner.slots
        jobs.current = app.state.jobs = manager
        try:
            yield
        finally:
            jobs.current = None
            manager.stop()
            if private_refs:
                shutil.rmtree(private_refs, ignore_errors=True)

    return lifespan


def add_job_routes(app: FastAPI, jobs: Jobs, auth: list[Any], max_kernel_bytes: int) -> None:
    """Submit, poll and cancel."""

    @app.post("/v1/jobs", status_code=202, response_model=JobCreated, dependencies=auth, tags=["jobs"],
              responses=_errors(401, 413, 422, 429, 503))
    def submit(request: JobRequest, response: Response) -> dict[str, Any]:
        """Queue a profile job (answered at once from the cache when the same job ran before)."""
        for name, text in (("kernel", request.kernel), ("reference", request.reference)):
            if text is not None and len(text.encode("utf-8")) > max_kernel_bytes:
                raise HTTPException(413, f"{name} source larger than {max_kernel_bytes} bytes")
        spec = request.to_spec()
        try:
            validate_spec(spec)
        except SpecError as exc:
            raise HTTPException(422, str(exc)) from None
        try:
            job = jobs().submit(spec)
        except QueueFullError as exc:
            raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from None
        response.headers["Location"] = f"/v1/jobs/{job.id}"
        return {"id": job.id, "status": job.status}

    @app.get("/v1/jobs/{job_id}", response_model=JobState, dependencies=auth, tags=["jobs"],
             responses=_errors(401, 404, 503))
    async def status(job_id: str = Path(pattern=JOB_ID),
                     wait: float = Query(0.0, ge=0.0, le=30.0, description="seconds to wait for the job to "
                                         "finish before answering (long polling)")) -> dict[str, Any]:
        """The job's status; `result` once done, `error` once failed."""
        manager = jobs()
        await manager.wait(job_id, wait)
        snapshot = manager.get(job_id)
        if snapshot is None:
            raise HTTPException(404, f"no job {job_id} (unknown, expired, or lost in a restart)")
        return snapshot

    @app.delete("/v1/jobs/{job_id}", response_model=JobState, dependencies=auth, tags=["jobs"],
                responses=_errors(401, 404, 409, 503))
    def cancel(job_id: str = Path(pattern=JOB_ID)) -> dict[str, Any]:
        """Cancel a queued or running job."""
        try:
            snapshot = jobs().cancel(job_id)
        except JobFinishedError as exc:
            raise HTTPException(409, str(exc)) from None
        if snapshot is None:
            raise HTTPException(404, f"no job {job_id}")
        return snapshot


def add_health_route(app: FastAPI, jobs: Jobs) -> None:
    """The only call without a token."""

    @app.get("/v1/health", response_model=Health, tags=["service"])
    def health() -> dict[str, Any]:
        """Liveness and capacity: worker slots, queued and running evaluations. No token needed."""
        return jobs().health()


def add_service_routes(app: FastAPI, jobs: Jobs, auth: list[Any]) -> None:
    """The workers, the counters and the schema."""

    @app.get("/v1/workers", dependencies=auth, tags=["service"], responses=_errors(401, 503))
    def worker_list() -> list[dict[str, Any]]:
        """Each worker slot: process id, whether it is busy, how often it was replaced, its NeuronCore."""
        return jobs().runner.describe()

    @app.get("/v1/stats", dependencies=auth, tags=["service"], responses=_errors(401, 503))
    def stats() -> dict[str, Any]:
        """Counters: submitted, cache hits, coalesced duplicates, evaluations, retries, rejections."""
        return jobs().stats()

    @app.get("/openapi.json", dependencies=auth, include_in_schema=False)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())


def create_app(backend: str = "simulator", workers: int = 2, token: str = "", *, queue_limit: int | None = None,
               max_kernel_bytes: int = 1 * MiB, max_body_bytes: int = 4 * MiB, seeds: int = 5,
               limits: SandboxLimits | None = None, ray_address: str | None = None,
               neuron_options: dict[str, Any] | None = None, forbidden_paths: tuple[str, ...] = (),
               refs_root: str | None = None, runner: Runner | None = None, job_ttl: float = 3600.0,
               cache_size: int = 4096) -> FastAPI:
    """The service as an ASGI app. Workers start with the app's lifespan (i.e. when a server runs it).

    `workers` is the number of evaluation slots (worker processes; with `ray_address`, the number of
    Ray tasks in flight, default: the cluster's `neuron_core` total). `queue_limit` bounds the queued
    evaluations (default 16 per worker)."""
    if not token:
        raise ValueError("the service needs a non-empty bearer token")
    if backend not in ("simulator", "neuron"):
        raise ValueError(f"unknown backend {backend!r}; use simulator or neuron")
    private_refs = private_directory("accelopt-service-refs-") if refs_root is None else None
    config = EvaluatorConfig(backend=backend, seeds=seeds, limits=limits or SandboxLimits(),
                             refs_root=refs_root or private_refs, forbidden_paths=tuple(forbidden_paths),
                             neuron_options=tuple(sorted((neuron_options or {}).items())))
    runner = runner or make_runner(config, workers, ray_address)
    jobs = Jobs()
    app = FastAPI(title="AccelOpt profiling service", version="1", openapi_url=None, docs_url=None, redoc_url=None,
                  lifespan=job_lifespan(jobs, runner, backend, queue_limit, cache_size, job_ttl, private_refs),
                  description="Checks and profiles NKI kernels on a Trainium host (Neuron SDK) or the "
                              "built-in simulator. Every call but /v1/health needs a bearer token.")
    app.add_middleware(BodySizeLimit, limit=max_body_bytes)  # type: ignore[arg-type]
    app.add_middleware(NoCredentialsInQuery)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, invalid_request)  # type: ignore[arg-type]
    auth = [Depends(bearer_check(token))]
    add_health_route(app, jobs)
    add_job_routes(app, jobs, auth, max_kernel_bytes)
    add_service_routes(app, jobs, auth)
    return app
