"""RemoteProfiler, the client the search and the language server use: against the real service, and
against a scripted stub for retries, back-pressure and unreachable services."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from servicekit import TINY_REFERENCE, Service, free_port, service_process, tiny_kernel

from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.profiling.remote import RemoteProfiler
from accelopt_core.profiling.sandbox import CANCELLED


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with service_process(tmp_path_factory.mktemp("remote"), "--workers", "2", "--seeds", "2") as running:
        yield running


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> TaskRef:
    path = tmp_path_factory.mktemp("task") / "tiny_ref.py"
    path.write_text(TINY_REFERENCE)
    return TaskRef(reference=str(path))


def test_profile_through_the_service_matches_a_local_profile(service: Service, reference: TaskRef) -> None:
    remote = RemoteProfiler(service.url, service.token).profile(tiny_kernel(401), reference, "trn2",
                                                                kernel_label="kernels/double.py")
    local = SimulatorProfiler(seeds=1).profile(tiny_kernel(401), reference, "trn2")
    assert remote.ok and remote.correct is True and len(remote.seeds) == 2
    assert remote.kernel == "kernels/double.py" and remote.task == "tiny" and remote.backend == "simulator"
    assert remote.latency_ms == pytest.approx(local.latency_ms) and remote.to_dict().keys() == local.to_dict().keys()


def test_the_launch_grid_travels_to_the_service(service: Service, reference: TaskRef) -> None:
    # the same doubling, but every program doubles its own 64 rows: right only on a grid of 2
    kernel = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n@nki.jit\ndef kernel(x):\n"
              "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
              "    rows = nl.ds(nl.program_id(0) * 64, 64)\n"
              "    nl.store(out[rows, :], value=nl.multiply(nl.load(x[rows, :]), 2.0))\n    return out\n")
    gridded = TaskRef(reference=reference.reference, grid=(2,))
    result = RemoteProfiler(service.url, service.token).profile(kernel, gridded)
    assert result.ok and result.correct is True and result.profile["spmd"]["grids"] == [[2]]
    assert RemoteProfiler(service.url, service.token).profile(kernel, reference).correct is False


SIZED_REFERENCE = """import numpy as np

VARIANTS = {"wide": {"cols": 256}, "narrow": {"cols": 64}}


def make_inputs(rng, cols):
    return [rng.standard_normal((128, cols), dtype=np.float32)]


def reference(x):
    return 2.0 * x
"""


def test_a_references_size_variant_travels_to_the_service(service: Service, tmp_path: Path) -> None:
    """`--reference ref.py:narrow` profiles the narrow size on the service too (it was refused: the job carried
    the reference's text but not which of its sizes)."""
    (tmp_path / "sized_ref.py").write_text(SIZED_REFERENCE)
    remote = RemoteProfiler(service.url, service.token)
    for variant, cols in (("narrow", 64), (None, 256)):
        result = remote.profile(tiny_kernel(403), TaskRef(reference=str(tmp_path / "sized_ref.py"), variant=variant))
        assert result.ok and result.correct is True, result.error
        assert result.profile["hbm_read_bytes"] == 128 * cols * 4


def test_named_task_and_explicit_seeds(service: Service) -> None:
    from accelopt_core.tasks.registry import task_files

    kernel = Path(task_files("silu").kernel).read_text()
    profiler = RemoteProfiler(service.url, service.token, check_variant="small")
    result = profiler.profile(kernel, TaskRef("silu"), seeds=[7, 8])
    assert result.ok and result.correct is True and result.seeds == [7, 8]


def test_wrong_token_is_reported_not_hidden_by_fallback(service: Service, reference: TaskRef) -> None:
    result = RemoteProfiler(service.url, "wrong-token", allow_fallback=True).profile(tiny_kernel(), reference)
    assert result.backend == "remote" and "refused the token (HTTP 401)" in result.error


def test_invalid_kernel_is_reported(service: Service, reference: TaskRef) -> None:
    result = RemoteProfiler(service.url, service.token).profile("x = 1\n", reference)
    assert "HTTP 422" in result.error and "the file defines no function" in result.error


def test_unreachable_service_has_a_clear_message(reference: TaskRef) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = RemoteProfiler(url, "token", retries=1).profile(tiny_kernel(), reference)
    assert result.error.startswith(f"profiling service at {url} is unreachable: ")
    assert "Connection refused" in result.error or "ConnectionRefused" in result.error
    assert result.backend == "remote" and result.latency_ms is None and time.monotonic() - started < 5


def test_fallback_to_the_simulator_only_when_allowed(reference: TaskRef) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = RemoteProfiler(url, "token", retries=0, allow_fallback=True,
                            fallback=SimulatorProfiler(seeds=1)).profile(tiny_kernel(), reference)
    assert result.ok and result.backend == "simulator" and result.correct is True
    assert f"profiling service at {url} is unreachable" in result.profile["fallback"]


def test_cancel_stops_the_remote_job(service: Service, reference: TaskRef) -> None:
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    started = time.monotonic()
    result = RemoteProfiler(service.url, service.token).profile(tiny_kernel(402, sleep=30), reference, cancel=cancel)
    assert result.error == CANCELLED and time.monotonic() - started < 5
    with service.client() as client:
        deadline = time.monotonic() + 5
        while client.get("/v1/stats").json()["cancelled"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/v1/stats").json()["cancelled"] >= 1


def test_overall_timeout_cancels_the_job(service: Service, reference: TaskRef) -> None:
    result = RemoteProfiler(service.url, service.token, timeout=1.5).profile(tiny_kernel(403, sleep=30), reference)
    assert result.error == f"profiling service at {service.url} did not finish the job within 1.5 s"


class Script:
    """A stub service answering each call with the next scripted (status, headers, body)."""

    def __init__(self, answers: list[tuple[int, dict[str, str], Any]]):
        self.answers = answers
        self.calls: list[tuple[float, str, str]] = []

    def serve(self) -> tuple[ThreadingHTTPServer, str]:
        script = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                script.calls.append((time.monotonic(), self.command, self.path))
                status, headers, body = script.answers.pop(0) if script.answers else (500, {}, {"detail": "over"})
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer  # noqa: N815 - the names http.server looks up

            def log_message(self, *args: Any) -> None:
                return None

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}"


DONE = {"id": "a" * 32, "status": "done", "error": None,
        "result": {"kernel": "candidate.py", "task": "tiny", "hardware": "trn1", "backend": "neuron",
                   "latency_ms": 0.5, "correct": True, "seeds": [1], "lines": [], "hbm_read_bytes": 10}}


def test_retries_5xx_and_honours_retry_after(reference: TaskRef) -> None:
    script = Script([(503, {}, {"detail": "busy"}), (429, {"Retry-After": "1"}, {"detail": "full"}),
                     (202, {}, {"id": "a" * 32, "status": "queued"}), (502, {}, "bad gateway"), (200, {}, DONE)])
    server, url = script.serve()
    try:
        result = RemoteProfiler(url, "token", retries=2).profile(tiny_kernel(), reference)
    finally:
        server.shutdown()
    assert result.ok and result.backend == "neuron" and result.latency_ms == 0.5
    assert result.profile["hbm_read_bytes"] == 10
    times = [t for t, _, _ in script.calls]
    assert [m for _, m, _ in script.calls] == ["POST", "POST", "POST", "GET", "GET"]
    assert times[2] - times[1] >= 0.95  # waited as Retry-After said


def test_persistent_5xx_is_unreachable_after_the_retries(reference: TaskRef) -> None:
    script = Script([(500, {}, {"detail": "boom"})] * 3)
    server, url = script.serve()
    try:
        result = RemoteProfiler(url, "token", retries=2).profile(tiny_kernel(), reference)
    finally:
        server.shutdown()
    assert len(script.calls) == 3 and result.error == f"profiling service at {url} is unreachable: HTTP 500: boom"


def test_failed_job_is_reported(reference: TaskRef) -> None:
    failed = {**DONE, "status": "failed", "result": None, "error": "the worker process running this job died"}
    script = Script([(202, {}, {"id": "a" * 32, "status": "queued"}), (200, {}, failed)])
    server, url = script.serve()
    try:
        result = RemoteProfiler(url, "token").profile(tiny_kernel(), reference)
    finally:
        server.shutdown()
    assert result.error == f"profiling service at {url} could not profile the kernel: {failed['error']}"


def test_optimize_profiles_candidates_through_the_service(service: Service, tmp_path: Path) -> None:
    """`accelopt optimize --backend remote`: the search's evaluations go to the service."""
    import subprocess
    import sys

    from accelopt_core.tasks.registry import task_files

    kernel = tmp_path / "silu.py"
    kernel.write_text(Path(task_files("silu").kernel).read_text())
    token_file = tmp_path / "token"
    token_file.write_text(service.token)
    run = subprocess.run([sys.executable, "-m", "accelopt_core", "optimize", str(kernel), "--task", "silu",
                          "--preset", "quick", "--backend", "remote", "--service-url", service.url,
                          "--token-file", str(token_file), "--db", str(tmp_path / "m.db")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert float(run.stdout.split("speedup ")[1].split("x")[0]) > 1.04
    assert (tmp_path / "silu.optimized.py").exists()
