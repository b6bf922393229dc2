"""Kernels by content hash, the profile cache, and the profiler-facing ProfileCache adapter."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from accelopt_core.memory import Memory, ProfileCache, check_mode, source_hash
from accelopt_core.memory.profile_cache import engine_fingerprint, memory_key
from accelopt_core.profiling import ProfileResult, SimulatorProfiler, TaskRef
from accelopt_core.profiling.profiler import kernel_hash, profile_key

SOURCE = "@nki.jit\ndef kernel(x):\n    return x\n"


def sample_result() -> ProfileResult:
    return ProfileResult("k.py", "silu", "trn1", "simulator", correct=True, latency_ms=1.25, peak_percent=40.0,
                         bottleneck="vector", seeds=[1, 2], profile={"hbm_read_bytes": 4096},
                         lines=[{"line": 3, "time_ms": 1.0, "engine": "vector", "instructions": 2}])


def test_add_kernel_returns_sha256(memory: Memory) -> None:
    assert memory.add_kernel(SOURCE) == hashlib.sha256(SOURCE.encode()).hexdigest()


def test_hash_matches_profiler(memory: Memory) -> None:
    assert source_hash(SOURCE) == kernel_hash(SOURCE)


def test_kernel_source_round_trip(memory: Memory) -> None:
    assert memory.kernel_source(memory.add_kernel(SOURCE)) == SOURCE


def test_add_kernel_twice_keeps_one_row(memory: Memory) -> None:
    memory.add_kernel(SOURCE)
    memory.add_kernel(SOURCE)
    assert memory.db["kernels"].count == 1


def test_unknown_kernel_is_none(memory: Memory) -> None:
    assert memory.kernel_source("0" * 64) is None


def test_profile_missing_is_none(memory: Memory) -> None:
    assert memory.get_profile("h", "silu", "trn1", "simulator", "check") is None


def test_profile_round_trip(memory: Memory) -> None:
    memory.put_profile("h", "silu", "trn1", "simulator", "check", {"latency_ms": 1.5})
    assert memory.get_profile("h", "silu", "trn1", "simulator", "check") == {"latency_ms": 1.5}


def test_profile_stores_created_time(memory: Memory) -> None:
    memory.put_profile("h", "silu", "trn1", "simulator", "check", {})
    assert next(iter(memory.db["profiles"].rows))["created"]


@pytest.mark.parametrize("other", [("h2", "silu", "trn1", "simulator", "check"),
                                   ("h", "softmax", "trn1", "simulator", "check"),
                                   ("h", "silu", "trn2", "simulator", "check"),
                                   ("h", "silu", "trn1", "remote", "check"),
                                   ("h", "silu", "trn1", "simulator", "check:small")])
def test_profile_key_has_every_part(memory: Memory, other: tuple[str, ...]) -> None:
    memory.put_profile("h", "silu", "trn1", "simulator", "check", {"latency_ms": 1.0})
    assert memory.get_profile(*other) is None


def test_put_profile_replaces(memory: Memory) -> None:
    memory.put_profile("h", "silu", "trn1", "simulator", "check", {"latency_ms": 2.0})
    memory.put_profile("h", "silu", "trn1", "simulator", "check", {"latency_ms": 1.0})
    assert memory.get_profile("h", "silu", "trn1", "simulator", "check") == {"latency_ms": 1.0}
    assert memory.db["profiles"].count == 1


@pytest.mark.parametrize(("variant", "check", "mode"), [(None, True, "check"), ("small", True, "check:small"),
                                                        (None, False, "nocheck"), ("small", False, "nocheck")])
def test_check_mode(variant: str | None, check: bool, mode: str) -> None:
    assert check_mode(variant, check) == mode


def test_profile_cache_round_trip(memory: Memory) -> None:
    cache = ProfileCache(memory)
    key = ("h", "silu", "small", "trn1", "simulator", True)
    cache[key] = sample_result()
    assert key in cache
    assert cache[key] == sample_result()


def test_profile_cache_uses_memory_profiles(memory: Memory) -> None:
    ProfileCache(memory)[("h", "silu", "small", "trn1", "simulator", True)] = sample_result()
    stored = {**sample_result().to_dict(), "engine": engine_fingerprint()}  # which engine computed it
    assert memory.get_profile("h", "silu", "trn1", "simulator", "check:small") == stored


def test_profile_cache_miss(memory: Memory) -> None:
    cache = ProfileCache(memory)
    key = ("h", "silu", None, "trn1", "simulator", True)
    assert key not in cache
    assert cache.get(key) is None
    with pytest.raises(KeyError):
        cache[key]


def test_profile_cache_survives_reopen(db_path: Path) -> None:
    key = ("h", "silu", None, "trn1", "simulator", False)
    with Memory(db_path) as memory:
        ProfileCache(memory)[key] = sample_result()
    with Memory(db_path) as memory:
        assert ProfileCache(memory)[key] == sample_result()


def test_simulator_profiler_reads_profile_cache(memory: Memory) -> None:
    """The key SimulatorProfiler builds finds what the memory holds: a cached kernel is not run again."""
    cache = ProfileCache(memory)
    cache[profile_key(SOURCE, TaskRef(name="silu"), "trn1", "simulator", True, "small")] = sample_result()
    profiler = SimulatorProfiler(check_variant="small", cache=cache)
    assert profiler.profile(SOURCE, TaskRef(name="silu"), "trn1") == sample_result()


def test_profile_cache_recomputes_entries_written_in_percent(memory: Memory) -> None:
    """Results cached before the `*_percent` fields became fractions (no `result_format`) are not served:
    the kernel is profiled again and the entry replaced, instead of a 73.9 being read as 73.9x the latency."""
    old = {**sample_result().to_dict(), "vector_engine_active_time_percent": 73.9}
    del old["result_format"]
    memory.put_profile(kernel_hash(SOURCE), "silu", "trn1", "simulator", "check:small", old)
    cache = ProfileCache(memory)
    key = (kernel_hash(SOURCE), "silu", "small", "trn1", "simulator", True)
    assert key not in cache and cache.get(key) is None
    cache[key] = sample_result()
    assert cache[key] == sample_result()


def test_profile_cache_recomputes_entries_another_engine_wrote(memory: Memory) -> None:
    """A result stored by another version of the simulator or the model (after an upgrade) is profiled
    again: served, it would show the old model's numbers as the new one's."""
    key = (kernel_hash(SOURCE), "silu", "small", "trn1", "simulator", True)
    cache = ProfileCache(memory)
    cache[key] = sample_result()
    assert cache[key] == sample_result()
    stored = memory.get_profile(*memory_key(key))
    assert stored is not None and stored["engine"] == engine_fingerprint()
    memory.put_profile(*memory_key(key), {**stored, "engine": "an older engine"})
    assert key not in cache and cache.get(key) is None
