"""sequential_to_affine: a sequential row loop without a loop-carried dependency becomes affine; a
scan whose carry flows from one iteration to the next stays sequential."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rule_eval import assert_same, profile

from accelopt_core.agents.rules.base import RuleError
from accelopt_core.agents.rules.seq_to_affine import SequentialToAffine

# Independent row tiles, written with sequential_range (and a Python range, traced the same way).
ROWS = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    total = nl.zeros((128, cols), dtype=nl.float32, buffer=nl.sbuf)
    for r in nl.sequential_range(rows // 128):  # one row tile per step
        tile = nl.load(x[r * 128:(r + 1) * 128, :])
        total += tile
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.exp(tile))
    for r in range(rows // 128):
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.add(nl.load(out[r * 128:(r + 1) * 128, :]), total))
    return out
'''

# A first-order recurrence: each tile's scan starts from the previous tile's last column.
SCAN = '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    channels, steps = a.shape
    h = nl.ndarray((channels, steps), dtype=a.dtype, buffer=nl.shared_hbm)
    carry = nl.zeros((channels, 1), dtype=nl.float32, buffer=nl.sbuf)
    for t in nl.sequential_range(steps // 512):
        a_tile = nl.load(a[:, t * 512:(t + 1) * 512])
        b_tile = nl.load(b[:, t * 512:(t + 1) * 512])
        h_tile = nisa.tensor_tensor_scan(a_tile, b_tile, initial=carry, op0=nl.multiply, op1=nl.add)
        nl.store(h[:, t * 512:(t + 1) * 512], value=h_tile)
        carry[:, 0:1] = h_tile[:, 511:512]
    state = nl.zeros((channels, 512), dtype=nl.float32, buffer=nl.sbuf)
    for t in range(4):
        state = nl.add(state, nl.load(a[:, 0:512]))
    nl.store(h[:, 0:512], value=state)
    return h
'''


def test_makes_independent_row_loops_affine(tmp_path: Path) -> None:
    rule = SequentialToAffine()
    shapes = [(1024, 512)]
    before = profile(ROWS, shapes, tmp_path)
    plans = rule.plan(ROWS, before)
    assert [p.line for p in sorted(plans, key=lambda p: p.line)] == [11, 15]
    first = next(p for p in plans if p.line == 11)
    assert first.rule == "sequential_to_affine" and "correctness check confirms" in first.description
    after = rule.apply(ROWS, first)
    assert "    for r in nl.affine_range(rows // 128):  # one row tile per step\n" in after
    assert "    for r in range(rows // 128):\n" in after
    both = rule.apply(after, next(p for p in rule.plan(after, None) if p.line == 15))
    assert both.count("nl.affine_range(rows // 128)") == 2
    rng = np.random.default_rng(0)
    assert_same(ROWS, both, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)
    # The performance model orders every loop kind by its data dependencies only (perfmodel/
    # scheduler.py), so the modelled time cannot drop here; it must not grow either.
    assert before.latency_ms is not None
    assert profile(both, shapes, tmp_path).latency_ms <= before.latency_ms * (1 + 1e-9)


def test_keeps_loops_with_a_carried_value_sequential(tmp_path: Path) -> None:
    rule = SequentialToAffine()
    assert rule.plan(SCAN, None) == []
    assert rule.plan(SCAN, profile(SCAN, [(128, 2048), (128, 2048)], tmp_path)) == []


def test_apply_refuses_a_plan_for_another_kernel() -> None:
    rule = SequentialToAffine()
    with pytest.raises(RuleError):
        rule.apply(SCAN, rule.plan(ROWS, None)[0])
