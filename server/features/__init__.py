"""One module per LSP feature. Each has `register(server)`; handlers only translate between LSP types
and the session (server/session.py). The features import the server object, never the reverse."""

from __future__ import annotations

from ..server import AccelOptServer
from . import code_actions, code_lens, commands, diagnostics, documents, hover, lifecycle, report, settings, watcher


def create_server() -> AccelOptServer:
    """A server with every feature registered (a fresh one per call, so tests can build their own)."""
    server = AccelOptServer()
    for module in (lifecycle, settings, documents, diagnostics, code_lens, hover, code_actions, commands, report,
                   watcher):
        module.register(server)
    return server
