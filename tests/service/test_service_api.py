"""The HTTP API end to end: a real `accelopt serve` process on loopback, real HTTP requests."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from servicekit import TINY_REFERENCE, Service, service_process, tiny_job, tiny_kernel  # noqa: E402

from accelopt_core.profiling import SimulatorProfiler, TaskRef  # noqa: E402
from accelopt_core.tasks.registry import task_files  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from attack_kit import DISABLE_AUDIT_HOOK  # noqa: E402


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with service_process(tmp_path_factory.mktemp("api"), "--workers", "2", "--seeds", "2") as running:
        yield running


def test_health_needs_no_token_and_reports_capacity(service: Service) -> None:
    health = httpx.get(f"{service.url}/v1/health", trust_env=False).json()
    assert health["status"] == "ok" and health["backend"] == "simulator" and health["workers"] == 2
    assert {"queued", "running", "queue_limit"} <= set(health)


def test_job_result_is_the_profile_json(service: Service, tmp_path: Path) -> None:
    with service.client() as client:
        created = client.post("/v1/jobs", json=tiny_job(variant=101, kernel_label="double.py"))
        assert created.status_code == 202, created.text
        assert created.headers["location"] == f"/v1/jobs/{created.json()['id']}"
        state = service.wait_job(client, created.json()["id"])
    assert state["status"] == "done" and state["error"] is None and state["cached"] is False
    result = state["result"]
    assert result["correct"] is True and result["backend"] == "simulator" and result["task"] == "tiny"
    assert result["kernel"] == "double.py" and len(result["seeds"]) == 2
    # the same keys as `accelopt profile --json` of the same kernel on this machine
    reference = tmp_path / "tiny_ref.py"
    reference.write_text(TINY_REFERENCE)
    local = SimulatorProfiler(seeds=1).profile(tiny_kernel(101), TaskRef(reference=str(reference))).to_dict()
    assert set(result) == set(local)
    assert result["latency_ms"] == pytest.approx(local["latency_ms"])


def test_repeated_job_is_answered_from_the_cache(service: Service) -> None:
    with service.client() as client:
        first = service.wait_job(client, client.post("/v1/jobs", json=tiny_job(variant=102)).json()["id"])
        again = client.post("/v1/jobs", json=tiny_job(variant=102))
        assert again.json()["status"] == "done"
        second = client.get(f"/v1/jobs/{again.json()['id']}").json()
    assert second["cached"] is True and second["result"] == first["result"]


def test_named_task(service: Service) -> None:
    kernel = Path(task_files("silu").kernel).read_text()
    with service.client() as client:
        state = service.wait_job(client, client.post("/v1/jobs", json={
            "kernel": kernel, "task": "silu", "check_variant": "small", "hardware": "trn2"}).json()["id"])
    assert state["status"] == "done", state
    assert state["result"]["task"] == "silu" and state["result"]["hardware"] == "trn2"
    assert state["result"]["correct"] is True and state["result"]["peak_percent"] > 0


def test_kernel_error_is_a_result_and_bad_reference_a_failure(service: Service) -> None:
    broken = tiny_kernel(103).replace("nl.load(x)", "nl.load(x) + undefined_name")
    with service.client() as client:
        state = service.wait_job(client, client.post("/v1/jobs", json={**tiny_job(), "kernel": broken}).json()["id"])
        assert state["status"] == "done" and "undefined_name" in state["result"]["error"]
        assert state["result"]["error_line"] is not None
        bad = client.post("/v1/jobs", json={**tiny_job(104), "reference": "import numpy\nraise RuntimeError('no')\n"})
        failed = service.wait_job(client, bad.json()["id"])
    assert failed["status"] == "failed" and "RuntimeError" in failed["error"]


def test_kernels_cannot_read_the_token_file(service: Service) -> None:
    spy = tiny_kernel(109).replace("def kernel(x):\n",
                                   f"def kernel(x):\n    open({str(service.token_file)!r}).read()\n")
    with service.client() as client:
        state = service.wait_job(client, client.post("/v1/jobs", json={**tiny_job(), "kernel": spy}).json()["id"])
    assert state["status"] == "done" and "not allowed" in state["result"]["error"]
    assert service.token not in str(state)


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/jobs"), ("GET", "/v1/jobs/" + "0" * 32),
                                              ("DELETE", "/v1/jobs/" + "0" * 32), ("GET", "/v1/workers"),
                                              ("GET", "/v1/stats"), ("GET", "/openapi.json")])
def test_missing_or_wrong_token_is_refused(service: Service, method: str, path: str) -> None:
    body = tiny_job(variant=105) if method == "POST" else None
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {service.token}"},
                    {"Authorization": f"Bearer {service.token}x"}):
        answer = httpx.request(method, service.url + path, json=body, headers=headers, trust_env=False)
        assert answer.status_code == 401, (headers, answer.text)
        assert answer.headers["www-authenticate"] == "Bearer"


def test_openapi_spec_is_served_with_the_token(service: Service) -> None:
    with service.client() as client:
        spec = client.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.") and "/v1/jobs" in spec["paths"] and "/v1/jobs/{job_id}" in spec["paths"]
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


def test_oversized_requests_are_refused(service: Service) -> None:
    with service.client() as client:
        huge_kernel = tiny_kernel() + "#" * (1024 * 1024)
        assert client.post("/v1/jobs", json={**tiny_job(), "kernel": huge_kernel}).status_code == 413
        body = b'{"kernel": "' + b"x" * (5 * 1024 * 1024) + b'"}'
        answer = client.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 413
        chunked = client.post("/v1/jobs", content=iter([b"x" * (1024 * 1024)] * 5),
                              headers={"Content-Type": "application/json"})
        assert chunked.status_code == 413


@pytest.mark.parametrize(("change", "needle"), [
    ({"kernel": "def kernel(:\n"}, "syntax error"),
    ({"kernel": "x = 1\n"}, "the file defines no function"),
    ({"reference": None, "task": "no_such_task"}, "unknown task"),
    ({"task": "silu"}, "exactly one"),
    ({"reference": "def make_inputs(:\n"}, "syntax error"),
    ({"hardware": "trn9"}, "trn1"),
    ({"surprise": 1}, "extra"),
    ({"reference": None, "task": "silu", "reference_variant": "small"}, "name:variant"),
    ({"reference_variant": "../x"}, "pattern"),
])
def test_invalid_jobs_are_refused_with_a_reason(service: Service, change: dict, needle: str) -> None:
    with service.client() as client:
        answer = client.post("/v1/jobs", json={**tiny_job(), **change})
    assert answer.status_code == 422 and needle in answer.text.lower()


def test_unknown_job_is_404(service: Service) -> None:
    with service.client() as client:
        assert client.get("/v1/jobs/" + "f" * 32).status_code == 404
        assert client.delete("/v1/jobs/" + "f" * 32).status_code == 404


def test_cancel_running_job_then_finished_job_is_409(service: Service) -> None:
    with service.client() as client:
        job_id = client.post("/v1/jobs", json=tiny_job(variant=106, sleep=30)).json()["id"]
        deadline = time.monotonic() + 20
        while client.get(f"/v1/jobs/{job_id}").json()["status"] != "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        cancelled = client.delete(f"/v1/jobs/{job_id}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert client.delete(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"  # idempotent
        # the worker is free again well before the 30 s kernel would have ended
        done = service.wait_job(client, client.post("/v1/jobs", json=tiny_job(variant=107)).json()["id"], 20)
        assert done["status"] == "done"
        assert client.delete(f"/v1/jobs/{done['id']}").status_code == 409


def test_identical_jobs_in_flight_share_one_evaluation(service: Service) -> None:
    with service.client() as client:
        before = client.get("/v1/stats").json()
        ids = [client.post("/v1/jobs", json=tiny_job(variant=108, sleep=1)).json()["id"] for _ in range(3)]
        states = [service.wait_job(client, job_id) for job_id in ids]
        after = client.get("/v1/stats").json()
    assert [s["status"] for s in states] == ["done"] * 3
    assert after["evaluations"] - before["evaluations"] == 1 and after["coalesced"] - before["coalesced"] == 2


def test_full_queue_answers_429_with_retry_after(tmp_path: Path) -> None:
    with service_process(tmp_path, "--workers", "1", "--queue-limit", "1", "--seeds", "1") as small, \
            small.client() as client:
        first = client.post("/v1/jobs", json=tiny_job(variant=201, sleep=3)).json()["id"]
        deadline = time.monotonic() + 20
        while client.get(f"/v1/jobs/{first}").json()["status"] != "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        queued = client.post("/v1/jobs", json=tiny_job(variant=202))
        refused = client.post("/v1/jobs", json=tiny_job(variant=203))
        assert queued.status_code == 202
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        health = httpx.get(f"{small.url}/v1/health", trust_env=False).json()
        assert health["queued"] == 1 and health["running"] == 1 and health["accepting"] is False
        # a duplicate of queued work is not new work: it is accepted
        duplicate = client.post("/v1/jobs", json=tiny_job(variant=202))
        assert duplicate.status_code == 202 and duplicate.json()["status"] == "queued"
        # cancelling every job of the queued evaluation frees its place
        for job_id in (queued.json()["id"], duplicate.json()["id"]):
            assert client.delete(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"
        assert client.post("/v1/jobs", json=tiny_job(variant=203)).status_code == 202
        assert client.get("/v1/stats").json()["rejected"] == 1


@pytest.fixture(scope="module")
def logged_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A service that writes its access log (info level), to check what it writes down."""
    with service_process(tmp_path_factory.mktemp("logged"), "--workers", "1", "--seeds", "1",
                         "--log-level", "info") as running:
        yield running


def test_a_lone_surrogate_in_the_kernel_is_a_clear_422_and_the_kernel_is_not_logged(logged_service: Service) -> None:
    marker = "kernel-text-that-must-not-be-logged"
    body = json.dumps({**tiny_job(), "kernel": f"# {marker}\n" + tiny_kernel(201) + "\ud800"})  # \ud800 escaped
    with logged_service.client() as client:
        answer = client.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "kernel"]
    assert "lone surrogates" in answer.json()["detail"][0]["msg"] and marker not in answer.text
    time.sleep(0.5)
    assert marker not in logged_service.log_text()


def test_a_token_in_the_query_string_is_refused_and_not_logged(logged_service: Service) -> None:
    with logged_service.client() as client:
        answer = client.get("/v1/stats", params={"token": logged_service.token, "wait": "1"})
        assert answer.status_code == 400 and "Authorization header" in answer.json()["detail"]
        assert client.get("/v1/stats").status_code == 200
    time.sleep(0.5)
    log = logged_service.log_text()
    assert "GET /v1/stats" in log and "wait=1" in log  # the access log is on, the rest of the URL is kept
    assert logged_service.token not in log


def test_kernels_cannot_read_the_token_file_even_without_the_audit_hook(service: Service) -> None:
    """The token file is not in the kernel's view at all (bubblewrap), whatever it does in its own process."""
    spy = tiny_kernel(110).replace("def kernel(x):\n", textwrap.indent(DISABLE_AUDIT_HOOK, "    ").join(
        ["def kernel(x):\n", f"    import os\n    root = os.open('/', os.O_RDONLY)\n"
         f"    raise RuntimeError(os.read(os.open({str(service.token_file)[1:]!r}, os.O_RDONLY, dir_fd=root), 99))\n"]))
    with service.client() as client:
        state = service.wait_job(client, client.post("/v1/jobs", json={**tiny_job(), "kernel": spy}).json()["id"])
    assert state["status"] == "done" and "No such file or directory" in state["result"]["error"]
    assert service.token not in str(state)
