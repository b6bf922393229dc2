"""Search records: enough to resume a killed search without evaluating anything twice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from accelopt_core.memory import CandidateRecord, Memory

CONFIG = {"beam_width": 2, "plans": 3, "samples": 1, "iterations": 4}


def start(memory: Memory, task: str = "silu", hardware: str = "trn1") -> int:
    return memory.start_search(task, hardware, CONFIG, "base", "rules")


def test_start_search_returns_new_ids(memory: Memory) -> None:
    assert start(memory) != start(memory)


def test_new_search_state_is_empty(memory: Memory) -> None:
    state = memory.search_state(start(memory))
    assert (state.config, state.iteration, state.beam, state.candidates) == (CONFIG, -1, [], [])


def test_search_info_fields(memory: Memory) -> None:
    info = memory.get_search(start(memory))
    assert info is not None
    assert (info.task, info.hardware, info.config, info.base_hash, info.planner, info.status) == (
        "silu", "trn1", CONFIG, "base", "rules", "running")


def test_record_candidate_is_in_state(memory: Memory) -> None:
    sid = start(memory)
    memory.record_candidate(sid, 0, "k1", "base", "hoist load", "rule:hoist", {"latency_ms": 1.0}, "correct")
    assert memory.search_state(sid).candidates == [
        CandidateRecord(0, "k1", "base", "hoist load", "rule:hoist", {"latency_ms": 1.0}, "correct")]


def test_candidate_without_result(memory: Memory) -> None:
    sid = start(memory)
    memory.record_candidate(sid, 0, "k1", "base", "p", "llm", None, "failed")
    assert memory.search_state(sid).candidates[0].result is None


def test_candidates_keep_recording_order(memory: Memory) -> None:
    sid = start(memory)
    for name in ("c", "a", "b"):
        memory.record_candidate(sid, 0, name, "base", "p", "llm", None, "incorrect")
    assert [c.kernel_hash for c in memory.search_state(sid).candidates] == ["c", "a", "b"]


def test_re_recording_keeps_one_row_with_latest_result(memory: Memory) -> None:
    sid = start(memory)
    memory.record_candidate(sid, 0, "k1", "base", "p", "llm", None, "failed")
    memory.record_candidate(sid, 0, "k1", "base", "p", "llm", {"latency_ms": 2.0}, "correct")
    assert [(c.status, c.result) for c in memory.search_state(sid).candidates] == [("correct", {"latency_ms": 2.0})]


def test_same_kernel_from_two_plans_is_two_records(memory: Memory) -> None:
    sid = start(memory)
    memory.record_candidate(sid, 0, "k1", "base", "plan a", "llm", None, "correct")
    memory.record_candidate(sid, 0, "k1", "base", "plan b", "llm", None, "correct")
    assert len(memory.search_state(sid).candidates) == 2


def test_recorded_finds_latest_candidate_of_a_kernel(memory: Memory) -> None:
    sid = start(memory)
    memory.record_candidate(sid, 0, "k1", "base", "p", "llm", {"latency_ms": 3.0}, "correct")
    memory.record_candidate(sid, 1, "k1", "k0", "q", "llm", {"latency_ms": 2.0}, "correct")
    state = memory.search_state(sid)
    found = state.recorded("k1")
    assert found is not None and found.iteration == 1
    assert state.recorded("never") is None


def test_candidates_are_per_search(memory: Memory) -> None:
    first, second = start(memory), start(memory)
    memory.record_candidate(first, 0, "k1", "base", "p", "llm", None, "correct")
    assert memory.search_state(second).candidates == []


def test_candidate_for_unknown_search_is_refused(memory: Memory) -> None:
    with pytest.raises(sqlite3.IntegrityError):
        memory.record_candidate(999, 0, "k1", "base", "p", "llm", None, "correct")


def test_finish_iteration_sets_resume_point(memory: Memory) -> None:
    sid = start(memory)
    memory.finish_iteration(sid, 0, ["k1", "k2"])
    memory.finish_iteration(sid, 1, ["k3"])
    state = memory.search_state(sid)
    assert (state.iteration, state.beam) == (1, ["k3"])


def test_finish_iteration_again_replaces_beam(memory: Memory) -> None:
    sid = start(memory)
    memory.finish_iteration(sid, 0, ["k1"])
    memory.finish_iteration(sid, 0, ["k2"])
    assert memory.search_state(sid).beam == ["k2"]


def test_unknown_search_state(memory: Memory) -> None:
    with pytest.raises(KeyError):
        memory.search_state(42)


def test_finish_search(memory: Memory) -> None:
    sid = start(memory)
    memory.finish_search(sid, "done", "k9")
    info = memory.get_search(sid)
    assert info is not None
    assert (info.status, info.best_hash) == ("done", "k9")
    assert info.finished


def test_finish_unknown_search(memory: Memory) -> None:
    with pytest.raises(KeyError):
        memory.finish_search(42, "done", None)


def test_list_searches_newest_first(memory: Memory) -> None:
    ids = [start(memory), start(memory, "softmax"), start(memory, hardware="trn2")]
    assert [s.id for s in memory.list_searches()] == ids[::-1]


def test_list_searches_filters(memory: Memory) -> None:
    start(memory)
    softmax = start(memory, "softmax")
    trn2 = start(memory, hardware="trn2")
    assert [s.id for s in memory.list_searches(task="softmax")] == [softmax]
    assert [s.id for s in memory.list_searches(hardware="trn2")] == [trn2]


def test_latest_search(memory: Memory) -> None:
    start(memory)
    latest = start(memory)
    start(memory, "softmax")
    start(memory, hardware="trn2")
    info = memory.latest_search("silu", "trn1")
    assert info is not None and info.id == latest


def test_latest_search_none(memory: Memory) -> None:
    assert memory.latest_search("silu", "trn1") is None


def test_state_survives_reopen(db_path: Path) -> None:
    with Memory(db_path) as memory:
        sid = start(memory)
        memory.record_candidate(sid, 0, "k1", "base", "p", "llm", {"latency_ms": 1.0}, "correct")
        memory.finish_iteration(sid, 0, ["k1"])
    with Memory(db_path) as memory:
        state = memory.search_state(sid)
        assert (state.iteration, state.beam, len(state.candidates)) == (0, ["k1"], 1)
