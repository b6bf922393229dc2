"""Text synchronisation: open, change, save and close, handed to the session with the current text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..server import AccelOptServer


def _is_python(uri: str, language: str | None = None) -> bool:
    return language == "python" or uri.endswith((".py", ".pyi"))


def register(server: AccelOptServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: AccelOptServer, params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        if _is_python(item.uri, item.language_id):
            ls.session.open(item.uri, item.text, item.version)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: AccelOptServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri in ls.session.documents:
            document = ls.workspace.get_text_document(uri)
            ls.session.change(uri, document.source, params.text_document.version)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def did_save(ls: AccelOptServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.session.save(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: AccelOptServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.session.documents.get(uri)
        ls.session.close(uri)
        if doc is not None and not doc.info.is_kernel:
            del ls.session.documents[uri]  # only kernels are remembered after closing
