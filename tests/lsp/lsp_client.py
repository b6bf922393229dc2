"""Shared by the language server tests: a real LSP client (pytest-lsp) talking to the real server
process (`python -m server`) over stdio, in a temporary workspace with a temporary memory database."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[2]
SILU = (ROOT / "nkibench" / "kernels" / "silu.py").read_text()
SILU_REFERENCE = ROOT / "nkibench" / "reference" / "silu.py"
AGENTS = ROOT / "tests" / "search" / "scripted_agent.py"
SMALL_SILU = "# accelopt: task=silu:small\n" + SILU


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line containing `needle`."""
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def plain(value: Any) -> Any:
    """Custom requests come back as pygls' namedtuples; tests want dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


async def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05,
                   what: str = "condition") -> Any:
    """Poll until `predicate()` (possibly async) returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)


def position_offset(text: str, position: types.Position) -> int:
    """Offset of an LSP position (UTF-16 units; our test files are ASCII, so characters)."""
    lines = text.splitlines(keepends=True)
    if position.line >= len(lines):
        return len(text)
    return sum(len(line) for line in lines[: position.line]) + position.character


def apply_edit(text: str, edit: types.WorkspaceEdit, uri: str) -> str:
    """What an editor does with a WorkspaceEdit for one document."""
    edits: list[Any] = []
    for change in edit.document_changes or []:
        if isinstance(change, types.TextDocumentEdit) and change.text_document.uri == uri:
            edits.extend(change.edits)
    edits.extend((edit.changes or {}).get(uri, []))
    for item in sorted(edits, key=lambda e: position_offset(text, e.range.start), reverse=True):
        start, end = position_offset(text, item.range.start), position_offset(text, item.range.end)
        text = text[:start] + item.new_text + text[end:]
    return text


class Editor:
    """A thin editor over the client: open, change, save, and ask the server things."""

    def __init__(self, client: LanguageClient, workspace: Path):
        self.client = client
        self.workspace = workspace
        self.texts: dict[str, str] = {}
        self.versions: dict[str, int] = {}

    def open(self, path: Path, text: str | None = None) -> str:
        if text is None:
            text = path.read_text()
        else:
            path.write_text(text)
        uri = from_fs_path(str(path))
        assert uri
        self.texts[uri], self.versions[uri] = text, 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        return uri

    def change(self, uri: str, text: str) -> None:
        self.versions[uri] += 1
        self.texts[uri] = text
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))

    def save(self, uri: str, write: bool = True) -> None:
        if write:
            path = self.client_path(uri)
            path.write_text(self.texts[uri])
        self.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))

    @staticmethod
    def client_path(uri: str) -> Path:
        from pygls.uris import to_fs_path

        return Path(to_fs_path(uri) or "")

    async def report(self, uri: str) -> dict[str, Any] | None:
        return plain(await self.client.protocol.send_request_async("accelopt/report", {"uri": uri}))

    async def status(self) -> dict[str, Any]:
        return plain(await self.client.protocol.send_request_async("accelopt/status", {}))

    async def profiled(self, uri: str, checked: bool = True, timeout: float = 90.0) -> dict[str, Any]:
        """Wait until the server has a profile (a checked one by default) of the current text."""
        async def ready() -> dict[str, Any] | None:
            report = await self.report(uri)
            if not report or report["outdated"] or not report["result"]:
                return None
            if report["taskError"] or report["result"]["error"]:
                return report
            if checked and (report["phase"] != "idle" or report["result"]["correct"] is None):
                return None
            return report
        return await wait_for(ready, timeout, 0.1, f"a profile of {uri}")

    async def lenses(self, uri: str) -> list[types.CodeLens]:
        return list(await self.client.text_document_code_lens_async(
            types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))) or [])

    async def hover(self, uri: str, line: int, character: int) -> str | None:
        """Hover at a 1-based line."""
        result = await self.client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line - 1, character)))
        if result is None:
            return None
        contents = result.contents
        return contents.value if isinstance(contents, types.MarkupContent) else str(contents)

    async def actions(self, uri: str, line: int, diagnostics: list[types.Diagnostic] | None = None
                      ) -> list[types.CodeAction]:
        found = await self.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=types.Position(line - 1, 0), end=types.Position(line - 1, 0)),
            context=types.CodeActionContext(diagnostics=diagnostics or [])))
        return [a for a in found or [] if isinstance(a, types.CodeAction)]

    def diagnostics(self, uri: str, code: str | None = None) -> list[types.Diagnostic]:
        return [d for d in self.client.diagnostics.get(uri, []) if code is None or d.code == code]

    async def command(self, name: str, *arguments: Any) -> Any:
        return plain(await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=list(arguments))))


def server_environment(memory_db: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["ACCELOPT_MEMORY_DB"] = str(memory_db)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


@contextlib.asynccontextmanager
async def running_server(workspace: Path, memory_db: Path, init_options: dict[str, Any] | None = None,
                         configuration: dict[str, Any] | None = None, capabilities: str = "visual-studio-code"
                         ) -> AsyncIterator[Editor]:
    """Start `python -m server`, initialize it as `capabilities` would, and shut it down after."""
    config = ClientServerConfig(server_command=[sys.executable, "-m", "server"],
                                server_env=server_environment(memory_db))
    client = await config.start()
    assert isinstance(client, LanguageClient)
    client.feature(types.CLIENT_REGISTER_CAPABILITY)(lambda params: None)
    refreshes: list[float] = []
    client.lens_refreshes = refreshes  # type: ignore[attr-defined]
    client.feature(types.WORKSPACE_CODE_LENS_REFRESH)(lambda params: refreshes.append(time.monotonic()))
    applied: list[types.WorkspaceEdit] = []
    client.applied_edits = applied  # type: ignore[attr-defined]

    def apply_workspace_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        applied.append(params.edit)
        return types.ApplyWorkspaceEditResult(applied=True)

    client.feature(types.WORKSPACE_APPLY_EDIT)(apply_workspace_edit)
    if configuration:
        client.set_configuration(configuration)
    uri = from_fs_path(str(workspace))
    await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities(capabilities), root_uri=uri,
        workspace_folders=[types.WorkspaceFolder(uri=uri or "", name="ws")],
        initialization_options=init_options or {}))
    try:
        yield Editor(client, workspace)
        await asyncio.wait_for(client.shutdown_session(), timeout=30)  # a clean shutdown is part of the test
        await asyncio.wait_for(client.stop(), timeout=30)  # ... and so is the server exiting after it
    except BaseException:
        await _terminate(client)
        raise


async def _terminate(client: LanguageClient) -> None:
    """After a failure, end a server nobody asked to exit: terminated, then killed. pygls' stop() only
    waits for the process, so without this a failing test would hang instead of reporting."""
    server = client._server
    if server is not None and server.returncode is None:
        server.terminate()
        try:
            await asyncio.wait_for(server.wait(), timeout=10)
        except TimeoutError:
            server.kill()
            await server.wait()
    await client.stop()
