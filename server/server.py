"""The pygls server object: the session it drives, what the client can do, and the features."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCProtocol, LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCResponseMessage

from . import __version__
from .session import Session


@dataclass(frozen=True)
class ClientSupport:
    """The client capabilities the features care about, read once at initialize."""

    work_done_progress: bool = False
    code_lens_refresh: bool = False
    configuration: bool = False
    document_changes: bool = False
    change_annotations: bool = False
    show_document: bool = False
    markdown_hover: bool = True
    config_registration: bool = False

    @staticmethod
    def of(caps: types.ClientCapabilities) -> ClientSupport:
        workspace = caps.workspace
        edit = workspace.workspace_edit if workspace else None
        hover = caps.text_document.hover if caps.text_document else None
        formats = hover.content_format if hover and hover.content_format else [types.MarkupKind.Markdown]
        did_change = workspace.did_change_configuration if workspace else None
        return ClientSupport(
            work_done_progress=bool(caps.window and caps.window.work_done_progress),
            code_lens_refresh=bool(workspace and workspace.code_lens and workspace.code_lens.refresh_support),
            configuration=bool(workspace and workspace.configuration),
            document_changes=bool(edit and edit.document_changes),
            change_annotations=bool(edit and edit.change_annotation_support is not None),
            show_document=bool(caps.window and caps.window.show_document and caps.window.show_document.support),
            markdown_hover=types.MarkupKind.Markdown in formats,
            config_registration=bool(did_change and did_change.dynamic_registration),
        )


ANSWERED = object()  # a request answered while it was read (see AccelOptProtocol.structure_message)


class AccelOptProtocol(LanguageServerProtocol):
    """pygls 2.1 keeps the future of every notification handled by a generator (didOpen, didChange,
    didSave, didClose: the built-in handlers) in its table of pending requests and never removes it:
    half a kilobyte per keystroke. Futures stored under ids pygls made up itself (anything but a
    client request, whose entry pygls removes when it answers) are dropped once they are done.

    A request whose parameters do not fit the protocol's types (a negative line or character, a missing
    field) is answered too, where pygls would only log it and leave the client waiting: a document
    request with "nothing here" (null, which every textDocument/ result allows), any other with the
    JSON-RPC error InvalidParams."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" not in data or not isinstance(data.get("method"), str):
                raise
            if data["method"].startswith("textDocument/"):
                self._send_data(JsonRPCResponseMessage(id=data["id"], result=None, jsonrpc=JsonRPCProtocol.VERSION))
            else:
                self._send_response(data["id"], error=exc.to_response_error())
            return ANSWERED

    def handle_message(self, message: Any) -> None:
        if message is not ANSWERED:
            super().handle_message(message)

    def _execute_handler(self, msg_id: Any, handler: Any, callback: Any, args: Any = None,
                         kwargs: Any = None) -> None:
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        answered = isinstance(callback, partial) and callback.func == self._send_handler_result
        stored = self._request_futures.get(msg_id)
        if stored is None or answered:
            return
        loop = asyncio.get_running_loop()

        def drop(key: Any, done: Future[Any]) -> None:
            if self._request_futures.get(key) is done:
                del self._request_futures[key]

        # Later, on the loop: a future may complete while pygls iterates the table (shutdown cancels them all).
        stored.add_done_callback(lambda done, key=msg_id: loop.call_soon_threadsafe(drop, key, done))


class AccelOptServer(LanguageServer):
    """Holds the session; features (server/features/*) register the LSP handlers on it."""

    def __init__(self) -> None:
        super().__init__("accelopt", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         protocol_cls=AccelOptProtocol)
        self.session = Session()
        self.client = ClientSupport()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watcher: Any = None  # the watchdog observer, while running
        self.deliver_change: Callable[[str], None] = lambda path: None  # set by features/watcher.py
        # From initializationOptions: who the client is ("vscode" shows command results itself) and
        # whether it shows `accelopt/report` in a panel of its own (then no text report is opened).
        self.client_name: str | None = None
        self.report_panel = False
        self.progress_uris: dict[str, str] = {}  # $/progress token -> the document its Optimize runs on
