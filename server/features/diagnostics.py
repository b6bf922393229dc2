"""Diagnostics (source "accelopt"): the session's findings as LSP diagnostics, published whenever
what the server knows about a file changes. Findings of a profile taken before the latest edits are
moved to the lines they now sit on, or dropped when their line changed."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lsprotocol import types

from accelopt_core.nki.api_versions import NEWEST, Version, api_findings, parse_version

from ..findings import (
    ERROR,
    HINT,
    INFO,
    WARNING,
    Finding,
    applied_fix_findings,
    from_results,
    rule_findings,
    structural,
)
from ..kernels import analyze
from ..state import KernelDocument

if TYPE_CHECKING:
    from ..server import AccelOptServer

SOURCE = "accelopt"
SEVERITY = {ERROR: types.DiagnosticSeverity.Error, WARNING: types.DiagnosticSeverity.Warning,
            INFO: types.DiagnosticSeverity.Information, HINT: types.DiagnosticSeverity.Hint}
COALESCE_S = 0.02


def api_change_findings(doc: KernelDocument, target: Version = NEWEST) -> list[Finding]:
    """The NKI constructs the targeted release removed (an error: the kernel no longer compiles) or deprecated
    (a warning), read from the current source; `data.fixable` marks those a quick fix replaces."""
    if not doc.info.is_kernel or doc.info.syntax_error:
        return []
    return [Finding(f.line, ERROR if f.code == "nki-removed" else WARNING, f.code, f.message, f.column, f.end_column,
                    {"fixable": True} if f.fixed_source is not None else {})
            for f in api_findings(doc.source, target)]


def findings(doc: KernelDocument, target: Version = NEWEST) -> list[Finding]:
    """Everything worth saying about the file now, in current line numbers."""
    if not doc.info.is_kernel:
        return []
    out = structural(doc.info, doc.link) + api_change_findings(doc, target)
    if doc.info.syntax_error or doc.info.problem or doc.info.choosing or doc.link is None or not doc.link.ok:
        return out
    def_line = doc.info.def_line or 1
    if doc.failure:
        out.append(Finding(def_line, ERROR, "profile-failed", doc.failure))
    if doc.profiled_source is not None:
        profiled_info = doc.info if not doc.outdated else analyze(doc.profiled_source,
                                                                   os.path.basename(doc.path or "kernel.py"))
        for finding in from_results(profiled_info, doc.trace, doc.checked, doc.task_error,
                                    doc.repeated_loads):
            line = doc.current_line_of(finding.line)
            if line is not None:
                out.append(Finding(line, finding.severity, finding.code, finding.message, finding.column,
                                   finding.end_column, finding.data, finding.priority))
    # A rule's plan on a line that already has a finding rides on that diagnostic (its quick fix is offered
    # there) instead of adding a second one about the same thing.
    if not doc.outdated:
        out.extend(applied_fix_findings(doc.applied_fix, doc.result, def_line))
    explained = {f.line for f in out if f.code in ("repeated-load", "idle-tensor-engine")}
    out.extend(f for f in rule_findings(doc.current_fixes()) if f.line not in explained)
    rewrites = doc.current_rewrites()
    if rewrites:
        best = rewrites[0]
        out.append(Finding(def_line, INFO, "rewrite-available",
                           f"Optimize found {len(rewrites)} verified rewrite{'s' if len(rewrites) > 1 else ''}; the "
                           f"best is {best.speedup:.2f}x faster: apply it with a code action on this line",
                           doc.info.name_start, doc.info.name_start + len(doc.info.function or ""),
                           priority=1.0))
    return out


def line_range(ls: AccelOptServer, source: str, line: int, column: int | None = None,
               end_column: int | None = None) -> types.Range:
    """A range on a 1-based line, in the client's position encoding; the line's text when no column."""
    lines = source.splitlines()
    index = min(max(line - 1, 0), max(len(lines) - 1, 0))
    text = lines[index] if lines else ""
    if column is None:
        start, end = len(text) - len(text.lstrip()), len(text.rstrip())
    else:
        start = min(column, len(text))
        end = min(max(end_column if end_column is not None else len(text), start), len(text))
    codec = ls.workspace.position_codec
    return types.Range(types.Position(index, codec.client_num_units(text[:start])),
                       types.Position(index, codec.client_num_units(text[:end])))


def to_diagnostic(ls: AccelOptServer, doc: KernelDocument, finding: Finding) -> types.Diagnostic:
    return types.Diagnostic(range=line_range(ls, doc.source, finding.line, finding.column, finding.end_column),
                            message=finding.message, severity=SEVERITY[finding.severity], code=finding.code,
                            source=SOURCE, data=finding.data or None)


def diagnostics(ls: AccelOptServer, doc: KernelDocument) -> list[types.Diagnostic]:
    return [to_diagnostic(ls, doc, f) for f in findings(doc, parse_version(ls.session.settings.nki_version))]


def publish(ls: AccelOptServer, uri: str) -> None:
    doc = ls.session.documents.get(uri)
    items = diagnostics(ls, doc) if doc is not None else []
    version = doc.version if doc is not None and doc.open else None
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=items, version=version))


def register(server: AccelOptServer) -> None:
    pending: set[str] = set()

    def flush() -> None:
        uris = sorted(pending)
        pending.clear()
        for uri in uris:
            publish(server, uri)

    def on_change(doc: KernelDocument, what: set[str]) -> None:
        if "diagnostics" not in what:
            return
        if not pending and server.loop is not None:
            server.loop.call_later(COALESCE_S, flush)
        pending.add(doc.uri)

    server.session.listeners.append(on_change)
