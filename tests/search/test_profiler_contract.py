"""Every profiler the search, the CLI, the language server and the service may be handed satisfies the
`Profiler` protocol: its members exist and its `profile` takes every argument the protocol names."""

from __future__ import annotations

import inspect
import threading

import pytest
from test_beam import CountingProfiler, SlowStubProfiler

from accelopt_core.engine import NEURON, REMOTE, SIMULATOR, ProfilerSettings, make_profiler
from accelopt_core.profiling import Profiler, RemoteProfiler, SimulatorProfiler, TaskRef
from accelopt_core.profiling.neuron import NeuronProfiler
from accelopt_core.service.ray_backend import RayProfiler


def _profilers() -> list[object]:
    return [SimulatorProfiler(), SimulatorProfiler(check_variant="small"), NeuronProfiler(),
            RemoteProfiler("http://127.0.0.1:9", "token", check_variant="small"),
            RayProfiler(address=None, check_variant="small"),
            *(make_profiler(ProfilerSettings(backend, "http://127.0.0.1:9", "token"))
              for backend in (SIMULATOR, NEURON, REMOTE)),
            CountingProfiler(), SlowStubProfiler(0.0)]


def _protocol_call() -> inspect.BoundArguments:
    """A call of `profile` that passes every parameter of the protocol's, by its own kind."""
    parameters = list(inspect.signature(Profiler.profile).parameters.values())[1:]
    positional = ["kernel = 1\n", TaskRef("silu"), "trn1", True]
    keywords = {"seeds": [1], "kernel_label": "k.py", "kernel_name": "kernel", "cancel": threading.Event()}
    assert [p.name for p in parameters] == ["kernel_source", "task", "hardware", "check", *keywords]
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters[4:])
    return inspect.signature(Profiler.profile).bind(None, *positional, **keywords)


@pytest.mark.parametrize("profiler", _profilers(), ids=lambda p: type(p).__name__)
def test_every_profiler_satisfies_the_protocol(profiler: object) -> None:
    assert isinstance(profiler, Profiler)
    call = _protocol_call()
    inspect.signature(profiler.profile).bind(*call.args[1:], **call.kwargs)  # type: ignore[attr-defined]
    timed = profiler.at_timed_size()  # type: ignore[attr-defined]
    assert timed is None or isinstance(timed, type(profiler))
    assert isinstance(profiler.backend, str)  # type: ignore[attr-defined]


def test_at_timed_size_checks_once_at_the_timed_size() -> None:
    """Where a profiler checks on a size variant, its timed-size twin checks the task itself."""
    for profiler in (SimulatorProfiler(check_variant="small"), RayProfiler(address=None, check_variant="small")):
        timed = profiler.at_timed_size()
        assert timed is not None and timed.check_variant is None and timed.cache is profiler.cache
    assert SimulatorProfiler(check_variant="small").at_timed_size().seed_count == 1  # type: ignore[union-attr]
    assert RayProfiler(address=None, check_variant="small").at_timed_size().config.seeds == 1  # type: ignore[union-attr]
