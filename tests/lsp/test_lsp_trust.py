"""Workspace trust and where secrets go: an untrusted workspace runs none of its kernels; a service token
goes to the backend the server was launched with, and to a host named by workspace settings only once
the user said yes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from lsp_client import SMALL_SILU, running_server, wait_for
from lsprotocol import types

from server.config import Settings, origin, secret_destinations
from server.features.settings import read_secrets

TOKEN = "editor-service-token-0042"


@contextlib.contextmanager
def fake_service() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that records the Authorization header of every request and refuses it (401)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            body = b'{"detail": "refused by the test"}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _refuse  # noqa: N815

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.asyncio
async def test_an_untrusted_workspace_runs_none_of_its_kernels(workspace: Path, memory_db: Path) -> None:
    async with running_server(workspace, memory_db, init_options={"workspaceTrusted": False}) as editor:
        uri = editor.open(workspace / "silu_small.py", SMALL_SILU)
        await wait_for(lambda: any("not trusted" in m.message for m in editor.client.messages), 30,
                       what="the notice that nothing runs")
        optimized = await editor.command("accelopt.optimize", uri)
        assert "not trusted" in optimized["error"]
        status = await editor.status()
        assert status["profileLane"]["started"] == 0 and status["searchLane"]["started"] == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("answer", ["Send", "Don't send"])
async def test_a_token_goes_to_a_host_from_workspace_settings_only_when_the_user_says_so(
        workspace: Path, memory_db: Path, answer: str) -> None:
    with fake_service() as (launched_with, _), fake_service() as (from_workspace, seen):
        init = {"backend": launched_with, "secrets": {"serviceToken": TOKEN}}
        async with running_server(workspace, memory_db, init_options=init,
                                  configuration={"accelopt": {"backend": from_workspace}}) as editor:
            questions: list[str] = []

            def ask(params: types.ShowMessageRequestParams) -> types.MessageActionItem:
                questions.append(params.message)
                return types.MessageActionItem(title=answer)

            editor.client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)(ask)
            editor.open(workspace / "silu_small.py", SMALL_SILU)
            await wait_for(lambda: questions, 60, what="the question about the new host")
            assert from_workspace.removeprefix("http://") in questions[0]
            await wait_for(lambda: seen, 60, what="a request to the workspace's backend")
            if answer == "Send":
                await wait_for(lambda: f"Bearer {TOKEN}" in seen, 60, what="the token, once approved")
            else:
                await wait_for(lambda: any("is not sent to" in m.message for m in editor.client.messages), 30,
                               what="the notice that the token stays")
                assert all(TOKEN not in header for header in seen)


def test_secret_destinations_are_origins() -> None:
    assert origin("HTTPS://Trn.Example.com/v1/") == "https://trn.example.com:443"
    assert origin("http://127.0.0.1:8765") == "http://127.0.0.1:8765"
    assert origin("not a url") is None
    settings = Settings(backend="https://a.example", llm_endpoint="http://b.example:8000/v1")
    assert secret_destinations(settings) == {"service_token": "https://a.example:443",
                                             "llm_api_key": "http://b.example:8000"}
    assert secret_destinations(Settings()) == {}


def test_the_environments_service_token_is_a_secret_of_the_session_not_of_the_worker() -> None:
    assert read_secrets({}, {"ACCELOPT_SERVICE_TOKEN": "from-env"})["service_token"].reveal() == "from-env"
    given = read_secrets({"secrets": {"serviceToken": "from-editor"}}, {"ACCELOPT_SERVICE_TOKEN": "from-env"})
    assert given["service_token"].reveal() == "from-editor"
