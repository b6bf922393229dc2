"""Engine wiring: the one place that turns settings — the command line's flags, the editor's settings, the
service's configuration — into the engine's working parts (a profiler and its cache, the search and its
agents, the rewrite rules' quick fixes), and that answers what a front end asks before anything runs: how a task is
checked, which family of lessons it belongs to, what is cached for a kernel.

Importing this module loads neither the rewrite rules (libcst) nor the LLM agents: the language server's
own process asks it questions, and only its workers build agents.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .config import LLMSettings
from .memory import Memory, ProfileCache
from .profiling import Profiler, ProfileResult, RemoteProfiler, SandboxLimits, SimulatorProfiler, TaskRef
from .profiling.profiler import profile_key
from .search import BeamSearch, SearchConfig, SearchError, SearchEvent, preset
from .tasks.declared import default_task_name, read_declared

if TYPE_CHECKING:
    from .agents.llm import LLMAgent
    from .agents.rules import Plan, Rule

log = logging.getLogger(__name__)

SIMULATOR, NEURON, REMOTE = "simulator", "neuron", "remote"
Cache = ProfileCache | dict[Any, ProfileResult]  # what a profiler's `cache=` takes
PLANNERS = ("rules", "llm", "both")


# --- profiling --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfilerSettings:
    """Everything a profiler is built from; frozen and hashable, so a long-lived process keeps one profiler
    per settings. `backend`: "simulator", "neuron" (this host's NeuronCores) or "remote" (the profiling
    service at `service_url`, with `token`). `limits` None: the backend's own defaults."""

    backend: str = SIMULATOR
    service_url: str = ""
    token: str = field(default="", repr=False)
    seeds: int = 5
    check_variant: str | None = None
    limits: SandboxLimits | None = None
    rtol: float | None = None
    allow_fallback: bool = False  # remote: profile on the simulator when the service is unreachable
    forbidden_paths: tuple[str, ...] = ()
    neuron_options: tuple[tuple[str, Any], ...] = ()  # keyword arguments of NeuronProfiler


def limits_of(seconds: float | None, memory_mb: int | None, allow_unconfined: bool = False) -> SandboxLimits:
    """The limits a user's --seconds and --memory-mb set: for the kernel's own run and the check alike, exactly
    as given; the defaults where not given (the check's time then grows with the task's inputs)."""
    given: dict[str, Any] = {}
    if seconds is not None:
        given.update(seconds=seconds, check_seconds=seconds)
    if memory_mb is not None:
        given.update(memory_mb=memory_mb, check_memory_mb=memory_mb)
    return SandboxLimits(allow_unconfined=allow_unconfined, **given)


def make_profiler(settings: ProfilerSettings, cache: Cache | None = None) -> Profiler:
    """The profiler the settings describe, caching in `cache` (None: a cache for this profiler alone). A remote
    profiler takes no cache: the service keeps its own, and its results carry the service's backend."""
    if settings.backend == REMOTE:
        return RemoteProfiler(settings.service_url, settings.token, check_variant=settings.check_variant,
                              allow_fallback=settings.allow_fallback)
    common: dict[str, Any] = {"seeds": settings.seeds, "check_variant": settings.check_variant,
                              "limits": settings.limits, "forbidden_paths": list(settings.forbidden_paths),
                              "cache": cache, "rtol": settings.rtol}
    if settings.backend == NEURON:
        from .profiling.neuron import NeuronProfiler

        return NeuronProfiler(**common, **dict(settings.neuron_options))
    if settings.backend == SIMULATOR:
        return SimulatorProfiler(**common)
    raise ValueError(f"unknown backend {settings.backend!r}; use {SIMULATOR}, {NEURON} or {REMOTE}")


def profile_cache(memory: Memory | None) -> Cache:
    """The optimization memory's persistent profile cache, or a cache of this process alone without one."""
    return ProfileCache(memory) if memory is not None else {}


def cached_profile(cache: Cache, kernel_source: str, task: TaskRef, hardware: str, backend: str, check: bool,
                   check_variant: str | None, kernel_name: str | None = None) -> ProfileResult | None:
    """What a profiler with these settings would answer from `cache` without running the kernel."""
    key = profile_key(kernel_source, task, hardware, backend, check, check_variant, kernel_name=kernel_name)
    return cache.get(key) if key is not None else None


# --- tasks, read without running their references ----------------------------------------------------


def check_variant(task: TaskRef) -> str | None:
    """Check on the task's small size when it has one and is timed at another (seconds instead of minutes).
    Read from the reference's text: the editor decides this in a process that runs no reference."""
    if "small" in ((task.name or "").partition(":")[2], task.variant):
        return None
    return "small" if "small" in read_declared(task.reference_path).variants else None


# file and function names that say nothing about what a task computes: never a task family
GENERIC_NAMES = frozenset({"", "ref", "refs", "reference", "references", "kernel", "kernels", "optimized_kernel",
                           "main", "test", "task", "impl", "baseline", "golden", "nki"})


def task_family(task: TaskRef, kernel: str | None = None) -> str:
    """The family whose lessons a search of this task reads and writes: the reference's `FAMILY`, else a
    named task's name, else the reference file's name when it says what the task is (`matmul_ref.py`), else
    `kernel`, the kernel's own name (kernel_family_name): a `ref.py` beside every kernel must not file
    mamba's and matmul's lessons together as family "ref"."""
    declared = read_declared(task.reference_path).family
    if declared:
        return declared
    if task.name:
        return task.name.partition(":")[0]
    stem = default_task_name(task.reference or "")
    return kernel if kernel and stem.lower() in GENERIC_NAMES else stem


def kernel_family_name(function: str | None, path: str | None) -> str | None:
    """A kernel's own name for its task family: its function's name (`flash_fwd`), else, for a function named
    generically (`kernel`), its file's name without `.optimized` (`mamba.optimized.py`: mamba); None when
    neither says anything."""
    if function and function.lower() not in GENERIC_NAMES:
        return function
    stem = os.path.splitext(os.path.basename(path or ""))[0].removesuffix(".optimized")
    return stem if stem.lower() not in GENERIC_NAMES else None


# --- agents -------------------------------------------------------------------------------------------


def load_factories(specs: Sequence[str]) -> list[Any]:
    """Objects made by factories named "module:callable" or "path/to/file.py:callable" (optimizer agents and
    quick-fix rules supplied by whoever launches a front end); a factory may return one object or a list."""
    made: list[Any] = []
    for spec in specs:
        where, _, name = spec.rpartition(":")
        if not where or not name:
            raise ValueError(f"{spec!r} should look like module:callable or path/to/file.py:callable")
        if where.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(f"accelopt_plugin_{abs(hash(where))}", where)
            if module_spec is None or module_spec.loader is None:
                raise ValueError(f"cannot import {where}")
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
        value = getattr(module, name)()
        made.extend(value if isinstance(value, (list, tuple)) else [value])
    return made


def default_rules() -> list[Rule]:
    """The rule-based optimizer's rules, in their default order."""
    from .agents.rules.registry import default_rules as registered

    return registered()


@dataclass
class SearchAgents:
    """The agents of one search, the LLM agent among them (for its usage line), who plans ("rules", "llm"
    or "both") and, when the LLM agents were asked for but could not run, the settings they missed."""

    agents: list[Any]
    llm: LLMAgent | None = None
    planner: str = "rules"
    missing: tuple[str, ...] = ()

    def close(self) -> None:
        for agent in self.agents:
            close = getattr(agent, "close", None)
            if callable(close):
                close()


def search_agents(planner: str, settings: LLMSettings | None, samples_per_plan: int = 1) -> SearchAgents:
    """The agents for `planner`. The LLM agents asked for with no endpoint configured: the rule-based optimizer
    runs instead, and `missing` says why. Beside the rules, the LLM agent does not prefetch samples of plans
    the search may not pick (they would cost money for nothing)."""
    if planner not in PLANNERS:
        raise ValueError(f"unknown planner {planner!r}; use one of {', '.join(PLANNERS)}")
    missing: tuple[str, ...] = ()
    if planner != "rules" and (settings is None or not settings.configured()):
        missing = tuple(settings.missing()) if settings is not None else ("an LLM endpoint",)
        planner = "rules"
    chosen = SearchAgents([], planner=planner, missing=missing)
    if planner in ("rules", "both"):
        from .agents.rules.agent import RuleAgent

        chosen.agents.append(RuleAgent(default_rules()))
    if planner in ("llm", "both"):
        from .agents.llm import LLMAgent

        assert settings is not None
        chosen.llm = LLMAgent(settings, prefetch=planner == "llm")
        chosen.llm.expect_samples(samples_per_plan)
        chosen.agents.append(chosen.llm)
    return chosen


# --- the search -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchSettings:
    """Everything a search is built from, whichever front end asks: a preset and what overrides it (None: the
    preset's; `time_budget_s` 0: no limit), the profiler, and who plans: `planner` with the LLM's settings, or
    the agents the factories `agent_specs` make ("module:callable", see load_factories) instead."""

    preset: str = "default"
    iterations: int | None = None
    beam_width: int | None = None
    workers: int | None = None
    replay_steps: int | None = None
    time_budget_s: float | None = None
    profiler: ProfilerSettings = ProfilerSettings()
    planner: str = "rules"
    llm: LLMSettings | None = None
    agent_specs: tuple[str, ...] = ()

    def config(self) -> SearchConfig:
        """The preset with the overrides given; ValueError for an unknown preset."""
        config = preset(self.preset, iterations=self.iterations, beam_width=self.beam_width, workers=self.workers,
                        replay_steps=self.replay_steps)
        return config if self.time_budget_s is None else replace(config, time_budget_s=self.time_budget_s or None)


@dataclass
class BuiltSearch:
    """A search ready to run, with the agents it runs (closed by `close`; the LLM agent's usage and who plans
    are there) and the profiler it evaluates on."""

    search: BeamSearch
    agents: SearchAgents
    profiler: Profiler

    def close(self) -> None:
        self.agents.close()


def build_search(settings: SearchSettings, memory: Memory | None = None,
                 on_event: Callable[[SearchEvent], None] | None = None,
                 cancel: threading.Event | None = None) -> BuiltSearch:
    """The one place a search is assembled: its configuration, a profiler on `settings.profiler` with the preset's
    seeds caching in `memory` (the optimization memory the search also records to), and its agents.
    RuntimeError when the factories of `agent_specs` cannot make agents."""
    config = settings.config()
    profiler = make_profiler(replace(settings.profiler, seeds=config.seeds), profile_cache(memory))
    if settings.agent_specs:
        try:
            agents = SearchAgents(load_factories(settings.agent_specs))
        except Exception as exc:
            raise RuntimeError(f"cannot load the optimizer agents {', '.join(settings.agent_specs)}: {exc}") from None
    else:
        agents = search_agents(settings.planner, settings.llm, config.samples_per_plan)
    try:
        return BuiltSearch(BeamSearch(profiler, agents.agents, config, memory, on_event, cancel), agents, profiler)
    except SearchError:
        agents.close()
        raise


# --- quick fixes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuickFix:
    """One rule's rewrite of one place in a kernel, offered only once the model times it faster than the
    kernel: `estimated_ms` is its trace-only latency, or its checked run's once `checked` (correct on the
    task's seeds and still faster); verified rewrites of many steps come from a search."""

    rule: str
    line: int  # 1-based
    description: str
    priority: float
    key: str
    new_source: str
    baseline_ms: float  # the kernel's latency it was compared with
    estimated_ms: float
    checked: bool = False

    @property
    def speedup(self) -> float:
        return self.baseline_ms / self.estimated_ms if self.estimated_ms else 1.0


MIN_FIX_SPEEDUP = 1.01  # a quick fix must show a change a person can see in the lens's four digits
Evaluate = Callable[[str, bool], ProfileResult]  # (source, check) -> its profile


def rewrites(rules: Sequence[Rule], source: str, profile: ProfileResult | None, limit: int
             ) -> list[tuple[Plan, str]]:
    """The best `limit` distinct rewrites the rules would make, in the rule-based optimizer's order, with their
    sources. Parsing and rewriting with libcst never executes the kernel; a rule that fails is skipped."""
    from .agents.rules.agent import RuleAgent, focus_of

    found: list[tuple[Plan, str]] = []
    seen: set[str] = set()
    for rule, plan in RuleAgent(rules).ranked_plans(source, profile, skip_failing=True):
        if len(found) >= limit:
            break
        try:
            with focus_of(profile):
                new_source = rule.apply(source, plan)
        except Exception as exc:  # a RuleError: the plan does not fit after all (or the rule's own bug)
            log.debug("rule %s could not apply %s: %s", plan.rule, plan.key, exc)
            continue
        if new_source == source or new_source in seen:
            continue
        seen.add(new_source)
        found.append((plan, new_source))
    return found


def quick_fixes(rules: Sequence[Rule], source: str, profile: ProfileResult, limit: int, evaluate: Evaluate,
                deadline: float | None = None, cancel: threading.Event | None = None) -> list[QuickFix]:
    """The rewrites the editor may offer: each of the rules' best rewrites (up to twice `limit` tried) is timed
    by the model, trace-only, and kept only when it is at least MIN_FIX_SPEEDUP faster than `profile`; the
    kept ones are then checked in order while `deadline` (time.monotonic()) allows: one that fails to run,
    gives wrong results or is no longer faster in its checked run is dropped, so what is offered never
    makes the kernel slower by the model's word and is labelled checked only once it was."""
    base = profile.latency_ms
    if not base or profile.error:
        return []
    timed: list[QuickFix] = []
    def stopped() -> bool:
        return (cancel is not None and cancel.is_set()) or (deadline is not None and time.monotonic() > deadline)

    for plan, new_source in rewrites(rules, source, profile, 2 * limit):
        if len(timed) >= limit or stopped():
            break
        estimate = evaluate(new_source, False)
        if estimate.error or not estimate.latency_ms or base / estimate.latency_ms < MIN_FIX_SPEEDUP:
            continue
        timed.append(QuickFix(plan.rule, int(plan.line), plan.description, float(plan.priority), plan.key,
                              new_source, base, estimate.latency_ms))
    fixes: list[QuickFix] = []
    for fix in timed:
        if stopped():
            fixes.append(fix)  # left to the model's estimate, and labelled so
            continue
        checked = evaluate(fix.new_source, True)
        if checked.correct and checked.latency_ms and base / checked.latency_ms >= MIN_FIX_SPEEDUP:
            fixes.append(replace(fix, estimated_ms=checked.latency_ms, checked=True))
    return fixes
