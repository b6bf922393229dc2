"""Code actions: link a task (inserts the directive), pick one of a file's several kernels, apply a rule-based
rewrite (a quick fix on its diagnostic, offered once the model timed it faster, labelled checked once it was),
apply a verified rewrite from Optimize, and migrate a legacy kernel to NKI 0.8 (made and run in the worker). Every
rewrite is one WorkspaceEdit of minimal line hunks (one undo step);
verified rewrites carry a change annotation that asks for confirmation, so editors that support it show a diff
preview before applying."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from accelopt_core.nki.api_versions import api_findings, parse_version

from ..edits import line_edits
from ..format import fix_gain
from ..kernels import directive_insert_line, suggest_tasks
from ..state import KernelDocument
from .diagnostics import SOURCE

if TYPE_CHECKING:
    from ..server import AccelOptServer

REWRITE_ANNOTATION = "accelopt.rewrite"


def _end_of(source: str, ls: AccelOptServer) -> types.Position:
    lines = source.splitlines(keepends=True)
    if not lines:
        return types.Position(0, 0)
    last = lines[-1]
    if last.endswith(("\n", "\r")):
        return types.Position(len(lines), 0)
    return types.Position(len(lines) - 1, ls.workspace.position_codec.client_num_units(last))


def text_edits(ls: AccelOptServer, old: str, new: str, annotation: str | None = None) -> list[types.TextEdit]:
    """Whole-line hunks turning `old` into `new`, in client positions."""
    count = len(old.splitlines(keepends=True))
    out: list[types.TextEdit] = []
    for edit in line_edits(old, new):
        start = types.Position(edit.start, 0)
        end = types.Position(edit.end, 0) if edit.end < count else _end_of(old, ls)
        where = types.Range(start, end)
        if annotation:
            out.append(types.AnnotatedTextEdit(range=where, new_text=edit.text, annotation_id=annotation))
        else:
            out.append(types.TextEdit(range=where, new_text=edit.text))
    return out


def workspace_edit(ls: AccelOptServer, doc: KernelDocument, edits_for: list[types.TextEdit] | None = None,
                   new_source: str | None = None,
                   annotation: types.ChangeAnnotation | None = None) -> types.WorkspaceEdit:
    """One edit to one document, versioned when the client takes document changes (so a stale edit is
    refused instead of garbling a file that changed meanwhile)."""
    annotate = annotation is not None and ls.client.document_changes and ls.client.change_annotations
    if edits_for is None:
        assert new_source is not None
        edits_for = text_edits(ls, doc.source, new_source, REWRITE_ANNOTATION if annotate else None)
    if not ls.client.document_changes:
        return types.WorkspaceEdit(changes={doc.uri: list(edits_for)})
    version = ls.workspace.get_text_document(doc.uri).version if doc.open else None
    change = types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=doc.uri, version=version),
        edits=list(edits_for))
    return types.WorkspaceEdit(document_changes=[change],
                               change_annotations={REWRITE_ANNOTATION: annotation} if annotate and annotation else None)


def naming_edit(doc: KernelDocument, kernel: str) -> types.TextEdit:
    """`kernel=NAME` added to the file's directive (a new directive when the task is linked by the layout)."""
    directive = doc.info.directive
    if directive is None:
        at = types.Position(directive_insert_line(doc.source), 0)
        return types.TextEdit(range=types.Range(at, at), new_text=f"# accelopt: kernel={kernel}\n")
    text = doc.source.splitlines()[directive.line - 1]
    end = types.Position(directive.line - 1, len(text.rstrip()))
    return types.TextEdit(range=types.Range(end, end), new_text=f" kernel={kernel}")


def _ours(diagnostics: list[types.Diagnostic], code: str, line: int | None = None) -> list[types.Diagnostic]:
    return [d for d in diagnostics if d.source == SOURCE and d.code == code
            and (line is None or d.range.start.line == line - 1)]


def _wanted(only: list[str] | None, kind: str) -> bool:
    return not only or any(kind == k or kind.startswith(f"{k}.") for k in only)


def actions(ls: AccelOptServer, doc: KernelDocument, params: types.CodeActionParams) -> list[types.CodeAction]:
    first, last = params.range.start.line + 1, params.range.end.line + 1
    context = list(params.context.diagnostics or [])
    only = [str(k) for k in params.context.only] if params.context.only else None
    info = doc.info
    out: list[types.CodeAction] = []

    def near(line: int) -> bool:
        return first <= line <= last

    if (_wanted(only, types.CodeActionKind.QuickFix) and info.function and not info.syntax_error
            and doc.link is not None and doc.link.origin == "none"
            and (near(info.def_line or 1) or _ours(context, "no-task"))):
        at = directive_insert_line(doc.source)
        for index, name in enumerate(suggest_tasks(doc.path)):
            edit = types.TextEdit(range=types.Range(types.Position(at, 0), types.Position(at, 0)),
                                  new_text=f"# accelopt: task={name}\n")
            out.append(types.CodeAction(title=f"Link to task `{name}` (insert `# accelopt: task={name}`)",
                                        kind=types.CodeActionKind.QuickFix, diagnostics=_ours(context, "no-task"),
                                        is_preferred=index == 0, edit=workspace_edit(ls, doc, [edit])))
    several = _ours(context, "several-kernels")
    if _wanted(only, types.CodeActionKind.QuickFix) and info.choosing and several:
        out.extend(types.CodeAction(title=f"Profile kernel `{kernel.name}` (add `kernel={kernel.name}` to the "
                                    "directive)", kind=types.CodeActionKind.QuickFix, diagnostics=several,
                                    edit=workspace_edit(ls, doc, [naming_edit(doc, kernel.name)]))
                   for kernel in info.kernels)
    if _wanted(only, types.CodeActionKind.QuickFix):
        for fix in doc.current_fixes():
            related = [d for d in context if d.source == SOURCE and d.range.start.line == fix.line - 1]
            if not (near(fix.line) or related):
                continue
            out.append(types.CodeAction(title=f"Apply {fix.rule}: {fix.description} — {fix_gain(fix)}",
                                        kind=types.CodeActionKind.QuickFix, diagnostics=related,
                                        edit=workspace_edit(ls, doc, new_source=fix.new_source)))
    if _wanted(only, types.CodeActionKind.QuickFix) and info.is_kernel and not info.syntax_error:
        for change in api_findings(doc.source, parse_version(ls.session.settings.nki_version)):
            if change.fixed_source is None or not near(change.line):
                continue
            replacement = change.message.split(": use ", 1)[-1]
            out.append(types.CodeAction(title=f"Use {replacement}", kind=types.CodeActionKind.QuickFix,
                                        diagnostics=_ours(context, change.code, change.line), is_preferred=True,
                                        edit=workspace_edit(ls, doc, new_source=change.fixed_source)))
    inside = info.def_line is not None and first <= (info.end_line or info.def_line) and last >= info.def_line
    if _wanted(only, types.CodeActionKind.RefactorRewrite) and inside:
        for index, rewrite in enumerate(doc.current_rewrites()):
            note = types.ChangeAnnotation(label="AccelOpt verified rewrite", needs_confirmation=True,
                                          description=f"{rewrite.title}; {rewrite.plan}")
            out.append(types.CodeAction(title=rewrite.title, kind=types.CodeActionKind.RefactorRewrite,
                                        diagnostics=_ours(context, "rewrite-available"), is_preferred=index == 0,
                                        edit=workspace_edit(ls, doc, new_source=rewrite.source, annotation=note)))
    # the verified rewrites first: a migration changes the API, not the speed
    migration = doc.current_migration()
    if _wanted(only, types.CodeActionKind.RefactorRewrite) and inside and migration is not None:
        note = types.ChangeAnnotation(label="AccelOpt migration to NKI 0.8", needs_confirmation=True,
                                      description=migration.title)
        out.append(types.CodeAction(title=migration.title, kind=types.CodeActionKind.RefactorRewrite,
                                    edit=workspace_edit(ls, doc, new_source=migration.source, annotation=note)))
    return out


def register(server: AccelOptServer) -> None:
    options = types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix,
                                                         types.CodeActionKind.RefactorRewrite])

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, options)
    def code_action(ls: AccelOptServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        doc = ls.session.documents.get(params.text_document.uri)
        if doc is None or not doc.info.is_kernel:
            return None
        return actions(ls, doc, params) or None
