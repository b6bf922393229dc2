"""Hovers: on the kernel's name, the profile summary table; on a kernel line, that line's share of
time, engine, instructions, bytes and loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ..describe import line_markdown, summary_markdown

if TYPE_CHECKING:
    from ..server import AccelOptServer


def register(server: AccelOptServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: AccelOptServer, params: types.HoverParams) -> types.Hover | None:
        doc = ls.session.documents.get(params.text_document.uri)
        if doc is None or not doc.info.is_kernel or doc.info.def_line is None:
            return None
        line = params.position.line + 1
        text = summary_markdown(doc) if line == doc.info.def_line else line_markdown(doc, line)
        if not text:
            return None
        kind = types.MarkupKind.Markdown if ls.client.markdown_hover else types.MarkupKind.PlainText
        return types.Hover(contents=types.MarkupContent(kind=kind, value=text))
