"""Code lenses over each kernel: the headline (`1.33 ms · 40% of peak · simulated trn1 · vector-bound`), then
Optimize, Profile on each other generation, and Show report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from accelopt_core.hardware import available_hardware, load_hardware
from accelopt_core.report import counted

from ..format import headline, short_error
from ..state import KernelDocument

if TYPE_CHECKING:
    from ..server import AccelOptServer

REFRESH_DELAY_S = 0.05


def headline_title(doc: KernelDocument) -> str | None:
    """The first lens's text, or None when there is nothing to show yet."""
    if doc.task_error:
        return f"AccelOpt: the task fails to load: {short_error(doc.task_error, 60)}"
    if doc.failure and doc.result is None:
        return f"AccelOpt: {short_error(doc.failure, 70)}"
    result = doc.result
    if result is None:
        return "AccelOpt: profiling…" if doc.phase != "idle" else None
    if result.error:
        text = f"kernel fails: {short_error(result.error, 70)}"
    elif result.unchecked and result.latency_ms is None:  # even its timing needs more than our limits
        text = f"unchecked: {short_error(result.unchecked, 70)}"
    else:
        text = headline(result)
        if doc.checked is not None and doc.checked.correct is False:
            text += " · ✗ wrong results"
        elif doc.checked is not None and doc.checked.correct:
            text += f" · ✓ {counted(len(doc.checked.seeds), 'seed')}"
        elif doc.checked is not None and doc.checked.unchecked:
            text += f" · unchecked: {short_error(doc.checked.unchecked, 50)}"
        elif doc.phase == "checking":
            text += " · checking…"
    if doc.outdated:
        text += " · (before your edits)"
    elif doc.phase in ("waiting", "tracing"):
        text += " · re-profiling…"
    return text


Lens = tuple[int, str, str, list[object]]  # 1-based line, title, command, arguments


def lenses(doc: KernelDocument, hardware: str) -> list[Lens]:
    """(line, title, command, arguments) for each lens, engine-side view: the profiled kernel's lenses over
    it, and over each other kernel of the file a lens that profiles that one (with its last profile)."""
    if not doc.info.is_kernel or doc.link is None or not doc.link.ok:
        return []
    out = [(kernel.def_line, other_kernel_title(doc, kernel.name), "accelopt.profile", [doc.uri, None, kernel.name])
           for kernel in doc.info.kernels if kernel.name != doc.info.function]
    if doc.info.def_line is None:
        return out
    line = doc.info.def_line
    title = headline_title(doc)
    if title:
        out.append((line, title, "accelopt.showReport", [doc.uri]))
    if doc.search is not None:
        event = doc.search.last_event
        progress = f" {event.speedup:.2f}x so far" if event is not None and event.speedup else ""
        out.append((line, "Stopping…" if doc.search.stopping else f"Optimizing…{progress} (stop)",
                    "accelopt.stopOptimize", [doc.uri]))
    else:
        out.append((line, "Optimize", "accelopt.optimize", [doc.uri]))
    current = doc.hardware(hardware)
    out += [(line, f"Profile on {other}" + ("" if load_hardware(other).calibrated else " (uncalibrated)"),
             "accelopt.profile", [doc.uri, other]) for other in available_hardware() if other != current]
    out.append((line, "Show report", "accelopt.showReport", [doc.uri]))
    return sorted(out, key=lambda lens: lens[0])  # stable: each kernel's lenses stay in their order


def other_kernel_title(doc: KernelDocument, name: str) -> str:
    """The lens over a kernel of the file that is not the one profiled: profile it, with its last profile."""
    kept = doc.kept.get(name)
    if kept is None:
        return "AccelOpt: profile this kernel"
    source, result = kept
    shown = f"kernel fails: {short_error(result.error, 50)}" if result.error else headline(result)
    return f"AccelOpt: {shown}{' (before your edits)' if source != doc.source else ''} · profile this kernel"


def register(server: AccelOptServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: AccelOptServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        doc = ls.session.documents.get(params.text_document.uri)
        if doc is None:
            return []
        return [types.CodeLens(range=types.Range(types.Position(line - 1, 0), types.Position(line - 1, 0)),
                               command=types.Command(title=title, command=command, arguments=arguments))
                for line, title, command, arguments in lenses(doc, ls.session.settings.hardware)]

    scheduled = False

    def refresh() -> None:
        nonlocal scheduled
        scheduled = False
        server.workspace_code_lens_refresh(None)

    def on_change(doc: KernelDocument, what: set[str]) -> None:
        nonlocal scheduled
        if "lenses" in what and server.client.code_lens_refresh and not scheduled and server.loop is not None:
            scheduled = True
            server.loop.call_later(REFRESH_DELAY_S, refresh)

    server.session.listeners.append(on_change)
