"""Messages no well-behaved client sends, written as raw JSON-RPC (pygls' own client refuses to build
them): each request still gets its answer."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lsp_client import ROOT, SMALL_SILU, server_environment


class RawClient:
    """JSON-RPC over the server's stdio, with nothing in between."""

    def __init__(self, process: subprocess.Popen[bytes]):
        self.process = process
        self.pending = b""

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def _next(self, deadline: float) -> dict[str, Any] | None:
        assert self.process.stdout is not None
        while True:
            header, _, rest = self.pending.partition(b"\r\n\r\n")
            if _:
                length = next(int(line.split(b":")[1]) for line in header.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                if len(rest) >= length:
                    self.pending = rest[length:]
                    return json.loads(rest[:length])
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            self.pending += os.read(self.process.stdout.fileno(), 1 << 16)

    def answer(self, request_id: int, timeout: float = 30.0) -> dict[str, Any] | None:
        """The response to `request_id`; requests from the server meanwhile get an empty answer."""
        deadline = time.monotonic() + timeout
        while (message := self._next(deadline)) is not None:
            if message.get("id") == request_id and "method" not in message:
                return message
            if "method" in message and "id" in message:
                self.send({"id": message["id"], "result": None})
        return None


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[RawClient]:
    process = subprocess.Popen([sys.executable, "-m", "server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, cwd=ROOT, env=server_environment(tmp_path / "memory.db"))
    client = RawClient(process)
    try:
        client.send({"id": 1, "method": "initialize", "params": {"capabilities": {}}})
        assert client.answer(1) is not None
        client.send({"method": "initialized", "params": {}})
        yield client
        client.send({"id": 99, "method": "shutdown"})
        client.answer(99)
        client.send({"method": "exit"})
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("position", [{"line": -1, "character": 0}, {"line": 3, "character": -5}])
def test_hover_at_a_negative_position_gets_an_empty_answer(raw: RawClient, tmp_path: Path, position: dict) -> None:
    """Pygls could not read the position and left the request unanswered."""
    uri = (tmp_path / "silu_small.py").as_uri()
    raw.send({"method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": SMALL_SILU}}})
    raw.send({"id": 2, "method": "textDocument/hover", "params": {"textDocument": {"uri": uri}, "position": position}})
    assert raw.answer(2) == {"jsonrpc": "2.0", "id": 2, "result": None}
    raw.send({"id": 3, "method": "textDocument/hover", "params": {"textDocument": {"uri": uri},
                                                                   "position": {"line": 0, "character": 0}}})
    assert raw.answer(3) is not None  # and it goes on serving


def test_another_unreadable_request_gets_invalid_params(raw: RawClient) -> None:
    raw.send({"id": 4, "method": "workspace/executeCommand", "params": {"command": 7}})
    answer = raw.answer(4)
    assert answer is not None and answer["error"]["code"] == -32602
