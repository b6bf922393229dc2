"""`--ray`: jobs as Ray tasks that each need one `neuron_core`, on a local Ray instance with two of them."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from servicekit import TINY_REFERENCE, Service, service_thread, tiny_job, tiny_kernel  # noqa: E402

from accelopt_core.profiling import SandboxLimits, TaskRef  # noqa: E402
from accelopt_core.profiling.sandbox import CANCELLED  # noqa: E402
from accelopt_core.service import RayProfiler, create_app  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, resources={"neuron_core": 2}, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def service(cluster: Any) -> Iterator[Service]:
    app = create_app("simulator", 0, "ray-test-token-0123456789", ray_address="auto", seeds=1,
                     limits=SandboxLimits(seconds=60, memory_mb=4096))
    with service_thread(app, "ray-test-token-0123456789") as running:
        yield running


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> TaskRef:
    path = tmp_path_factory.mktemp("task") / "tiny_ref.py"
    path.write_text(TINY_REFERENCE)
    return TaskRef(reference=str(path))


def test_jobs_run_as_ray_tasks(service: Service) -> None:
    with service.client() as client:
        health = client.get("/v1/health").json()
        assert health["executor"] == "ray" and health["workers"] == 2
        ids = [client.post("/v1/jobs", json=tiny_job(variant)).json()["id"] for variant in range(501, 505)]
        states = [service.wait_job(client, job_id) for job_id in ids]
    assert all(s["status"] == "done" and s["result"]["correct"] is True for s in states), states


def test_ray_worker_killed_mid_job_is_retried(service: Service) -> None:
    with service.client() as client:
        job_id = client.post("/v1/jobs", json=tiny_job(variant=506, sleep=3)).json()["id"]
        worker = ray_worker_running_a_sandbox()
        os.kill(worker, signal.SIGKILL)
        state = service.wait_job(client, job_id)
    assert state["status"] == "done" and state["attempts"] == 2 and state["result"]["correct"] is True


def test_ray_profiler_for_the_search(cluster: Any, reference: TaskRef) -> None:
    profiler = RayProfiler(address=None, seeds=2, limits=SandboxLimits(seconds=60, memory_mb=4096))
    results = [None, None]

    def run(index: int) -> None:
        results[index] = profiler.profile(tiny_kernel(510 + index), reference, kernel_label=f"k{index}.py")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert [r.kernel for r in results] == ["k0.py", "k1.py"]
    assert all(r.ok and r.correct is True and r.backend == "simulator" and len(r.seeds) == 2 for r in results)
    assert profiler.profile(tiny_kernel(510), reference).latency_ms == results[0].latency_ms  # from its cache


def test_ray_profiler_cancel(cluster: Any, reference: TaskRef) -> None:
    profiler = RayProfiler(address=None, seeds=1, limits=SandboxLimits(seconds=60, memory_mb=4096))
    cancel = threading.Event()
    threading.Timer(2.0, cancel.set).start()
    started = time.monotonic()
    result = profiler.profile(tiny_kernel(520, sleep=30), reference, cancel=cancel)
    assert result.error == CANCELLED and time.monotonic() - started < 20


def ray_worker_running_a_sandbox(timeout: float = 30.0) -> int:
    """The pid of the Ray worker whose sandboxed child is running now."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
                if "accelopt_core.profiling.sandbox" not in cmdline:
                    continue
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                if Path(f"/proc/{parent}/cmdline").read_bytes().startswith(b"ray::"):
                    return parent
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.05)
    raise AssertionError("no Ray worker started a sandboxed evaluation")
