"""Shared pieces of the service tests: a tiny task, kernels made from it, and real servers on loopback
(a `python -m accelopt_core.service` subprocess, or uvicorn in a thread for in-process set-ups)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import httpx
except ImportError:  # tests that need the service skip themselves; the task helpers below still work
    httpx = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parents[2]

TINY_REFERENCE = textwrap.dedent('''
    """Doubling a 128 x 64 matrix: small enough that the sandbox start-up is the whole cost."""
    import numpy as np

    RTOL = 1e-6


    def make_inputs(rng):
        return [rng.standard_normal((128, 64), dtype=np.float32)]


    def reference(x):
        return x * 2.0
''')


def tiny_kernel(variant: int = 0, sleep: float = 0.0, factor: float = 2.0) -> str:
    """A kernel for TINY_REFERENCE; `variant` changes its text (a new content hash), not its meaning."""
    pause = f"    time.sleep({sleep})\n" if sleep else ""
    return (f"# variant {variant}\nimport time\n\nimport neuronxcc.nki as nki\n"
            "import neuronxcc.nki.language as nl\n\n\n@nki.jit\ndef kernel(x):\n"
            f"{pause}    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
            f"    tile = nl.load(x)\n    nl.store(out, value=nl.multiply(tile, {factor}))\n    return out\n")


def tiny_job(variant: int = 0, sleep: float = 0.0, **extra: Any) -> dict[str, Any]:
    return {"kernel": tiny_kernel(variant, sleep), "reference": TINY_REFERENCE, "reference_name": "tiny_ref.py",
            **extra}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_token(folder: Path) -> tuple[str, Path]:
    token = secrets.token_urlsafe(32)
    path = folder / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token, path


@dataclass
class Service:
    url: str
    token: str
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    token_file: Path | None = None

    def client(self, token: str | None = None, timeout: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token if token is None else token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout, trust_env=False)

    def wait_job(self, client: httpx.Client, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            state = client.get(f"/v1/jobs/{job_id}", params={"wait": 5}).json()
            if state["status"] in ("done", "failed", "cancelled"):
                return state
        tail = "\n".join(self.log_text().splitlines()[-40:])  # what the service did, for an intermittent hang
        raise AssertionError(f"job {job_id} did not finish within {timeout} s; last state {state}; "
                             f"service log:\n{tail}")

    def log_text(self) -> str:
        return self.log.read_text() if self.log and self.log.exists() else ""


def wait_healthy(url: str, process: subprocess.Popen[bytes] | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the service exited with status {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/v1/health", timeout=1.0, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the service at {url} did not become healthy")


@contextlib.contextmanager
def service_process(folder: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Service]:
    """`python -m accelopt_core.service` on a free loopback port, stopped (by its pid) afterwards."""
    token, token_file = write_token(folder)
    port = free_port()
    log = folder / f"service-{port}.log"
    command = [sys.executable, "-m", "accelopt_core.service", "--port", str(port), "--token-file", str(token_file),
               "--log-level", "warning", *args]
    with open(log, "wb") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield Service(url, token, process, log, token_file)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


@contextlib.contextmanager
def service_thread(app: Any, token: str) -> Iterator[Service]:
    """A real uvicorn server for an in-process app (e.g. one using the test's own Ray instance)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url)
        yield Service(url, token)
    finally:
        server.should_exit = True
        thread.join(20)
