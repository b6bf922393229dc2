"""The profiling service under load, on the simulator backend (starts its own `accelopt serve`).

1. Throughput: distinct small jobs (none answered from the cache) from several clients; jobs per second.
2. Overhead: the same kernel profiled locally (SimulatorProfiler.profile) and through the service
   (RemoteProfiler.profile on an idle service), one at a time; the difference of the medians.
3. Twice the capacity: jobs arriving at twice the measured throughput for a while; how many
   submissions are refused with 429, whether clients honouring Retry-After get every job done, and
   whether any job is lost or run twice.

Usage: python3 benchmarks/service_load.py [--workers 2] [--jobs 60] [--seconds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from accelopt_core.engine import REMOTE, ProfilerSettings, make_profiler
from accelopt_core.profiling import TaskRef

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = '''import numpy as np

RTOL = 1e-6


def make_inputs(rng):
    return [rng.standard_normal((128, 512), dtype=np.float32)]


def reference(x):
    return x * 2.0
'''


def kernel(variant: int) -> str:
    return ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n@nki.jit\ndef kernel(x):\n"
            f"    # variant {variant}\n    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
            "    nl.store(out, value=nl.multiply(nl.load(x), 2.0))\n    return out\n")


def job(variant: int) -> dict[str, Any]:
    return {"kernel": kernel(variant), "reference": REFERENCE, "reference_name": "double_ref.py"}


def start_service(folder: Path, workers: int, seeds: int, queue_limit: int | None) -> tuple[subprocess.Popen, str, str]:
    token = secrets.token_urlsafe(32)
    (folder / "token").write_text(token)
    (folder / "token").chmod(0o600)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "accelopt_core.service", "--port", str(port), "--token-file",
               str(folder / "token"), "--workers", str(workers), "--seeds", str(seeds), "--log-level", "warning"]
    if queue_limit:
        command += ["--queue-limit", str(queue_limit)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/v1/health", timeout=1, trust_env=False).status_code == 200:
                return process, url, token
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the service did not start")


def stop_service(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()


_clients: dict[tuple[str, str], httpx.Client] = {}


def shared_http(url: str, token: str) -> httpx.Client:
    """One connection pool for all submitter threads (httpx clients are thread-safe and costly to make)."""
    if (url, token) not in _clients:
        _clients[(url, token)] = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60,
                                              trust_env=False, limits=httpx.Limits(max_connections=64))
    return _clients[(url, token)]


class Client:
    """One submitter: posts a job (waiting out 429s as told), then long-polls it to the end."""

    def __init__(self, url: str, token: str):
        self.http = shared_http(url, token)
        self.refused = 0

    def run(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        while True:
            answer = self.http.post("/v1/jobs", json=body)
            if answer.status_code != 429:
                break
            self.refused += 1
            time.sleep(float(answer.headers.get("retry-after", "1")))
        answer.raise_for_status()
        job_id = answer.json()["id"]
        while True:
            state = self.http.get(f"/v1/jobs/{job_id}", params={"wait": 10}).json()
            if state["status"] in ("done", "failed", "cancelled"):
                return job_id, state


def throughput(url: str, token: str, jobs: int, clients: int, first_variant: int) -> dict[str, Any]:
    variants = list(range(first_variant, first_variant + jobs))
    results: list[tuple[str, dict[str, Any]]] = []
    lock = threading.Lock()

    def body() -> None:
        client = Client(url, token)
        while True:
            with lock:
                if not variants:
                    return
                variant = variants.pop()
            outcome = client.run(job(variant))
            with lock:
                results.append(outcome)

    started = time.perf_counter()
    threads = [threading.Thread(target=body) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    done = sum(1 for _, state in results if state["status"] == "done" and not state["cached"])
    return {"jobs": jobs, "clients": clients, "seconds": seconds, "jobs_per_second": done / seconds, "done": done}


def overhead(url: str, token: str, repeats: int, first_variant: int, folder: Path) -> dict[str, Any]:
    reference = folder / "double_ref.py"
    reference.write_text(REFERENCE)
    task = TaskRef(reference=str(reference))
    local_profiler = make_profiler(ProfilerSettings(seeds=1))
    remote_profiler = make_profiler(ProfilerSettings(REMOTE, url, token))
    local_profiler.profile(kernel(first_variant - 1), task)  # load the reference once, like a warm search
    local, remote = [], []
    for i in range(repeats):
        started = time.perf_counter()
        local_profiler.profile(kernel(first_variant + 2 * i), task)
        local.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = remote_profiler.profile(kernel(first_variant + 2 * i + 1), task)
        remote.append(time.perf_counter() - started)
        assert result.ok and result.correct, result.error
    local_ms, remote_ms = statistics.median(local) * 1000, statistics.median(remote) * 1000
    return {"repeats": repeats, "local_median_ms": local_ms, "service_median_ms": remote_ms,
            "overhead_ms": remote_ms - local_ms}


def overload(url: str, token: str, rate: float, seconds: float, first_variant: int) -> dict[str, Any]:
    """Open-loop arrivals at `rate` jobs/s for `seconds`; each job is retried after 429 until accepted."""
    count = max(1, int(rate * seconds))
    outcomes: list[tuple[str, dict[str, Any]] | None] = [None] * count
    refused = [0] * count
    started = time.perf_counter()

    def body(index: int) -> None:
        time.sleep(max(0.0, started + index / rate - time.perf_counter()))
        client = Client(url, token)
        outcomes[index] = client.run(job(first_variant + index))
        refused[index] = client.refused

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = time.perf_counter() - started
    finished = [o for o in outcomes if o is not None]
    ids = {job_id for job_id, _ in finished}
    done = sum(1 for _, state in finished if state["status"] == "done")
    return {"offered_rate": rate, "arrival_seconds": seconds, "jobs": count, "accepted": len(finished),
            "done": done, "lost": count - done, "duplicate_ids": len(finished) - len(ids),
            "refused_429": sum(refused), "share_of_submissions_refused": sum(refused) / (sum(refused) + len(finished)),
            "first_try_refusal_rate": sum(1 for r in refused if r) / count,
            "seconds_to_drain": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=1, help="seeds per correctness check (default 1)")
    parser.add_argument("--jobs", type=int, default=60, help="jobs for the throughput run")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15, help="kernels for the overhead comparison")
    parser.add_argument("--seconds", type=float, default=20.0, help="arrival window at 2x capacity")
    parser.add_argument("--queue-limit", type=int, default=8, help="service queue for the 2x run (small, so it fills)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures: dict[str, Any] = {"workers": args.workers, "seeds": args.seeds, "cpus": os.cpu_count(),
                               "load_average_at_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as folder:
        process, url, token = start_service(Path(folder), args.workers, args.seeds, None)
        try:
            throughput(url, token, 2 * args.workers, args.workers, 10**6)  # warm the workers
            figures["throughput"] = throughput(url, token, args.jobs, args.clients, 0)
            figures["overhead"] = overhead(url, token, args.repeats, 10**5, Path(folder))
        finally:
            stop_service(process)
        process, url, token = start_service(Path(folder), args.workers, args.seeds, args.queue_limit)
        try:
            throughput(url, token, 2 * args.workers, args.workers, 2 * 10**6)
            rate = 2 * figures["throughput"]["jobs_per_second"]
            figures["twice_capacity"] = overload(url, token, rate, args.seconds, 2 * 10**5)
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, trust_env=False) as client:
                figures["twice_capacity"]["service_stats"] = client.get("/v1/stats").json()
        finally:
            stop_service(process)
    for client in _clients.values():
        client.close()
    t, o, c = figures["throughput"], figures["overhead"], figures["twice_capacity"]
    print(f"throughput: {t['jobs_per_second']:.2f} jobs/s ({t['done']} distinct jobs, {args.workers} workers, "
          f"{t['clients']} clients, {t['seconds']:.1f} s)")
    print(f"overhead:   local {o['local_median_ms']:.0f} ms, through the service {o['service_median_ms']:.0f} ms "
          f"(median of {o['repeats']}): +{o['overhead_ms']:.0f} ms")
    print(f"2x load:    {c['jobs']} jobs offered at {c['offered_rate']:.2f}/s; {c['refused_429']} refusals (429, "
          f"{100 * c['share_of_submissions_refused']:.0f}% of submissions), {100 * c['first_try_refusal_rate']:.0f}% "
          f"of jobs refused at least once; {c['done']} done, "
          f"{c['lost']} lost, {c['duplicate_ids']} duplicated; drained in {c['seconds_to_drain']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
