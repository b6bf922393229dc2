"""Custom requests: `accelopt/report` (the full profile of one kernel as JSON, for the extension's
panel) and `accelopt/status` (what the server is doing: documents, running jobs, memory)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..describe import report

if TYPE_CHECKING:
    from ..server import AccelOptServer

REPORT, STATUS = "accelopt/report", "accelopt/status"


def _field(params: Any, name: str) -> Any:
    if isinstance(params, dict):
        return params.get(name)
    return getattr(params, name, None)


def uri_of(params: Any) -> str | None:
    """`{"uri": ...}` or `{"textDocument": {"uri": ...}}`, as a dict or pygls' generic object."""
    uri = _field(params, "uri")
    if uri is None:
        document = _field(params, "textDocument") or _field(params, "text_document")
        uri = _field(document, "uri") if document is not None else None
    return uri if isinstance(uri, str) else None


def register(server: AccelOptServer) -> None:
    @server.feature(REPORT)
    def accelopt_report(ls: AccelOptServer, params: Any) -> dict[str, Any] | None:
        uri = uri_of(params)
        doc = ls.session.documents.get(uri) if uri else None
        if doc is None or not doc.info.is_kernel:
            return None
        return report(doc, ls.session.settings.hardware, ls.session.backend)

    @server.feature(STATUS)
    def accelopt_status(ls: AccelOptServer, params: Any) -> dict[str, Any]:
        # pending: requests pygls is still tracking (stays small unless futures leak, see AccelOptProtocol)
        return {**ls.session.status(), "pendingRequests": len(ls.protocol._request_futures)}
