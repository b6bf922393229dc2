"""A worker process killed in the middle of a job: replaced, the job retried once, then failed clearly."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from servicekit import Service, service_process, tiny_job  # noqa: E402


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with service_process(tmp_path_factory.mktemp("workers"), "--workers", "1", "--seeds", "1") as running:
        yield running


def kernel_sandboxes_of(pid: int) -> list[int]:
    """The children of `pid` that run a kernel's sandbox (`-m accelopt_core...`), not the one-off bwrap probe
    a fresh worker runs before its first job."""
    found = []
    for child in children_of(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as handle:
                if b"\0-m\0accelopt_core." in handle.read():
                    found.append(child)
        except OSError:
            continue
    return found


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def running_worker(client: httpx.Client, job_id: str, attempt: int, timeout: float = 20.0) -> tuple[int, int]:
    """Wait until `job_id` runs its `attempt`-th attempt inside its sandbox; (worker pid, sandbox pid)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = client.get(f"/v1/jobs/{job_id}").json()
        if state["status"] == "running" and state["attempts"] == attempt:
            worker = client.get("/v1/workers").json()[state["slot"]]
            if worker["alive"]:
                sandboxes = kernel_sandboxes_of(worker["pid"])
                if sandboxes:
                    return worker["pid"], sandboxes[0]
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never ran attempt {attempt}")


def test_killed_worker_is_replaced_and_the_job_retried(service: Service) -> None:
    with service.client() as client:
        job_id = client.post("/v1/jobs", json=tiny_job(variant=301, sleep=4)).json()["id"]
        worker, sandbox = running_worker(client, job_id, 1)
        os.kill(worker, signal.SIGKILL)
        # the killed worker's sandboxed child is stopped, not left running unsupervised
        deadline = time.monotonic() + 3
        while alive(sandbox) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(sandbox)
        state = service.wait_job(client, job_id)
        workers = client.get("/v1/workers").json()
    assert state["status"] == "done" and state["attempts"] == 2 and state["result"]["correct"] is True
    assert workers[0]["pid"] != worker and workers[0]["alive"] and workers[0]["restarts"] == 1


def test_worker_killed_twice_fails_the_job_clearly(service: Service) -> None:
    with service.client() as client:
        job_id = client.post("/v1/jobs", json=tiny_job(variant=302, sleep=4)).json()["id"]
        os.kill(running_worker(client, job_id, 1)[0], signal.SIGKILL)
        os.kill(running_worker(client, job_id, 2)[0], signal.SIGKILL)
        state = service.wait_job(client, job_id)
        assert state["status"] == "failed" and state["attempts"] == 2
        assert "died 2 time(s); giving up" in state["error"] and "SIGKILL" in state["error"]
        # the slot works again afterwards
        after = service.wait_job(client, client.post("/v1/jobs", json=tiny_job(variant=303)).json()["id"])
    assert after["status"] == "done"


def test_killed_sandbox_child_is_retried_once(service: Service) -> None:
    with service.client() as client:
        job_id = client.post("/v1/jobs", json=tiny_job(variant=304, sleep=4)).json()["id"]
        _, sandbox = running_worker(client, job_id, 1)
        os.kill(sandbox, signal.SIGKILL)
        state = service.wait_job(client, job_id)
    assert state["status"] == "done" and state["attempts"] == 2 and state["result"]["error"] is None
