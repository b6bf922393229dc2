"""Experiences: thresholds, the bound per (task family, hardware), pinning, retrieval order, rule stats."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from accelopt_core.memory import Experience, Memory, RuleStats, classify


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Memory]:
    """A memory that keeps 3 positive and 2 negative lessons per group, so the bound is easy to hit."""
    with Memory(tmp_path / "small.db", keep_positive=3, keep_negative=2) as mem:
        yield mem


def add(memory: Memory, speedup: float, fast: str = "", family: str = "silu", hardware: str = "trn1",
        **extra: object) -> Experience | None:
    return memory.add_experience(extra.pop("task", family), family, hardware, "slow", fast or f"fast{speedup}",
                                 speedup, **extra)  # type: ignore[arg-type]


def speedups(experiences: list[Experience]) -> list[float]:
    return [e.speedup for e in experiences]


@pytest.mark.parametrize(("speedup", "expected"), [(1.5, True), (1.041, True), (1.04, None), (1.0, None),
                                                    (1 / 1.15, None), (0.869, False), (0.5, False)])
def test_classify_thresholds(speedup: float, expected: bool | None) -> None:
    assert classify(speedup) is expected


def test_positive_experience_is_kept(memory: Memory) -> None:
    exp = add(memory, 1.3, plan="hoist", summary="hoisting the load out of the loop saved DMA", origin="llm")
    assert exp is not None
    assert (exp.positive, exp.pinned, exp.plan, exp.origin) == (True, False, "hoist", "llm")
    assert exp.id is not None and exp.created


def test_negative_experience_is_kept(memory: Memory) -> None:
    exp = add(memory, 0.5)
    assert exp is not None and exp.positive is False


def test_neutral_experience_is_ignored(memory: Memory) -> None:
    assert add(memory, 1.02) is None
    assert memory.list_experiences() == []


def test_get_experience(memory: Memory) -> None:
    exp = add(memory, 2.0, search_id=None, backend="remote")
    assert exp is not None
    assert memory.get_experience(exp.id) == exp  # type: ignore[arg-type]


def test_get_unknown_experience(memory: Memory) -> None:
    assert memory.get_experience(123) is None


def test_same_pair_is_not_duplicated(memory: Memory) -> None:
    first = add(memory, 1.5, fast="f", summary="first")
    again = add(memory, 1.7, fast="f", summary="second")
    assert again == first
    assert len(memory.list_experiences()) == 1


def test_bound_drops_smallest_positive(small: Memory) -> None:
    for s in (1.5, 1.1, 2.0, 1.3):
        add(small, s)
    assert sorted(speedups(small.list_experiences())) == [1.3, 1.5, 2.0]


def test_bound_drops_mildest_negative(small: Memory) -> None:
    for s in (0.5, 0.8, 0.3):
        add(small, s)
    assert sorted(speedups(small.list_experiences())) == [0.3, 0.5]


def test_bound_ties_drop_oldest(small: Memory) -> None:
    for fast in ("a", "b", "c", "d"):
        add(small, 1.5, fast=fast)
    assert [e.fast_hash for e in small.list_experiences()] == ["b", "c", "d"]


def test_new_experience_below_the_bound_is_not_kept(small: Memory) -> None:
    for s in (1.5, 1.6, 1.7):
        add(small, s)
    assert add(small, 1.1) is None
    assert sorted(speedups(small.list_experiences())) == [1.5, 1.6, 1.7]


def test_positive_and_negative_bounds_are_separate(small: Memory) -> None:
    for s in (1.5, 1.6, 1.7, 0.5, 0.6):
        add(small, s)
    assert len(small.list_experiences()) == 5


def test_bound_is_per_family_and_hardware(small: Memory) -> None:
    for s in (1.5, 1.6, 1.7):
        add(small, s)
        add(small, s, family="softmax")
        add(small, s, hardware="trn2")
    assert len(small.list_experiences()) == 9


def test_default_bound_is_sixteen(memory: Memory) -> None:
    for i in range(20):
        add(memory, 1.1 + i / 10)
        add(memory, 0.8 - i / 100)
    kept = memory.list_experiences()
    assert sum(e.positive for e in kept) == 16
    assert sum(not e.positive for e in kept) == 16


def test_pinned_survives_the_bound(small: Memory) -> None:
    weak = add(small, 1.05)
    assert weak is not None
    assert small.pin(weak.id)  # type: ignore[arg-type]
    for s in (1.5, 1.6, 1.7, 1.8):
        add(small, s)
    assert sorted(speedups(small.list_experiences())) == [1.05, 1.7, 1.8]


def test_pinned_at_insert_may_exceed_the_bound(small: Memory) -> None:
    for s in (1.5, 1.6, 1.7, 1.8):
        add(small, s, pinned=True)
    assert len(small.list_experiences()) == 4


def test_unpinning_reapplies_the_bound(small: Memory) -> None:
    kept = [add(small, s, pinned=True) for s in (1.5, 1.6, 1.7, 1.8)]
    assert kept[0] is not None and kept[0].id is not None
    small.pin(kept[0].id, False)
    assert sorted(speedups(small.list_experiences())) == [1.6, 1.7, 1.8]


def test_pin_flag(memory: Memory) -> None:
    exp = add(memory, 1.5)
    assert exp is not None and exp.id is not None
    memory.pin(exp.id)
    assert memory.get_experience(exp.id).pinned is True  # type: ignore[union-attr]


def test_pin_unknown(memory: Memory) -> None:
    assert memory.pin(77) is False


def test_delete(memory: Memory) -> None:
    exp = add(memory, 1.5)
    assert exp is not None and exp.id is not None
    assert memory.delete(exp.id) is True
    assert memory.get_experience(exp.id) is None


def test_delete_unknown(memory: Memory) -> None:
    assert memory.delete(77) is False


def test_top_orders_positive_by_speedup_then_negative_by_harm(memory: Memory) -> None:
    for s in (1.2, 0.8, 2.0, 0.4, 1.5):
        add(memory, s)
    assert speedups(memory.top_experiences("silu", "trn1")) == [2.0, 1.5, 1.2, 0.4, 0.8]


def test_top_prefers_same_family(memory: Memory) -> None:
    add(memory, 3.0, family="softmax")
    add(memory, 1.2)
    add(memory, 0.5)
    assert [(e.task_family, e.speedup) for e in memory.top_experiences("silu", "trn1")] == [
        ("silu", 1.2), ("silu", 0.5), ("softmax", 3.0)]


def test_top_puts_pinned_first(memory: Memory) -> None:
    add(memory, 2.0)
    pinned = add(memory, 1.1, family="softmax")
    assert pinned is not None and pinned.id is not None
    memory.pin(pinned.id)
    assert speedups(memory.top_experiences("silu", "trn1")) == [1.1, 2.0]


def test_top_only_same_hardware(memory: Memory) -> None:
    add(memory, 2.0, hardware="trn2")
    assert memory.top_experiences("silu", "trn1") == []


def test_top_limit(memory: Memory) -> None:
    for s in (1.1, 1.2, 1.3, 1.4):
        add(memory, s)
    assert speedups(memory.top_experiences("silu", "trn1", limit=2)) == [1.4, 1.3]


def test_top_without_negatives(memory: Memory) -> None:
    add(memory, 1.5)
    add(memory, 0.5)
    assert speedups(memory.top_experiences("silu", "trn1", include_negative=False)) == [1.5]


def test_list_experiences_filters(memory: Memory) -> None:
    add(memory, 1.5, task="silu_small")
    add(memory, 1.5, family="softmax")
    add(memory, 1.5, hardware="trn2")
    assert [e.task for e in memory.list_experiences(task="silu_small")] == ["silu_small"]
    assert len(memory.list_experiences(task="silu")) == 2  # task family matches too
    assert [e.hardware for e in memory.list_experiences(hardware="trn2")] == ["trn2"]


def test_rule_stats(memory: Memory) -> None:
    add(memory, 2.0, origin="rule:hoist")
    add(memory, 1.125, origin="rule:hoist")
    add(memory, 0.5, origin="rule:hoist")
    add(memory, 1.5, origin="rule:fuse")
    add(memory, 3.0, origin="llm")
    stats = memory.rule_stats("silu", "trn1")
    assert set(stats) == {"hoist", "fuse"}
    hoist = stats["hoist"]
    assert (hoist.wins, hoist.losses, hoist.best_speedup) == (2, 1, 2.0)
    assert hoist.mean_speedup == pytest.approx((2.0 * 1.125 * 0.5) ** (1 / 3))
    assert stats["fuse"] == RuleStats("fuse", 1, 0, 1.5, pytest.approx(1.5))


def test_rule_stats_per_family_and_hardware(memory: Memory) -> None:
    add(memory, 2.0, origin="rule:hoist", family="softmax")
    add(memory, 2.0, origin="rule:hoist", hardware="trn2")
    assert memory.rule_stats("silu", "trn1") == {}
