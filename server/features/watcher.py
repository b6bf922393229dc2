"""Files changed outside the editor (a `git checkout`, a script): a watchdog observer on the workspace
folders, plus the client's own `workspace/didChangeWatchedFiles`. Bursts are debounced per path,
then the session re-profiles the kernels that use a changed reference and known kernel files that
are not open in the editor."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.uris import to_fs_path
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

if TYPE_CHECKING:
    from ..server import AccelOptServer

log = logging.getLogger(__name__)
DEBOUNCE_S = 0.3
IGNORED_DIRS = {".git", ".hg", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".mypy_cache",
                ".ruff_cache", ".pytest_cache", "build", "dist"}
# Reads (ours included: digests, re-reading kernels) must not count as changes.
EVENTS = {"modified", "created", "moved", "deleted", "closed"}


def interesting(path: str) -> bool:
    if not path.endswith(".py"):
        return False
    return not any(part in IGNORED_DIRS for part in path.split(os.sep))


class _Handler(FileSystemEventHandler):
    """Runs on watchdog's thread: only hands paths over to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Any):
        self.loop = loop
        self.deliver = deliver

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in EVENTS:
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            path = os.fsdecode(raw) if raw else ""
            if path and interesting(path):
                self.loop.call_soon_threadsafe(self.deliver, path)


def roots(ls: AccelOptServer) -> list[str]:
    found = []
    for folder in ls.workspace.folders.values():
        path = to_fs_path(folder.uri)
        if path:
            found.append(path)
    if not found and ls.workspace.root_path:
        found.append(ls.workspace.root_path)
    unique = []
    for path in sorted({os.path.abspath(p) for p in found if os.path.isdir(p)}):
        if not any(path.startswith(other + os.sep) for other in unique):
            unique.append(path)
    return unique


def _debouncer(ls: AccelOptServer) -> Any:
    timers: dict[str, asyncio.TimerHandle] = {}

    def fire(path: str) -> None:
        timers.pop(path, None)
        ls.session.file_changed(path)

    def deliver(path: str) -> None:
        timer = timers.pop(path, None)
        if timer is not None:
            timer.cancel()
        assert ls.loop is not None
        timers[path] = ls.loop.call_later(DEBOUNCE_S, fire, path)

    return deliver


def start(ls: AccelOptServer) -> None:
    if not ls.session.settings.watch or ls.watcher is not None or ls.loop is None:
        return
    folders = roots(ls)
    if not folders:
        return
    observer = Observer()
    handler = _Handler(ls.loop, ls.deliver_change)
    for folder in folders:
        try:
            observer.schedule(handler, folder, recursive=True)
        except OSError as exc:
            log.warning("cannot watch %s: %s", folder, exc)
    observer.daemon = True
    observer.start()
    ls.watcher = observer


def stop(ls: AccelOptServer) -> None:
    observer = ls.watcher
    ls.watcher = None
    if observer is None:
        return
    try:
        observer.stop()
        observer.join(timeout=2.0)
    except Exception:
        log.exception("stopping the file watcher failed")


def restart_if_needed(ls: AccelOptServer) -> None:
    if ls.session.settings.watch and ls.watcher is None:
        start(ls)
    elif not ls.session.settings.watch and ls.watcher is not None:
        stop(ls)


def register(server: AccelOptServer) -> None:
    server.deliver_change = _debouncer(server)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: AccelOptServer, params: types.DidChangeWatchedFilesParams) -> None:
        for change in params.changes:
            path = to_fs_path(change.uri)
            if path and interesting(path):
                ls.deliver_change(path)
