"""Commands behind the code lenses: Optimize (with $/progress and cancellation), stop it, profile on
another hardware generation, and show the report."""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path

from ..config import HARDWARE
from ..describe import report
from ..server import AccelOptServer  # at run time: pygls reads command handlers' type hints
from ..session import OptimizeError

log = logging.getLogger(__name__)
OPTIMIZE, STOP, PROFILE, SHOW_REPORT = "accelopt.optimize", "accelopt.stopOptimize", "accelopt.profile", \
    "accelopt.showReport"


def _uri(args: tuple[Any, ...]) -> str:
    value = args[0] if args else None
    if isinstance(value, dict):
        value = value.get("uri") or (value.get("textDocument") or {}).get("uri")
    if not isinstance(value, str):
        raise ValueError("expected the kernel file's URI as the first argument")
    return value


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


def register(server: AccelOptServer) -> None:
    tokens: dict[str, str] = {}  # progress token -> document uri

    def show(ls: AccelOptServer, level: types.MessageType, text: str) -> None:
        ls.window_show_message(types.ShowMessageParams(type=level, message=text))

    @server.command(OPTIMIZE)
    async def optimize(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
        uri = _uri(args)
        name = os.path.basename(ls.session.documents[uri].path or uri) if uri in ls.session.documents else uri
        token = f"accelopt-optimize-{uuid.uuid4().hex[:12]}"
        progress = ls.client.work_done_progress
        if progress:
            try:
                await ls.work_done_progress.create_async(token)
                ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
                    title=f"AccelOpt: optimizing {name}", cancellable=True, message="evaluating the baseline",
                    percentage=0))
                tokens[token] = uri
            except Exception as exc:
                log.info("client refused a progress token: %s", exc)
                progress = False

        def on_event(event: Any) -> None:
            if progress and event.kind != "finished":
                message, percentage = progress_message(event)
                ls.work_done_progress.report(token, types.WorkDoneProgressReport(message=message,
                                                                                 percentage=percentage))

        outcome = "cancelled"
        try:
            summary = await ls.session.optimize(uri, on_event)
            best = summary["rewrites"][0] if summary["rewrites"] else None
            state = "stopped early; " if summary["cancelled"] else ""
            outcome = (f"{state}best verified rewrite {best['speedup']:.2f}x faster" if best else
                       f"{state}no faster correct kernel found") + f" ({summary['evaluated']} candidates evaluated)"
            show(ls, types.MessageType.Info, f"AccelOpt: {name}: {outcome}"
                 + ("; apply it with the code action on the kernel" if best else "")
                 + "".join(f". {note}" for note in summary.get("notes", [])))
            return summary
        except OptimizeError as exc:
            outcome = f"cannot optimize: {exc}"
            show(ls, types.MessageType.Warning, f"AccelOpt: {outcome}")
            return {"error": str(exc)}
        finally:
            tokens.pop(token, None)
            if progress:
                ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=outcome))

    @server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def cancel_progress(ls: AccelOptServer, params: types.WorkDoneProgressCancelParams) -> None:
        uri = tokens.get(str(params.token))
        if uri is not None:
            ls.session.stop_optimize(uri)

    @server.command(STOP)
    def stop(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
        return {"stopping": ls.session.stop_optimize(_uri(args))}

    @server.command(PROFILE)
    def profile(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
        uri = _uri(args)
        doc = ls.session.documents.get(uri)
        if doc is None:
            return {"error": "unknown document"}
        hardware = args[1] if len(args) > 1 and args[1] in HARDWARE else doc.hardware(ls.session.settings.hardware)
        doc.hardware_override = None if hardware == ls.session.settings.hardware else hardware
        ls.session.schedule(doc, delay=0.0)
        return {"hardware": hardware}

    @server.command(SHOW_REPORT)
    def show_report(ls: AccelOptServer, *args: Any) -> dict[str, Any]:
        uri = _uri(args)
        doc = ls.session.documents.get(uri)
        if doc is None:
            return {"error": "unknown document"}
        data = report(doc, ls.session.settings.hardware, ls.session.backend)
        if ls.client.show_document and data["text"]:
            folder = os.path.join(tempfile.gettempdir(), "accelopt-reports")
            os.makedirs(folder, exist_ok=True)
            stem = os.path.splitext(os.path.basename(doc.path or "kernel"))[0]
            target = os.path.join(folder, f"{stem}.{data['hardware']}.txt")
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(data["text"] + "\n")
            ls.window_show_document(types.ShowDocumentParams(uri=from_fs_path(target) or target, take_focus=False))
        elif not data["text"]:
            show(ls, types.MessageType.Info, "AccelOpt: no profile yet for this file")
        return data
