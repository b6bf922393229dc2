"""A local OpenAI-compatible server for the LLM agent tests: it answers /v1/chat/completions with scripted
replies chosen per request (by the agent role named in the system prompt), so the real `openai` client
and the real HTTP path are exercised with no model and no network."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from accelopt_core.config import LLMSettings, Price
from accelopt_core.tasks.registry import task_files

SILU = Path(task_files("silu").kernel).read_text()
MODEL = "scripted-coder"
KEY = "sk-test-0123456789abcdef"


@dataclass
class Reply:
    """What the server does with one request: wait `delay` seconds, then answer `status` with `text`."""

    text: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    tokens_in: int | None = None  # default: prompt characters / 4
    tokens_out: int | None = None  # default: reply characters / 4
    usage: bool = True  # False: the response carries no usage block


@dataclass
class Request:
    role: str
    model: str
    system: str
    user: str
    body: dict[str, Any]
    authorization: str


def role_of(system: str) -> str:
    match = re.search(r"^# Role: (\w+)", system, re.MULTILINE)
    return match.group(1) if match else "unknown"


def kernel_in(user: str) -> str:
    """The current kernel in an executor's message (the last fenced block)."""
    return re.findall(r"```python\n(.*?)\n```", user, re.DOTALL)[-1] + "\n"


class FakeLLM:
    """The server. `respond(request)` returns a Reply or plain text; every request is recorded."""

    def __init__(self, respond: Callable[[Request], Reply | str]):
        self.respond = respond
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                messages = body["messages"]
                system = next((m["content"] for m in messages if m["role"] == "system"), "")
                user = next((m["content"] for m in messages if m["role"] == "user"), "")
                request = Request(role_of(system), body["model"], system, user, body,
                                  self.headers.get("authorization", ""))
                with outer.lock:
                    outer.requests.append(request)
                reply = outer.respond(request)
                reply = Reply(reply) if isinstance(reply, str) else reply
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.status != 200:
                    payload = {"error": {"message": reply.text or "scripted error", "type": "scripted"}}
                else:
                    tokens_in = reply.tokens_in if reply.tokens_in is not None else (len(system) + len(user)) // 4
                    tokens_out = reply.tokens_out if reply.tokens_out is not None else len(reply.text) // 4
                    payload = {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                               "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": reply.text}}]}
                    if reply.usage:
                        payload["usage"] = {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                                            "total_tokens": tokens_in + tokens_out}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout) and closed the connection

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def by_role(self, role: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.role == role]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def settings(self, **overrides: Any) -> LLMSettings:
        """Settings for this server: one model priced at $3 / $15 per million tokens."""
        values: dict[str, Any] = dict(base_url=self.url, model=MODEL, api_key=KEY, timeout=10.0, max_retries=2,
                                      max_concurrency=4, prices={MODEL: Price(3.0, 15.0)})
        values.update(overrides)
        return LLMSettings(**values)


@pytest.fixture
def fake_llm() -> Iterator[Callable[[Callable[[Request], Reply | str]], FakeLLM]]:
    servers: list[FakeLLM] = []

    def start(respond: Callable[[Request], Reply | str]) -> FakeLLM:
        server = FakeLLM(respond)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


# --- kernels and replies the scripts use -------------------------------------------------------------
FORMULA = ("            denominator = nl.add(nl.exp(nl.negative(tile)), 1.0)\n"
           "            result = nl.divide(tile, denominator)\n")


def fused(source: str) -> str:
    """The silu formula as one built-in activation: fewer instructions, same results."""
    return source.replace(FORMULA, "            result = nl.silu(tile)\n")


def widened(source: str) -> str:
    return source.replace("tile_f = min(cols, 512)", "tile_f = min(cols, 1024)")


def fenced(source: str, before: str = "Here is the rewritten kernel.") -> str:
    return f"{before}\n\n```python\n{source}```\n"


PLAN_FUSE = """Plan: replace the exp/add/divide chain with one nl.silu activation
Where: lines 16-17
Steps:
- compute result = nl.silu(tile) on the Scalar engine and drop the three vector instructions
Why faster: vector_engine_instruction_count drops by 3x and vector_engine_active_time_percent falls
Risks: none, silu is exact within tolerance"""

PLAN_WIDEN = """Plan: widen the free-axis tile from 512 to 1024 columns
Where: line 11
Steps:
- set tile_f = min(cols, 1024) so each instruction and DMA covers twice the data
Why faster: half the instructions, dma_transfer_average_bytes doubles
Risks: 1024 must divide cols; it does for both sizes"""

WIDEN_LESSON = ("Wider free-axis tiles halve the number of instructions and double the bytes per DMA, so fixed "
                "per-instruction and per-transfer overheads shrink. Use the widest tile that divides the free "
                "dimension.")

LESSON = ("Replacing a multi-instruction element-wise formula with the single built-in activation that computes it "
          "removes most vector-engine instructions and their fixed overheads. It pays whenever a formula maps "
          "onto one Scalar-engine function.")
