"""What the server knows about one kernel file: its text, what it is, its task, its latest profile,
the quick fixes and verified rewrites on offer. Plain data; the session updates it, features read it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pygls.uris import to_fs_path

from accelopt_core.editor_api import ProfileResult, QuickFix, RepeatedLoad, kernel_family_name, kernel_hash, task_family
from accelopt_core.report import counted

from .edits import line_map
from .format import ms
from .kernels import KernelFile, TaskLink, analyze, link_task

if TYPE_CHECKING:  # the migration is made in the worker: libcst never loads into the server
    from accelopt_core.migration_offer import MigrationOffer


@dataclass(frozen=True)
class Rewrite:
    """A verified candidate from Optimize: correct on the checked seeds and faster than the base."""

    key: str
    source: str
    base_digest: str
    speedup: float
    latency_ms: float
    base_latency_ms: float
    peak_percent: float | None
    base_peak_percent: float | None
    seeds: int
    plan: str

    @property
    def title(self) -> str:
        if self.peak_percent is not None and self.base_peak_percent is not None:
            detail = f"{self.base_peak_percent:.0f}% -> {self.peak_percent:.0f}% of peak"
        else:
            detail = f"{ms(self.base_latency_ms)} -> {ms(self.latency_ms)}"
        return f"Apply rewrite: {self.speedup:.2f}x faster ({detail}, checked on {counted(self.seeds, 'seed')})"


@dataclass
class SearchRun:
    """An Optimize in progress on this file."""

    job: Any
    base_source: str
    last_event: Any = None
    stopping: bool = False
    # {iteration, best_latency_ms, best_peak_percent} per finished iteration, as the search reports them
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class KernelDocument:
    uri: str
    path: str | None
    source: str
    version: int | None = None
    open: bool = True
    info: KernelFile = field(default_factory=lambda: KernelFile(False))
    link: TaskLink | None = None
    hardware_override: str | None = None
    request_id: int = 0
    phase: str = "idle"  # idle, waiting, tracing, checking
    profiled_source: str | None = None
    trace: ProfileResult | None = None
    checked: ProfileResult | None = None
    task_error: str | None = None
    failure: str | None = None  # the profiling machinery failed (not the kernel)
    fixes: list[QuickFix] = field(default_factory=list)
    repeated_loads: tuple[RepeatedLoad, ...] = ()  # what the rules' analysis of the profiled text found
    applied_fix: QuickFix | None = None  # the quick fix whose rewrite the profiled text is (judged by its profile)
    rewrites: list[Rewrite] = field(default_factory=list)
    migration: MigrationOffer | None = None  # a legacy kernel's migration to NKI 0.8, run in the worker
    search: SearchRun | None = None
    last_search: dict[str, Any] | None = None
    chosen_kernel: str | None = None  # picked with a lens in a file of several kernels
    # each kernel's latest profile in a file of several: kernel name -> (the text profiled, the result)
    kept: dict[str, tuple[str, ProfileResult]] = field(default_factory=dict)
    _digest: tuple[str, str] | None = None
    _line_map: tuple[str, dict[int, int]] | None = None

    @staticmethod
    def create(uri: str, source: str, version: int | None = None) -> KernelDocument:
        path = to_fs_path(uri) if uri.startswith("file:") else None
        doc = KernelDocument(uri, path, source, version)
        doc.reanalyze()
        return doc

    def reanalyze(self) -> None:
        """Re-read what the text is; cheap enough for every keystroke. An edit of the directive's `kernel=`
        is the latest word on which kernel to profile: it ends a pick made with a lens."""
        named_before = self.info.directive.kernel if self.info.directive is not None else None
        self.info = analyze(self.source, os.path.basename(self.path or "kernel.py"), self.chosen_kernel)
        named = self.info.directive.kernel if self.info.directive is not None else None
        if self.chosen_kernel is not None and named != named_before and self.info.is_kernel:
            self.chosen_kernel = None
            self.info = analyze(self.source, os.path.basename(self.path or "kernel.py"))
        self.relink()

    def relink(self) -> bool:
        """Recompute the task link (files may have appeared or gone); True when it changed."""
        link = link_task(self.info, self.path) if self.info.is_kernel and not self.info.syntax_error else None
        changed = link != self.link
        self.link = link
        return changed

    @property
    def digest(self) -> str:
        if self._digest is None or self._digest[0] is not self.source:
            self._digest = (self.source, kernel_hash(self.source))
        return self._digest[1]

    @property
    def profilable(self) -> bool:
        return bool(self.info.is_kernel and self.info.function and not self.info.syntax_error
                    and self.link is not None and self.link.ok)

    def family(self) -> str:
        """The task family this kernel's searches learn in (engine.task_family); the file must be linked."""
        assert self.link is not None and self.link.ref is not None
        return task_family(self.link.ref, kernel_family_name(self.info.function, self.path))

    def hardware(self, default: str) -> str:
        return self.hardware_override or default

    @property
    def result(self) -> ProfileResult | None:
        """The most complete profile: the checked run once it has timing, else the trace-only run."""
        if self.checked is not None and (self.checked.latency_ms is not None or self.checked.error):
            return self.checked
        return self.trace

    @property
    def outdated(self) -> bool:
        """The shown profile belongs to an earlier text of the file."""
        return self.profiled_source is not None and self.profiled_source != self.source

    def to_current(self) -> dict[int, int] | None:
        """Profiled line -> current line for lines unchanged since profiling (None: nothing changed)."""
        if not self.outdated or self.profiled_source is None:
            return None
        if self._line_map is None or self._line_map[0] is not self.source:
            self._line_map = (self.source, line_map(self.profiled_source, self.source))
        return self._line_map[1]

    def current_line_of(self, profiled: int) -> int | None:
        mapping = self.to_current()
        return profiled if mapping is None else mapping.get(profiled)

    def profiled_line_of(self, current: int) -> int | None:
        mapping = self.to_current()
        if mapping is None:
            return current
        return next((old for old, new in mapping.items() if new == current), None)

    def choose_kernel(self, name: str) -> bool:
        """Profile `name` among the file's kernels from now on; False when it is not one of them. What was
        shown belongs to the kernel profiled before (kept in `kept`), so it goes."""
        if name not in {k.name for k in self.info.kernels}:
            return False
        if name != self.info.function:
            self.chosen_kernel = name
            self.reanalyze()
            self.trace = self.checked = None
            self.profiled_source = self.task_error = self.failure = None
            self.fixes, self.rewrites, self.migration, self.repeated_loads = [], [], None, ()
        return True

    def keep(self, result: ProfileResult) -> None:
        """Remember `result` as its kernel's latest profile, for the lens over that kernel."""
        if self.info.function is not None:
            self.kept[self.info.function] = (self.source, result)

    def current_rewrites(self) -> list[Rewrite]:
        return [r for r in self.rewrites if r.base_digest == self.digest]

    def current_migration(self) -> MigrationOffer | None:
        """The migration of exactly the text in the editor (an edit since makes it stale)."""
        offer = self.migration
        return offer if offer is not None and offer.base_source == self.source else None

    def current_fixes(self) -> list[QuickFix]:
        return self.fixes if not self.outdated else []
