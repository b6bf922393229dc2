"""The editor's service token and LLM key travel to the language server's worker in job payloads; the
kernel that worker profiles runs one process further down, confined, and finds neither."""

from __future__ import annotations

import threading

import pytest
from attack_kit import DISABLE_AUDIT_HOOK, attack_kernel, write_reference

from accelopt_core.engine import ProfilerSettings
from accelopt_core.profiling import SandboxLimits, TaskRef

pytestmark = pytest.mark.usefixtures("confined")

SECRETS = ("svc-payload-secret-1", "llm-payload-secret-2", "svc-env-secret-3", "llm-env-secret-4")

# everything a kernel could look through for a secret: its environment, every process it can see,
# its parent's memory, the folders beside its own
HUNT = DISABLE_AUDIT_HOOK + '''
import os
found = [" ".join(f"{k}={v}" for k, v in os.environ.items())]
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + [str(os.getppid())]:
    for part in ("environ", "cmdline", "mem"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as handle:
                found.append(handle.read(1 << 20).decode("utf-8", "replace"))
        except OSError as exc:
            found.append(f"{pid}/{part}: {exc.strerror}")
for folder in ("/tmp", os.path.expanduser("~"), "/root", "/home"):
    try:
        found.append(f"{folder}: {os.listdir(folder)}")
    except OSError as exc:
        found.append(f"{folder}: {exc.strerror}")
raise RuntimeError("GOT " + " | ".join(found))
'''


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> TaskRef:
    return write_reference(tmp_path_factory.mktemp("reference"))


def test_the_language_server_workers_payload_secrets_never_reach_the_kernel(
        task: TaskRef, monkeypatch: pytest.MonkeyPatch) -> None:
    from accelopt_core.editor_api import ProfileRequest
    from server.worker import answer

    monkeypatch.setenv("ACCELOPT_SERVICE_TOKEN", "svc-env-secret-3")
    monkeypatch.setenv("ACCELOPT_LLM_API_KEY", "llm-env-secret-4")
    profiler = ProfilerSettings(token="svc-payload-secret-1", seeds=1, limits=SandboxLimits(30.0, 2048))
    request = ProfileRequest(source=attack_kernel(HUNT), task=task, hardware="trn1", profiler=profiler, check=True)
    reply = answer(request, threading.Event(), lambda event: None)
    assert reply.result is not None
    error = reply.result.error
    assert error is not None and "GOT" in error
    for secret in SECRETS:
        assert secret not in error
