"""500 jobs from 20 concurrent clients: none lost, none run twice, repeats answered from the cache."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from servicekit import service_process, tiny_job

CLIENTS, VARIANTS = 20, 25  # 20 clients x 25 jobs; every variant submitted once by every client
REPEATS = 3  # then each client submits its first 3 kernels once more


def test_500_concurrent_jobs(tmp_path: Path) -> None:
    outcomes: dict[int, list[tuple[int, str, dict]]] = {}
    errors: list[BaseException] = []
    repeats: list[str] = []
    with service_process(tmp_path, "--workers", "2", "--seeds", "1") as service:
        start = threading.Barrier(CLIENTS)

        def client_body(index: int) -> None:
            try:
                with service.client() as client:
                    start.wait()
                    submitted = []
                    for i in range(VARIANTS):
                        variant = (index + i) % VARIANTS
                        while True:
                            answer = client.post("/v1/jobs", json=tiny_job(variant, kernel_label=f"v{variant}.py"))
                            if answer.status_code != 429:
                                break
                            time.sleep(float(answer.headers["retry-after"]))
                        assert answer.status_code == 202, answer.text
                        submitted.append((variant, answer.json()["id"]))
                    outcomes[index] = [(variant, job_id, service.wait_job(client, job_id, 120))
                                       for variant, job_id in submitted]
                    # the same kernels again, now that they have run: answered at once from the cache
                    for variant, _, first in outcomes[index][:REPEATS]:
                        again = client.post("/v1/jobs", json=tiny_job(variant, kernel_label=f"v{variant}.py"))
                        assert again.status_code == 202 and again.json()["status"] == "done"
                        state = client.get(f"/v1/jobs/{again.json()['id']}").json()
                        assert state["cached"] is True and state["result"] == first["result"]
                        repeats.append(state["id"])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=client_body, args=(i,)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
        with service.client() as client:
            stats = client.get("/v1/stats").json()
    assert not errors, errors[0]
    jobs = [job for per_client in outcomes.values() for job in per_client]
    assert len(jobs) == CLIENTS * VARIANTS
    assert len({job_id for _, job_id, _ in jobs}) == len(jobs)  # every submission got its own job
    for variant, job_id, state in jobs:
        assert state["id"] == job_id and state["status"] == "done", state
        assert state["result"]["kernel"] == f"v{variant}.py" and state["result"]["correct"] is True
    # each distinct kernel evaluated exactly once; every repeat served by the cache or by sharing
    assert stats["submitted"] == CLIENTS * (VARIANTS + REPEATS)
    assert stats["evaluations"] == VARIANTS
    assert stats["cache_hits"] + stats["coalesced"] == CLIENTS * (VARIANTS + REPEATS) - VARIANTS
    assert stats["cache_hits"] >= len(repeats) == CLIENTS * REPEATS
