"""One module per LSP feature. Each has `register(server)`; handlers only translate between LSP types
and the session (server/session.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..server import AccelOptServer


def register_all(server: AccelOptServer) -> None:
    from . import code_actions, code_lens, commands, diagnostics, documents, hover, lifecycle, report, settings, watcher

    for module in (lifecycle, settings, documents, diagnostics, code_lens, hover, code_actions, commands, report,
                   watcher):
        module.register(server)
