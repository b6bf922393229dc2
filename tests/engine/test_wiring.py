"""The engine's wiring module: the one profile key, profilers and agents built from settings, and what
the editor asks before anything runs (check variant, task family) read without running a reference."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from accelopt_core.agents.llm import LLMAgent
from accelopt_core.agents.rules.agent import RuleAgent
from accelopt_core.agents.rules.base import Plan
from accelopt_core.config import LLMSettings
from accelopt_core.editor_api import LLMRequest, OptimizeRequest
from accelopt_core.engine import (
    REMOTE,
    ProfilerSettings,
    SearchSettings,
    build_search,
    cached_profile,
    check_variant,
    make_profiler,
    profile_cache,
    rewrites,
    search_agents,
    task_family,
)
from accelopt_core.memory import Memory, ProfileCache
from accelopt_core.profiling import ProfileResult, RemoteProfiler, SandboxLimits, SimulatorProfiler, TaskRef
from accelopt_core.profiling.profiler import file_digest, profile_key
from accelopt_core.search import BeamSearch, preset
from accelopt_core.tasks.registry import all_task_files, task_files

KERNEL = "import neuronxcc.nki.language as nl\n\ndef kernel(x):\n    return x\n"
SILU = TaskRef(name="silu")
PARTS = {"kernel_source": KERNEL, "task": SILU, "hardware": "trn1", "backend": "simulator", "check": True,
         "check_variant": "small"}


def key(**changed: object) -> object:
    return profile_key(**{**PARTS, **changed})  # type: ignore[arg-type]


def test_the_profile_key_is_equal_for_equal_parts_and_differs_in_each_part() -> None:
    assert key() == key() and key() is not None
    others = [key(kernel_source=KERNEL + "# edited\n"), key(task=TaskRef(name="silu:small")), key(hardware="trn2"),
              key(backend="remote"), key(backend="neuron"), key(check=False), key(check_variant=None),
              key(task=TaskRef(name="silu", grid=(2,))), key(kernel_name="kernel_v2")]
    assert all(other != key() for other in others) and len(set(others)) == len(others)


def test_a_run_on_chosen_seeds_has_no_key_fresh_seeds_do() -> None:
    assert key(seeds=[1, 2]) is None and key(seeds=None) == key()


def test_the_key_follows_the_content_of_the_reference(tmp_path: Path) -> None:
    reference = tmp_path / "double_ref.py"
    reference.write_text("import numpy as np\n\ndef make_inputs(rng):\n    return [rng.random((4, 4))]\n\n"
                         "def reference(x):\n    return 2 * x\n")
    task = TaskRef(reference=str(reference))
    before = key(task=task)
    assert key(task=task) == before
    reference.write_text(reference.read_text() + "# edited\n")
    assert key(task=task) != before
    # a named task's reference counts too: the registry's file, by content
    assert SILU.identity == f"silu@{file_digest(task_files('silu').reference)}"


def test_profilers_are_built_from_settings() -> None:
    limits = SandboxLimits(seconds=12.0, memory_mb=512)
    cache: dict[object, ProfileResult] = {}
    simulator = make_profiler(ProfilerSettings(seeds=3, check_variant="small", limits=limits, rtol=1e-3), cache)
    assert isinstance(simulator, SimulatorProfiler)
    assert (simulator.seed_count, simulator.check_variant, simulator.limits, simulator.rtol, simulator.cache) == \
        (3, "small", limits, 1e-3, cache)
    remote = make_profiler(ProfilerSettings(REMOTE, "http://trn-host:8765", "t0ken", check_variant="small",
                                            allow_fallback=True))
    assert isinstance(remote, RemoteProfiler)
    assert (remote.url, remote.token, remote.check_variant, remote.allow_fallback) == \
        ("http://trn-host:8765", "t0ken", "small", True)
    neuron = make_profiler(ProfilerSettings("neuron", neuron_options=(("hardware", "trn2"),)))
    assert (neuron.backend, neuron.hardware) == ("neuron", "trn2")
    with pytest.raises(ValueError, match="unknown backend"):
        make_profiler(ProfilerSettings("gpu"))


def test_settings_keep_the_token_out_of_their_text_but_in_their_identity() -> None:
    settings = ProfilerSettings(REMOTE, "http://trn-host:8765", "s3cret")
    assert "s3cret" not in repr(settings)
    assert settings != ProfilerSettings(REMOTE, "http://trn-host:8765", "other") and hash(settings) is not None


def test_what_a_profiler_stores_is_what_a_reader_of_the_cache_finds(tmp_path: Path) -> None:
    with Memory(tmp_path / "memory.db") as memory:
        result = ProfileResult("k.py", "silu", "trn1", "simulator", latency_ms=1.5)
        cache = profile_cache(memory)
        cache[key()] = result  # type: ignore[index]
        assert cached_profile(cache, KERNEL, SILU, "trn1", "simulator", True, "small") == result
        assert cached_profile(cache, KERNEL, SILU, "trn1", "remote", True, "small") is None
    assert profile_cache(None) == {}


def test_the_language_server_builds_its_profiler_through_the_engine(tmp_path: Path) -> None:
    from server import worker
    from server.config import Settings
    from server.session import Session

    session = Session(Settings(backend="http://trn-host:8765", check_seeds=2, sandbox_seconds=20.0,
                               sandbox_memory_mb=1024, memory_db=str(tmp_path / "m.db")))
    settings = session.profiler_settings("small")
    assert (settings.backend, settings.service_url, settings.seeds, settings.check_variant, settings.limits) == \
        (REMOTE, "http://trn-host:8765", 2, "small", SandboxLimits(20.0, 1024))
    local = Session(Settings(memory_db=str(tmp_path / "m.db"))).profiler_settings(None)
    profiler = worker.engine.profiler(local, str(tmp_path / "m.db"))
    assert isinstance(profiler, SimulatorProfiler) and worker.engine.profiler(local, str(tmp_path / "m.db")) is profiler
    assert isinstance(worker.engine.profiler(settings, None), RemoteProfiler)


def test_check_variant_and_family_read_from_the_text_match_the_loaded_task() -> None:
    for name in all_task_files():
        loaded = TaskRef(name=name).load()
        assert task_family(TaskRef(name=name)) == loaded.family, name
        assert check_variant(TaskRef(name=name)) == ("small" if "small" in loaded.variants else None), name
        assert check_variant(TaskRef(name=f"{name}:small")) is None


def test_a_reference_file_without_declarations_is_its_own_family(tmp_path: Path) -> None:
    reference = tmp_path / "scale_ref.py"
    reference.write_text("def make_inputs(rng):\n    return []\n")
    assert task_family(TaskRef(reference=str(reference))) == "scale"
    assert check_variant(TaskRef(reference=str(reference))) is None


def test_search_agents_for_each_planner(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("")
    offline = LLMSettings.load(environ={}, config_path=config)
    rules = search_agents("rules", offline)
    assert [type(a) for a in rules.agents] == [RuleAgent] and rules.llm is None and not rules.missing
    fallback = search_agents("llm", offline)
    assert fallback.planner == "rules" and fallback.missing and [type(a) for a in fallback.agents] == [RuleAgent]
    online = LLMSettings.load(environ={}, config_path=config, base_url="http://llm:8000/v1", model="m",
                              api_key="k")
    both = search_agents("both", online, samples_per_plan=2)
    try:
        assert [type(a) for a in both.agents] == [RuleAgent, LLMAgent] and both.llm is not None
        assert not both.llm.prefetch  # beside the rules, unpicked plans cost nothing
    finally:
        both.close()
    alone = search_agents("llm", online)
    try:
        assert alone.llm is not None and alone.llm.prefetch
    finally:
        alone.close()
    with pytest.raises(ValueError, match="unknown planner"):
        search_agents("oracle", offline)


def test_search_settings_apply_the_overrides_given_to_the_preset() -> None:
    assert SearchSettings("quick").config() == preset("quick")
    overridden = SearchSettings("quick", iterations=9, beam_width=3, workers=1, replay_steps=0,
                                time_budget_s=60).config()
    assert (overridden.iterations, overridden.beam_width, overridden.workers, overridden.replay_steps,
            overridden.time_budget_s) == (9, 3, 1, 0, 60)
    assert SearchSettings("quick", time_budget_s=0).config().time_budget_s is None  # 0: no limit
    with pytest.raises(ValueError, match="unknown search preset"):
        SearchSettings("huge").config()


def test_build_search_wires_the_presets_seeds_the_memorys_cache_and_the_planners_agents(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        built = build_search(SearchSettings("quick", profiler=ProfilerSettings(seeds=2, check_variant="small")),
                             memory)
        try:
            assert isinstance(built.search, BeamSearch) and built.search.config == preset("quick")
            assert isinstance(built.profiler, SimulatorProfiler)
            assert built.profiler.seed_count == preset("quick").seeds != 2  # the preset's seeds, not the profiler's
            assert isinstance(built.profiler.cache, ProfileCache)
            assert [type(a) for a in built.search.policy.agents] == [RuleAgent]
            assert built.search.policy.agents == built.agents.agents
        finally:
            built.close()


def test_build_search_makes_the_agents_the_factories_name_or_says_why_not(tmp_path: Path) -> None:
    factory = tmp_path / "agents.py"
    factory.write_text("from accelopt_core.agents.rules.agent import RuleAgent\n"
                       "def make():\n    return RuleAgent([])\n"
                       "def broken():\n    raise OSError('no model here')\n")
    built = build_search(SearchSettings("quick", planner="llm", agent_specs=(f"{factory}:make",)))
    assert [type(a) for a in built.agents.agents] == [RuleAgent] and not built.agents.missing
    with pytest.raises(RuntimeError, match=r"cannot load the optimizer agents .*no model here"):
        build_search(SearchSettings("quick", agent_specs=(f"{factory}:broken",)))


def test_the_language_server_worker_builds_its_search_from_the_editors_settings(tmp_path: Path) -> None:
    from server.worker import search_settings

    request = OptimizeRequest(source="", task="silu", hardware="trn1", preset="quick", workers=1,
                              profiler=ProfilerSettings(check_variant="small"))
    notes: list[str] = []
    plain = search_settings(request, notes)
    assert (plain.preset, plain.workers, plain.planner, plain.llm, plain.agent_specs, notes) == \
        ("quick", 1, "rules", None, (), [])
    online = search_settings(replace(request, llm=LLMRequest("http://llm:8000/v1", "m")), notes)
    assert online.planner == "both" and online.llm is not None and online.llm.base_url == "http://llm:8000/v1"
    named = search_settings(replace(request, agents=("a.py:make",), llm=LLMRequest(model="m")), notes)
    assert named.agent_specs == ("a.py:make",) and named.llm is None  # the named agents plan, not the LLM


class _Rule:
    def __init__(self, name: str, priority: float, fails: bool = False):
        self.name, self.priority, self.fails = name, priority, fails

    def plan(self, source: str, profile: object) -> list[Plan]:
        if self.fails:
            raise RuntimeError("a bug in the rule")
        return [Plan(self.name, 1, f"{self.name} here", {}, self.priority)]

    def apply(self, source: str, plan: Plan) -> str:
        return source + f"# {self.name}\n"


def test_rewrites_skip_a_rule_that_fails_to_plan_and_keep_the_agents_order() -> None:
    rules = [_Rule("low", 0.1), _Rule("broken", 0.9, fails=True), _Rule("high", 0.5)]
    assert [plan.rule for plan, _ in rewrites(rules, KERNEL, None, 5)] == ["high", "low"]  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        RuleAgent(rules).ranked_plans(KERNEL, None)  # type: ignore[arg-type]
