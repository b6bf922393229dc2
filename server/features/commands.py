"""Commands behind the code lenses: Optimize (with $/progress and cancellation), stop it, profile on
another hardware generation, and show the report."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path

from accelopt_core.hardware import available_hardware

from ..describe import report
from ..memory_view import memory_markdown
from ..server import AccelOptServer  # at run time: pygls reads command handlers' type hints
from ..session import OptimizeError
from ..state import KernelDocument
from .code_actions import workspace_edit

log = logging.getLogger(__name__)
OPTIMIZE, STOP, PROFILE, SHOW_REPORT = "accelopt.optimize", "accelopt.stopOptimize", "accelopt.profile", \
    "accelopt.showReport"
APPLY_BEST, SHOW_MEMORY = "accelopt.applyBestRewrite", "accelopt.showMemory"


def _uri(args: tuple[Any, ...]) -> str:
    value = args[0] if args else None
    if isinstance(value, dict):
        value = value.get("uri") or (value.get("textDocument") or {}).get("uri")
    if not isinstance(value, str):
        raise ValueError("expected the kernel file's URI as the first argument")
    return value


def _document(ls: AccelOptServer, args: tuple[Any, ...]) -> KernelDocument | None:
    """The document a command names by its first argument, if the session knows it."""
    return ls.session.documents.get(_uri(args))


def progress_message(event: Any) -> tuple[str, int]:
    """`iteration 2/4 · best 1.67x · 67% of peak · 12 evaluated` and a percentage for $/progress."""
    total = max(1, int(event.iterations))
    done = event.iteration + 1 if event.kind == "iteration" else event.iteration
    if event.kind in ("finished", "cancelled"):
        done = total
    parts = [f"iteration {min(event.iteration + 1, total)}/{total}"]
    if event.speedup:
        parts.append(f"best {event.speedup:.2f}x")
    if event.best_peak_percent is not None:
        parts.append(f"{event.best_peak_percent:.0f}% of peak")
    parts.append(f"{event.evaluated} evaluated")
    return " · ".join(parts), max(0, min(100, round(100 * done / total)))


Handler = Callable[..., Any]
COMMANDS: dict[str, Handler] = {}


def command(name: str) -> Callable[[Handler], Handler]:
    """Enter a handler in the table `register` hands to the server."""
    def enter(handler: Handler) -> Handler:
        COMMANDS[name] = handler
        return handler
    return enter


def show(ls: AccelOptServer, level: types.MessageType, text: str) -> None:
    ls.window_show_message(types.ShowMessageParams(type=level, message=text))


def refresh_lenses(ls: AccelOptServer) -> None:
    """Sent at once when a search ends, besides the debounced refresh of features/code_lens.py: the
    "Optimizing… (stop)" lens must not outlive the search."""
    if ls.client.code_lens_refresh:
        try:
            ls.workspace_code_lens_refresh(None)
        except Exception as exc:
            log.info("codeLens refresh failed: %s", exc)


async def begin_progress(ls: AccelOptServer, token: str, uri: str, name: str) -> bool:
    """A cancellable $/progress for the search, when the client takes one."""
    if not ls.client.work_done_progress:
        return False
    try:
        await ls.work_done_progress.create_async(token)
        ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
            title=f"AccelOpt: optimizing {name}", cancellable=True, message="evaluating the baseline", percentage=0))
    except Exception as exc:
        log.info("client refused a progress token: %s", exc)
        return False
    ls.progress_uris[token] = uri
    return True


def search_outcome(summary: dict[str, Any]) -> tuple[str, bool]:
    """What the search found, in a sentence, and whether a verified rewrite is there to apply."""
    best = summary["rewrites"][0] if summary["rewrites"] else None
    state = "stopped early; " if summary["cancelled"] else ""
    outcome = (f"{state}best verified rewrite {best['speedup']:.2f}x faster" if best else
               f"{state}no faster correct kernel found") + f" ({summary['evaluated']} candidates evaluated)"
    return outcome, best is not None


@command(OPTIMIZE)
async def optimize(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
    uri = _uri(args)
    name = os.path.basename(ls.session.documents[uri].path or uri) if uri in ls.session.documents else uri
    token = f"accelopt-optimize-{uuid.uuid4().hex[:12]}"
    progress = await begin_progress(ls, token, uri, name)

    def on_event(event: Any) -> None:
        if progress and event.kind != "finished":
            message, percentage = progress_message(event)
            ls.work_done_progress.report(token, types.WorkDoneProgressReport(message=message, percentage=percentage))

    outcome = "cancelled"
    vscode = ls.client_name == "vscode"
    try:
        summary = await ls.session.optimize(uri, on_event)
        outcome, found = search_outcome(summary)
        message = (f"{name}: {outcome}" + ("; apply it with the code action on the kernel" if found else "")
                   + "".join(f". {note}" for note in summary.get("notes", [])))
        if not vscode:  # the VS Code extension shows the result's `message` itself
            show(ls, types.MessageType.Info, f"AccelOpt: {message}")
        return {**summary, "message": message}
    except OptimizeError as exc:
        outcome = f"cannot optimize: {exc}"
        if not vscode:  # the extension shows `error` as a warning
            show(ls, types.MessageType.Warning, f"AccelOpt: {outcome}")
        return {"error": str(exc)}
    finally:
        ls.progress_uris.pop(token, None)
        if progress:
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=outcome))
        refresh_lenses(ls)


def cancel_progress(ls: AccelOptServer, params: types.WorkDoneProgressCancelParams) -> None:
    uri = ls.progress_uris.get(str(params.token))
    if uri is not None:
        ls.session.stop_optimize(uri)


@command(STOP)
def stop(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
    return {"stopping": ls.session.stop_optimize(_uri(args))}


@command(PROFILE)
def profile(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
    doc = _document(ls, args)
    if doc is None:
        return {"error": "unknown document"}
    asked = args[1] if len(args) > 1 else None
    hardware = asked if asked in available_hardware() else doc.hardware(ls.session.settings.hardware)
    doc.hardware_override = None if hardware == ls.session.settings.hardware else hardware
    kernel = args[2] if len(args) > 2 and isinstance(args[2], str) else None  # one of a file's several kernels
    if kernel is not None:
        if not ls.session.profile_kernel(doc.uri, kernel):
            return {"error": f"no kernel named {kernel!r} in this file"}
        return {"hardware": hardware, "kernel": kernel}
    ls.session.schedule(doc, delay=0.0)
    return {"hardware": hardware}


def open_text_report(ls: AccelOptServer, path: str | None, data: dict[str, Any]) -> None:
    """The report as a text file beside the others, shown without taking the focus."""
    folder = os.path.join(tempfile.gettempdir(), "accelopt-reports")
    os.makedirs(folder, exist_ok=True)
    stem = os.path.splitext(os.path.basename(path or "kernel"))[0]
    target = os.path.join(folder, f"{stem}.{data['hardware']}.txt")
    with open(target, "w", encoding="utf-8") as handle:
        handle.write(data["text"] + "\n")
    ls.window_show_document(types.ShowDocumentParams(uri=from_fs_path(target) or target, take_focus=False))


@command(SHOW_REPORT)
def show_report(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
    doc = _document(ls, args)
    if doc is None:
        return {"error": "unknown document"}
    data = report(doc, ls.session.settings.hardware, ls.session.backend)
    if ls.report_panel:
        return data  # the client shows accelopt/report in its own panel: no text report besides
    if ls.client.show_document and data["text"]:
        open_text_report(ls, doc.path, data)
    elif not data["text"]:
        show(ls, types.MessageType.Info, "AccelOpt: no profile yet for this file")
    return data


@command(APPLY_BEST)
async def apply_best_rewrite(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
    """The fastest verified rewrite of the last Optimize, applied through workspace/applyEdit."""
    doc = _document(ls, args)
    if doc is None:
        return {"applied": False, "message": "this file is not open in the AccelOpt server"}
    rewrites = doc.current_rewrites()
    if not rewrites:
        why = ("the file changed since the search" if doc.rewrites else
               "run Optimize first" if doc.last_search is None else "the last search found no faster kernel")
        return {"applied": False, "message": f"no verified rewrite for this file ({why})"}
    best = rewrites[0]
    # No confirmation annotation: the user asked for this very rewrite by name.
    edit = workspace_edit(ls, doc, new_source=best.source)
    try:
        answer = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=best.title))
    except Exception as exc:
        return {"applied": False, "message": f"the editor did not apply the rewrite: {exc}"}
    if not answer.applied:
        reason = answer.failure_reason or "the editor refused the edit (did the file change?)"
        return {"applied": False, "message": reason}
    return {"applied": True, "message": f"applied: {best.title.removeprefix('Apply rewrite: ')}"}


@command(SHOW_MEMORY)
async def show_memory(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
    """Markdown: the memory's top experiences for this kernel's task family and hardware, and the
    task's recent searches."""
    doc = _document(ls, args)
    if doc is None or doc.link is None or doc.link.ref is None:
        return {"error": "link this kernel to a task first (`# accelopt: task=NAME`)"}
    memory = ls.session.memory.open()
    if memory is None:
        return {"error": f"cannot open the optimization memory {ls.session.memory.path}"}
    hardware = doc.hardware(ls.session.settings.hardware)
    try:
        text = await asyncio.to_thread(memory_markdown, memory, doc.link.ref.key, doc.family(),
                                       hardware, ls.session.memory.path)
    except Exception as exc:
        log.exception("reading the optimization memory failed")
        return {"error": f"cannot read the optimization memory: {exc}"}
    return {"markdown": text}


def register(server: AccelOptServer) -> None:
    for name, handler in COMMANDS.items():
        server.command(name)(handler)
    server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)(cancel_progress)
