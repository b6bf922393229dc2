"""The language server's engine side: documents, settings, background profiling and Optimize.

No LSP types in here. Features call these methods and listen for changes; this module calls the
worker lanes (server/workers.py), which call accelopt_core. Everything runs on the server's event
loop thread; the watcher's thread hands its events over with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from accelopt_core.editor_api import (
    REMOTE,
    SIMULATOR,
    AnalyzeReply,
    AnalyzeRequest,
    FixesReply,
    FixesRequest,
    LLMRequest,
    MigrateReply,
    MigrateRequest,
    OptimizeReply,
    OptimizeRequest,
    ProfileReply,
    ProfileRequest,
    ProfileResult,
    ProfilerSettings,
    SandboxLimits,
    cached,
    check_variant,
    kernel_hash,
)
from accelopt_core.nki.api_versions import api_findings, detect_version, parse_version

from .config import Settings, profiling_changed
from .kernels import TaskLink
from .memory import EditorMemory
from .secrets import Secrets
from .state import KernelDocument, Rewrite, SearchRun
from .workers import Lane

log = logging.getLogger(__name__)

SEARCH_STOP_GRACE_S = 20.0
MAX_REWRITES = 3
# seconds the worker times and checks a kernel's quick fixes; past them it offers the rest by the model's estimate
FIX_SECONDS = 120.0


@dataclass(frozen=True)
class Snapshot:
    """What one profile request is about, fixed when it is made."""

    source: str
    link: TaskLink
    function: str | None  # the kernel function the file names, None for its only kernel (KernelFile.named)
    hardware: str
    profiled_function: str | None = None  # the kernel function profiled, named or the file's only one


class OptimizeError(Exception):
    """Optimize cannot run on this file (no task, kernel fails, already running...)."""


UNTRUSTED = ("this workspace is not trusted: AccelOpt does not run its kernels (trust the workspace to profile "
             "and optimize them)")


def server_rss_mb() -> float:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


class Session:
    """All documents and background work of one server."""

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or Settings()
        self.documents: dict[str, KernelDocument] = {}
        self.profile_lane = Lane("profile")
        self.search_lane = Lane("search")
        self.stats: Counter[str] = Counter()
        # listeners: (document, {"diagnostics", "lenses"}) after what the editor shows changed
        self.listeners: list[Callable[[KernelDocument, set[str]], None]] = []
        self.notices: list[Callable[[str, str], None]] = []  # (level, message) for the user
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._fix_jobs: dict[str, Any] = {}  # uri -> the quick-fix planning job of its latest profile
        self._warned: set[str] = set()
        self.ready = asyncio.Event()  # set once the client's settings are in (profiles wait for it)
        self.trusted = True  # the client's workspace trust; False: no kernel of the workspace runs
        self.memory = EditorMemory(lambda: self.settings.memory_db, self.notice)
        self.secrets = Secrets(lambda: self.settings, self.notice, self._profile_all)

    # --- plumbing ---------------------------------------------------------------------------------
    def changed(self, doc: KernelDocument, what: set[str] | None = None) -> None:
        for listener in self.listeners:
            try:
                listener(doc, what or {"diagnostics", "lenses"})
            except Exception:
                log.exception("listener failed for %s", doc.uri)

    def notice(self, level: str, message: str, once: bool = False) -> None:
        if once:
            if message in self._warned:
                return
            self._warned.add(message)
        for notify in self.notices:
            notify(level, message)

    def _profile_all(self) -> None:
        for doc in list(self.documents.values()):
            self.schedule(doc, delay=0.0)

    @property
    def backend(self) -> str:
        """The backend name profiles carry: "simulator", or "remote" when the setting is a service URL."""
        return SIMULATOR if self.settings.backend == SIMULATOR else REMOTE

    def profiler_settings(self, check_variant: str | None) -> ProfilerSettings:
        """The editor's settings in the engine's terms (the backend setting is "simulator" or a service URL)."""
        url = self.settings.backend if self.backend == REMOTE else ""
        token = self.secrets.reveal("service_token") or ""
        return ProfilerSettings(self.backend, url, token, self.settings.check_seeds, check_variant,
                                SandboxLimits(self.settings.sandbox_seconds, self.settings.sandbox_memory_mb))

    def apply_settings(self, settings: Settings) -> None:
        old, self.settings = self.settings, settings
        if profiling_changed(old, settings):
            if old.memory_db != settings.memory_db:
                self.memory.close()
            self._profile_all()

    # --- documents --------------------------------------------------------------------------------
    def open(self, uri: str, text: str, version: int | None) -> KernelDocument:
        doc = self.documents.get(uri)
        if doc is None:
            doc = KernelDocument.create(uri, text, version)
            self.documents[uri] = doc
        else:
            doc.source, doc.version, doc.open = text, version, True
            doc.reanalyze()
        self.changed(doc)
        self.schedule(doc, delay=0.0)
        return doc

    def change(self, uri: str, text: str, version: int | None) -> KernelDocument | None:
        doc = self.documents.get(uri)
        if doc is None:
            return None
        before = (doc.info.is_kernel, doc.info.syntax_error, doc.info.problem, doc.info.function, doc.link,
                  self._api_changes(doc))
        doc.source, doc.version = text, version
        doc.reanalyze()
        if self.settings.profile_on == "change":
            self.schedule(doc)
        elif before != (doc.info.is_kernel, doc.info.syntax_error, doc.info.problem, doc.info.function, doc.link,
                        self._api_changes(doc)):
            self.changed(doc)  # what the text is changed (a syntax error came or went): say so right away
        return doc

    def _api_changes(self, doc: KernelDocument) -> tuple[tuple[int, int, str], ...]:
        """Where the source uses what the targeted NKI release deprecated or removed: those diagnostics follow
        the text, not a profile."""
        target = parse_version(self.settings.nki_version)
        return tuple((f.line, f.column, f.code) for f in api_findings(doc.source, target))

    def save(self, uri: str) -> None:
        doc = self.documents.get(uri)
        if doc is not None:
            self.schedule(doc)

    def close(self, uri: str) -> None:
        """Closed files stay known (their diagnostics stay, the watcher re-profiles them), but nothing
        runs for them until they change on disk."""
        doc = self.documents.get(uri)
        if doc is None:
            return
        doc.open = False
        self._cancel_task(uri)
        if doc.search is not None:
            self.stop_optimize(uri)

    def profile_kernel(self, uri: str, name: str) -> bool:
        """Profile the file's kernel `name` (a file of several kernels); False when it has none so named."""
        doc = self.documents.get(uri)
        if doc is None or not doc.choose_kernel(name):
            return False
        self.schedule(doc, delay=0.0)
        return True

    def by_path(self, path: str) -> KernelDocument | None:
        real = os.path.realpath(path)
        return next((d for d in self.documents.values() if d.path and os.path.realpath(d.path) == real), None)

    # --- profiling --------------------------------------------------------------------------------
    def _cancel_task(self, uri: str) -> None:
        job = self._fix_jobs.pop(uri, None)
        if job is not None:
            self.profile_lane.cancel(job)
        task = self._tasks.pop(uri, None)
        if task is not None and not task.done():
            task.cancel()
            self.stats["profiles_cancelled"] += 1

    def schedule(self, doc: KernelDocument, delay: float | None = None) -> None:
        """Profile `doc` after `delay` (the debounce) unless something newer comes first; a newer
        request cancels an older one, including its job running in a worker."""
        self._cancel_task(doc.uri)
        doc.request_id += 1
        if not doc.profilable or not self.trusted:
            if doc.profilable:
                self.notice("warning", f"AccelOpt: {UNTRUSTED}", once=True)
            doc.phase = "idle"
            self.changed(doc)
            return
        self.stats["profiles_requested"] += 1
        wait = self.settings.debounce_ms / 1000.0 if delay is None else delay
        doc.phase = "waiting"
        assert doc.link is not None
        # The text as of this request (a save's text, even if typing goes on during the debounce).
        snapshot = Snapshot(doc.source, doc.link, doc.info.named, doc.hardware(self.settings.hardware),
                            doc.info.function)
        task = asyncio.ensure_future(self._profile(doc, doc.request_id, wait, snapshot))
        self._tasks[doc.uri] = task
        task.add_done_callback(lambda t, uri=doc.uri: self._task_done(uri, t))

    def _task_done(self, uri: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(uri) is task:
            del self._tasks[uri]
        if not task.cancelled() and task.exception() is not None:
            log.error("profiling %s failed", uri, exc_info=task.exception())

    def _kernel(self, doc: KernelDocument, snap: Snapshot) -> dict[str, Any]:
        """The fields of a KernelRequest for the snapshot's kernel (checked on the task's small size if any)."""
        assert snap.link.ref is not None
        return {"source": snap.source, "task": snap.link.ref, "hardware": snap.hardware,
                "profiler": self.profiler_settings(check_variant(snap.link.ref)),
                "memory_db": self.memory.for_workers(), "label": doc.path or "kernel.py", "kernel_name": snap.function}

    def _llm_request(self) -> LLMRequest | None:
        """The LLM planner's settings for a search; None (no planner) while the endpoint the workspace
        settings name waits for approval: no key, from the editor, the environment or the config file,
        goes to a host the user did not choose."""
        if not self.secrets.destination_approved("llm_api_key"):
            return None
        return LLMRequest(self.settings.llm_endpoint, self.settings.llm_model, self.secrets.reveal("llm_api_key"),
                          self.settings.search_budget)

    def _cached(self, request: ProfileRequest) -> ProfileResult | None:
        memory = self.memory.open()
        if memory is None:
            return None
        try:
            return cached(memory, request, self.backend)
        except Exception:
            log.exception("profile cache read failed")
            return None

    async def _profile(self, doc: KernelDocument, request: int, delay: float, snap: Snapshot) -> None:
        """Cached results if any; else a trace-only run (timing shows fast), then the checked run."""
        if delay:
            await asyncio.sleep(delay)
        await self.ready.wait()
        trace_only = ProfileRequest(**self._kernel(doc, snap))
        checked = await asyncio.to_thread(self._cached, replace(trace_only, check=True))
        if checked is not None:
            self.stats["cache_hits"] += 1
            await self._deliver(doc, request, snap, checked, checked)
            return
        trace = await asyncio.to_thread(self._cached, trace_only)
        if trace is not None:
            self.stats["cache_hits"] += 1
        else:
            doc.phase = "tracing"
            self.changed(doc, {"lenses"})
            trace = await self._run_job(doc, request, trace_only)
            if trace is None:
                return
        await self._deliver(doc, request, snap, trace, None)
        if trace.error or doc.request_id != request:
            return
        doc.phase = "checking"
        self.changed(doc, {"lenses"})
        result = await self._run_job(doc, request, replace(trace_only, check=True))
        if result is not None:
            await self._deliver(doc, request, snap, trace, result)

    async def _run_job(self, doc: KernelDocument, request: int, profile: ProfileRequest) -> ProfileResult | None:
        """One profile in the worker; None when it produced no verdict on the kernel."""
        limits = SandboxLimits(self.settings.sandbox_seconds, self.settings.sandbox_memory_mb)
        check = profile.check
        job = self.profile_lane.submit(profile, priority=1 if check else 0,
                                       timeout=limits.seconds + (limits.longest_check() + 600.0 if check else 120.0))
        self.stats["profile_jobs"] += 1
        try:
            reply: ProfileReply = await job.future
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if doc.request_id == request:
                doc.failure = f"profiling failed: {exc}"
                doc.phase = "idle"
                self.changed(doc)
            return None
        if reply.result is None:
            if doc.request_id == request:
                doc.task_error = reply.task_error or "the task could not be used"
                doc.trace = doc.checked = None
                doc.profiled_source = profile.source
                doc.phase = "idle"
                self.changed(doc)
            return None
        return None if reply.result.cancelled else reply.result

    async def _deliver(self, doc: KernelDocument, request: int, snap: Snapshot, trace: ProfileResult,
                       checked: ProfileResult | None) -> None:
        """Show a profile at once; the quick fixes for it follow when the worker has timed them."""
        if doc.request_id != request:
            return
        source = snap.source
        first = doc.profiled_source != source or doc.trace is None
        doc.profiled_source = source
        doc.trace, doc.checked = trace, checked
        doc.keep(checked or trace)
        doc.task_error = doc.failure = None
        doc.phase = "idle" if checked is not None or trace.error else doc.phase
        if first:
            doc.applied_fix = next((f for f in doc.fixes if f.new_source == source), None)
            doc.fixes, doc.repeated_loads = [], ()
        self.changed(doc)
        if first and not trace.error:
            self._plan_analysis(doc, request, snap)
        if first and not trace.error and self.settings.max_quick_fixes:
            self._plan_fixes(doc, request, snap, checked or trace)
        if first and not trace.error and detect_version(source).legacy:
            self._plan_migration(doc, request, snap)

    def _plan_migration(self, doc: KernelDocument, request: int, snap: Snapshot) -> None:
        """A legacy kernel is migrated to NKI 0.8 and both versions run in the worker; the code action appears
        when that is done, titled with what the run showed."""
        job = self.profile_lane.submit(MigrateRequest(**self._kernel(doc, snap)),
                                       priority=0, timeout=2 * self.settings.sandbox_seconds + 600.0)

        def show(reply: MigrateReply) -> None:
            doc.migration = reply.offer

        self._show_when_done(job, doc, request, snap.source, "migrating the kernel", show)

    def _plan_analysis(self, doc: KernelDocument, request: int, snap: Snapshot) -> None:
        """The rules' analysis of the profiled text (loads a loop repeats) runs in the worker: libcst never
        loads into the server, and its seconds on a long kernel never stall the editor's event loop."""
        job = self.profile_lane.submit(AnalyzeRequest(snap.source, snap.profiled_function), priority=0,
                                       timeout=120.0)

        def show(reply: AnalyzeReply) -> None:
            doc.repeated_loads = reply.repeated_loads

        self._show_when_done(job, doc, request, snap.source, "analysing the kernel", show)

    def _plan_fixes(self, doc: KernelDocument, request: int, snap: Snapshot, profile: ProfileResult) -> None:
        """Rule rewrites are planned, timed and checked in the worker (libcst and the rules never load into the
        server); only those the model shows faster come back."""
        fixes = FixesRequest(**self._kernel(doc, snap), profile=profile,
                             limit=self.settings.max_quick_fixes, rule_specs=tuple(self.settings.quick_fix_rules),
                             seconds=FIX_SECONDS)
        job = self.profile_lane.submit(fixes, priority=0,
                                       timeout=FIX_SECONDS + self.settings.sandbox_seconds + 600.0)
        self._fix_jobs[doc.uri] = job

        def forget(_: asyncio.Future[Any]) -> None:
            if self._fix_jobs.get(doc.uri) is job:
                del self._fix_jobs[doc.uri]

        def show(reply: FixesReply) -> None:
            doc.fixes = list(reply.fixes)

        job.future.add_done_callback(forget)
        self._show_when_done(job, doc, request, snap.source, "planning quick fixes", show)

    def _show_when_done(self, job: Any, doc: KernelDocument, request: int, source: str, what: str,
                        show: Callable[[Any], None]) -> None:
        """When the worker's `job` for profile `request` of `source` ends, `show` its value on the document while
        the document still shows that profile; a failure of ours (`what` failed) is logged, never shown."""
        def done(future: asyncio.Future[Any]) -> None:
            if future.cancelled() or future.exception() is not None:
                if not future.cancelled():
                    log.warning("%s failed: %s", what, future.exception())
                return
            if doc.request_id == request and doc.profiled_source == source:
                show(future.result())
                self.changed(doc)

        job.future.add_done_callback(done)

    # --- external changes -------------------------------------------------------------------------
    def file_changed(self, path: str) -> None:
        """A file changed on disk outside the editor: re-profile kernels that use it as their reference,
        and a known kernel file that is not open in the editor (the editor owns open ones)."""
        path = os.path.abspath(path)
        self.stats["external_changes"] += 1
        doc = self.by_path(path)
        if doc is not None and not doc.open:
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except (OSError, UnicodeDecodeError):
                text = None
            if text is not None and text != doc.source:
                doc.source, doc.version = text, None
                doc.reanalyze()
                self.schedule(doc, delay=0.0)
        for other in list(self.documents.values()):
            if other is doc:
                continue
            relinked = other.relink()
            uses = other.link is not None and other.link.reference_path is not None and \
                os.path.realpath(other.link.reference_path) == os.path.realpath(path)
            if relinked or uses:
                self.schedule(other, delay=0.0)

    # --- optimize ---------------------------------------------------------------------------------
    async def optimize(self, uri: str, on_event: Callable[[Any], None]) -> dict[str, Any]:
        """Run the beam search on the file's current text; its verified candidates become rewrites."""
        doc = self.documents.get(uri)
        if doc is None or not doc.info.is_kernel:
            raise OptimizeError("not an NKI kernel file")
        if doc.info.syntax_error:
            raise OptimizeError("fix the syntax error first")
        if not doc.profilable or doc.link is None or doc.link.ref is None:
            raise OptimizeError(doc.link.problem if doc.link and doc.link.problem else
                                "link a task first (`# accelopt: task=NAME`)")
        if doc.search is not None:
            raise OptimizeError("an Optimize is already running on this file")
        if not self.trusted:
            raise OptimizeError(UNTRUSTED)
        source = doc.source
        kernel = self._kernel(doc, Snapshot(source, doc.link, doc.info.named, doc.hardware(self.settings.hardware)))
        search = OptimizeRequest(**kernel, preset=self.settings.search_preset, workers=self.settings.search_workers,
                                 agents=tuple(self.settings.optimizer_agents), llm=self._llm_request(),
                                 family=doc.family())

        def event(value: Any) -> None:
            if doc.search is not None:
                doc.search.last_event = value
                if value.kind in ("started", "iteration"):  # the baseline is point 0, see describe.search_history
                    doc.search.history.append({"iteration": value.iteration + (value.kind == "iteration"),
                                               "best_latency_ms": value.best_latency_ms,
                                               "best_peak_percent": value.best_peak_percent})
            on_event(value)

        job = self.search_lane.submit(search, timeout=24 * 3600.0, on_event=event)
        doc.search = SearchRun(job, source)
        self.stats["searches"] += 1
        self.changed(doc, {"lenses"})
        try:
            reply: OptimizeReply = await job.future
        finally:
            doc.search = None
            self.changed(doc, {"lenses"})
        notes = list(reply.notes)
        if reply.search is None:
            raise OptimizeError((reply.error or "the search did not run") + "".join(f" ({note})" for note in notes))
        result = reply.search
        rewrites = rewrites_from(result)
        doc.rewrites = rewrites
        summary = {
            "cancelled": bool(result.cancelled), "speedup": result.speedup, "evaluated": result.evaluated,
            "seconds": result.seconds, "searchId": result.search_id,
            "base": {"latency_ms": result.base.result.latency_ms, "peak_percent": result.base.result.peak_percent},
            "best": {"latency_ms": result.best.result.latency_ms, "peak_percent": result.best.result.peak_percent,
                     "plan": " -> ".join(c.plan for c in result.lineage[1:] if c.plan)},
            "rewrites": [{"title": r.title, "speedup": r.speedup, "key": r.key} for r in rewrites],
            "history": [vars(h) for h in result.history],
            "planners": sorted({c.origin.split(":", 1)[0] for c in result.lineage[1:]}),
            "notes": notes,
        }
        doc.last_search = summary
        self.changed(doc)
        return summary

    def stop_optimize(self, uri: str) -> bool:
        """Ask a running search to stop; it returns what it found so far."""
        doc = self.documents.get(uri)
        if doc is None or doc.search is None or doc.search.stopping:
            return False
        doc.search.stopping = True
        self.search_lane.stop(doc.search.job, SEARCH_STOP_GRACE_S)
        self.changed(doc, {"lenses"})
        return True

    # --- status -----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            "documents": len(self.documents),
            "kernels": sum(1 for d in self.documents.values() if d.info.is_kernel),
            "pendingProfiles": sum(1 for t in self._tasks.values() if not t.done()),
            "profileLane": {**self.profile_lane.stats, "running": self.profile_lane.running,
                            "queued": self.profile_lane.queued, "workerRssMb": self.profile_lane.worker_rss_mb},
            "searchLane": {**self.search_lane.stats, "running": self.search_lane.running,
                           "queued": self.search_lane.queued, "workerRssMb": self.search_lane.worker_rss_mb},
            "counters": dict(self.stats),
            "rssMb": server_rss_mb(),
            "memoryDb": self.memory.path,
        }

    async def shutdown(self) -> None:
        for uri in list(self._tasks):
            self._cancel_task(uri)
        await asyncio.gather(self.profile_lane.close(), self.search_lane.close(), return_exceptions=True)
        self.memory.close()


def rewrites_from(result: Any) -> list[Rewrite]:
    """The search's verified candidates that beat the base, fastest first."""
    base = result.base
    base_digest = kernel_hash(base.source)
    seen: set[str] = set()
    out: list[Rewrite] = []
    best_plan = " -> ".join(c.plan for c in result.lineage[1:] if c.plan)
    for candidate in sorted([result.best, *result.beam], key=lambda c: c.latency_ms):
        r = candidate.result
        if candidate.hash in seen or candidate.hash == base.hash or not r.correct or r.latency_ms is None:
            continue
        if base.result.latency_ms is None or r.latency_ms >= base.result.latency_ms:
            continue
        seen.add(candidate.hash)
        rewrite = Rewrite(candidate.hash, candidate.source, base_digest, base.result.latency_ms / r.latency_ms,
                          r.latency_ms, base.result.latency_ms, r.peak_percent, base.result.peak_percent,
                          len(r.seeds), best_plan if candidate.hash == result.best.hash else candidate.plan)
        if any(other.title == rewrite.title for other in out):
            continue  # as fast as one already offered: a second menu entry would only confuse
        out.append(rewrite)
        if len(out) >= MAX_REWRITES:
            break
    return out
