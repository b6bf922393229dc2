"""The editor's interface to the engine: what the language server asks of it, as typed requests and replies.

The server's own process imports this module for its types and its cheap questions (a cached profile, how a
task is checked); the work itself — profiling, the rules' analysis and rewrites (libcst), the migration to NKI
0.8 — runs in the server's worker processes through `EditorEngine`. Requests and replies cross the process
boundary as dicts (`to_dict`, `message_from_dict`) whose values are the engine's own picklable types, so a
message that does not fit its dataclass fails at once on the side that reads it.

Importing this module loads neither the rewrite rules (libcst) nor the migration nor the LLM agents.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

from .engine import (
    REMOTE,
    SIMULATOR,
    ProfilerSettings,
    QuickFix,
    cached_profile,
    check_variant,
    default_rules,
    kernel_family_name,
    load_factories,
    make_profiler,
    profile_cache,
    quick_fixes,
    task_family,
)
from .memory import Memory
from .memory import default_path as default_memory_path
from .profiling import Profiler, ProfileResult, SandboxLimits, TaskRef, as_percent, measured_on
from .profiling.confine import INSTALL_HINT, isolation_problem, unconfined_allowed
from .profiling.profiler import kernel_hash
from .profiling.sandbox import importable_environment
from .tasks import TaskError

if TYPE_CHECKING:
    from .migration_offer import MigrationOffer
    from .search import SearchResult

__all__ = ["INSTALL_HINT", "REMOTE", "SIMULATOR", "AnalyzeReply", "AnalyzeRequest", "EditorEngine", "FixesReply",
           "FixesRequest", "KernelRequest", "LLMRequest", "Memory", "MigrateReply", "MigrateRequest",
           "OptimizeReply", "OptimizeRequest", "ProfileReply", "ProfileRequest", "ProfileResult",
           "ProfilerSettings", "QuickFix", "RepeatedLoad", "SandboxLimits", "TaskRef", "as_percent", "cached",
           "check_variant", "default_memory_path", "isolation_problem", "kernel_family_name", "kernel_hash",
           "measured_on", "message_from_dict", "repeated_loads", "task_family", "unconfined_allowed",
           "worker_environment"]

log = logging.getLogger(__name__)


# --- messages ----------------------------------------------------------------------------------------------


class Message:
    """A request or reply between the editor and its worker. `kind` names it on the wire."""

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """The fields as they are (nested engine values stay objects), with the message's kind."""
        return {"kind": self.kind, **{item.name: getattr(self, item.name) for item in fields(self)}}  # type: ignore[arg-type]


MESSAGES: dict[str, type[Any]] = {}


def message(cls: type[Any]) -> type[Any]:
    """Register a message dataclass under its `kind`, so `message_from_dict` can rebuild it."""
    MESSAGES[cls.kind] = cls
    return cls


def message_from_dict(data: Mapping[str, Any]) -> Any:
    """The message `to_dict` made; a KeyError for an unknown kind, a TypeError for a missing or unknown field."""
    cls = MESSAGES[data["kind"]]
    return cls(**{name: value for name, value in data.items() if name != "kind"})


@dataclass(frozen=True)
class KernelRequest(Message):
    """One kernel of the editor as the engine runs it: its text, task, hardware and profiler. `label` is the
    file's path (the simulator imports helper modules beside it; messages show its name); `kernel_name` the
    function to run, None for the file's only kernel."""

    source: str
    task: TaskRef
    hardware: str
    profiler: ProfilerSettings
    memory_db: str | None = None
    label: str = "kernel.py"
    kernel_name: str | None = None


@message
@dataclass(frozen=True)
class ProfileRequest(KernelRequest):
    kind: ClassVar[str] = "profile"
    check: bool = False


@message
@dataclass(frozen=True)
class ProfileReply(Message):
    """The profile, or why the task itself could not be used (then no result)."""

    kind: ClassVar[str] = "profile-reply"
    result: ProfileResult | None = None
    task_error: str | None = None


@message
@dataclass(frozen=True)
class FixesRequest(KernelRequest):
    """The rules' rewrites of a kernel profiled as `profile`: at most `limit`, timed and checked while `seconds`
    allow. `rule_specs` names rule factories ("module:callable"); none: the engine's default rules."""

    kind: ClassVar[str] = "fixes"
    profile: ProfileResult | None = None
    limit: int = 3
    rule_specs: tuple[str, ...] = ()
    seconds: float = 120.0


@message
@dataclass(frozen=True)
class FixesReply(Message):
    kind: ClassVar[str] = "fixes-reply"
    fixes: tuple[QuickFix, ...] = ()


@message
@dataclass(frozen=True)
class MigrateRequest(KernelRequest):
    kind: ClassVar[str] = "migrate"


@message
@dataclass(frozen=True)
class MigrateReply(Message):
    kind: ClassVar[str] = "migrate-reply"
    offer: MigrationOffer | None = None


@dataclass(frozen=True)
class RepeatedLoad:
    """A load from HBM on `line` that reads the same bytes in every iteration of the loop on `loop_line`."""

    line: int
    loop_line: int
    loop_vars: tuple[str, ...]


@message
@dataclass(frozen=True)
class AnalyzeRequest(Message):
    """What the rules' analysis of a kernel's text says the editor should point at (no kernel runs)."""

    kind: ClassVar[str] = "analyze"
    source: str
    kernel_name: str | None = None


@message
@dataclass(frozen=True)
class AnalyzeReply(Message):
    kind: ClassVar[str] = "analyze-reply"
    repeated_loads: tuple[RepeatedLoad, ...] = ()


@dataclass(frozen=True)
class LLMRequest:
    """The LLM planner the editor's settings name; `api_key` is the secret the editor passed, if any."""

    endpoint: str = ""
    model: str = ""
    api_key: str | None = field(default=None, repr=False)
    budget_usd: float | None = None


@message
@dataclass(frozen=True)
class OptimizeRequest(KernelRequest):
    """A beam search of the editor's kernel: `agents` names agent factories (none: the rules, with the LLM
    planner of `llm` beside them when one is configured); `family` is the task family its lessons go to. Its own
    fields are keyword-only, after the kernel's."""

    kind: ClassVar[str] = "optimize"
    _: KW_ONLY
    preset: str
    workers: int | None = None
    agents: tuple[str, ...] = ()
    llm: LLMRequest | None = None
    family: str | None = None


@message
@dataclass(frozen=True)
class OptimizeReply(Message):
    """The search's result, or why it could not run; `notes` say what it ran without (the LLM planner...)."""

    kind: ClassVar[str] = "optimize-reply"
    search: SearchResult | None = None
    error: str | None = None
    notes: tuple[str, ...] = ()


# --- what the editor's own process asks ---------------------------------------------------------------------


def cached(memory: Memory, request: ProfileRequest, backend: str) -> ProfileResult | None:
    """What the worker would answer `request` with from the memory's profile cache, without running anything."""
    return cached_profile(profile_cache(memory), request.source, request.task, request.hardware, backend, request.check,
                          request.profiler.check_variant, request.kernel_name)


def worker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """A worker process's environment: the engine and its front ends importable wherever the editor started."""
    return importable_environment(dict(environ))


def repeated_loads(source: str, function: str | None) -> tuple[RepeatedLoad, ...]:
    """Loads from HBM inside a loop whose source bytes do not change with that loop, reported against the
    outermost such loop (hoisting out of it helps most). The rules' shared analysis answers, so the editor and
    the optimizer agree in every kernel style. Loads libcst: call it in a worker."""
    from .agents.rules.analysis import model_of
    from .agents.rules.base import RuleError

    if not function:
        return ()
    try:
        model = model_of(source, function=function)
    except (RuleError, ValueError, SyntaxError):
        return ()
    return tuple(RepeatedLoad(op.line, loop.line, (loop.var,) if loop.var else ())
                 for op, loop in model.repeated_loads())


# --- what the editor's worker runs --------------------------------------------------------------------------


class EditorEngine:
    """The engine as one editor worker process holds it: a memory per database and a profiler per settings
    (profilers remember input shapes per task), the quick-fix rules loaded once."""

    MAX_PROFILERS = 16

    def __init__(self) -> None:
        self._memories: dict[str, Memory] = {}
        self._profilers: dict[tuple[ProfilerSettings, str | None], Profiler] = {}
        self._rules: dict[tuple[str, ...], list[Any]] = {}

    def memory(self, path: str | None) -> Memory | None:
        if path is not None and path not in self._memories:
            self._memories[path] = Memory(path)
        return self._memories.get(path) if path is not None else None

    def profiler(self, settings: ProfilerSettings, memory_db: str | None) -> Profiler:
        """One profiler per settings and memory (the settings hold the service token: a token approved later
        must not meet a profiler made without it)."""
        key = (settings, memory_db)
        if key not in self._profilers:
            if len(self._profilers) >= self.MAX_PROFILERS:
                self._profilers.clear()
            self._profilers[key] = make_profiler(settings, profile_cache(self.memory(memory_db)))
        return self._profilers[key]

    def _profile(self, request: KernelRequest, source: str, check: bool, cancel: threading.Event) -> ProfileResult:
        """`source` profiled as the request's kernel would be: its task, hardware, file, function and profiler."""
        return self.profiler(request.profiler, request.memory_db).profile(
            source, request.task, request.hardware, check=check, kernel_label=request.label,
            kernel_name=request.kernel_name, cancel=cancel)

    def profile(self, request: ProfileRequest, cancel: threading.Event) -> ProfileReply:
        try:
            return ProfileReply(self._profile(request, request.source, request.check, cancel))
        except TaskError as exc:
            return ProfileReply(task_error=str(exc))
        except Exception as exc:  # the reference raised while drawing inputs or computing outputs
            return ProfileReply(task_error=f"{type(exc).__name__}: {exc}")

    def rules(self, specs: tuple[str, ...]) -> list[Any]:
        """The rules `specs` name, else the engine's default rules; loaded once per process."""
        if specs not in self._rules:
            try:
                self._rules[specs] = load_factories(specs) if specs else default_rules()
            except Exception:
                log.exception("loading the quick-fix rules %s failed", specs)
                self._rules[specs] = []
        return self._rules[specs]

    def fixes(self, request: FixesRequest, cancel: threading.Event) -> FixesReply:
        """The rules' rewrites of the kernel that the model times faster, checked while the request's seconds
        allow, each with its source."""
        if request.profile is None:
            return FixesReply()

        def evaluate(source: str, check: bool) -> ProfileResult:
            return self._profile(request, source, check, cancel)

        deadline = time.monotonic() + request.seconds
        try:
            return FixesReply(tuple(quick_fixes(self.rules(request.rule_specs), request.source, request.profile,
                                                request.limit, evaluate, deadline, cancel)))
        except TaskError:
            return FixesReply()  # the task is reported by the profile itself

    def migrate(self, request: MigrateRequest, cancel: threading.Event) -> MigrateReply:
        """The legacy kernel migrated to NKI 0.8, both versions run on the same seeds. libcst loads only here,
        for a legacy kernel, not when the worker starts."""
        from .migrate import offer_migration

        try:
            return MigrateReply(offer_migration(request.source, request.task,
                                                self.profiler(request.profiler, request.memory_db),
                                                kernel_name=request.kernel_name))
        except TaskError:
            return MigrateReply()  # the task is reported by the profile itself

    def analyze(self, request: AnalyzeRequest, cancel: threading.Event) -> AnalyzeReply:
        return AnalyzeReply(repeated_loads(request.source, request.kernel_name))

    def handler(self, request: Any) -> Callable[[Any, threading.Event], Any] | None:
        """The method that answers `request`, None for a request the worker answers itself (a search)."""
        return {ProfileRequest: self.profile, FixesRequest: self.fixes, MigrateRequest: self.migrate,
                AnalyzeRequest: self.analyze}.get(type(request))
