"""fuse_loops: two adjacent loops over the same range become one when no iteration of one needs a
result of another iteration; a second loop that reads the first one's buffer elsewhere stays apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rule_eval import assert_same, profile

from accelopt_core.agents.rules.base import RuleError
from accelopt_core.agents.rules.fuse_loops import FuseLoops

# The gate and up projections of SwiGLU, accumulated over K in two loops, the second written
# with its own loop variable.
TWO_LOOPS = '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x_t, w_gate, w_up):
    k_size, m_size = x_t.shape
    out = nl.ndarray((128, 512), dtype=x_t.dtype, buffer=nl.shared_hbm)
    gate = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    up = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(k_size // 128):
        x_tile = nl.load(x_t[k * 128:(k + 1) * 128, 0:128])
        wg_tile = nl.load(w_gate[k * 128:(k + 1) * 128, 0:512])
        gate += nisa.nc_matmul(x_tile, wg_tile)
    for j in nl.affine_range(k_size // 128):  # the up projection
        x_tile = nl.load(x_t[j * 128:(j + 1) * 128, 0:128])
        wu_tile = nl.load(w_up[j * 128:(j + 1) * 128, 0:512])
        up += nisa.nc_matmul(x_tile, wu_tile)
    nl.store(out, value=nl.multiply(nl.copy(gate), up))
    return out
'''

# The second loop reads the first one's buffer one tile further on, and the third reads the whole
# buffer through a reduction: fusing either would read tiles not written yet.
SHIFTED = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((rows // 128 + 1, nl.par_dim(128), cols), dtype=nl.float32, buffer=nl.sbuf)
    buf[rows // 128] = nl.zeros((128, cols), dtype=nl.float32)
    for i in nl.affine_range(rows // 128):
        buf[i] = nl.exp(nl.load(x[i * 128:(i + 1) * 128, :]))
    for i in nl.affine_range(rows // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(buf[i + 1], buf[i]))
    last = nl.zeros((128, cols), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(rows // 128):
        last = nl.load(x[i * 128:(i + 1) * 128, :])
    for i in nl.affine_range(rows // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], value=last)
    return out
'''


def test_fuses_the_gate_and_up_loops(tmp_path: Path) -> None:
    rule = FuseLoops()
    shapes = [(512, 128), (512, 512), (512, 512)]
    before = profile(TWO_LOOPS, shapes, tmp_path)
    plans = rule.plan(TWO_LOOPS, before)
    assert len(plans) == 1 and plans[0].line == 13
    assert plans[0].params == {"var": "k", "iter": "nl.affine_range(k_size//128)", "var2": "j"}
    after = rule.apply(TWO_LOOPS, plans[0])
    assert after.count("for ") == 1
    assert "        # the up projection\n        x_tile = nl.load(x_t[k * 128:(k + 1) * 128, 0:128])\n" in after
    assert "wu_tile = nl.load(w_up[k * 128:(k + 1) * 128, 0:512])" in after
    rng = np.random.default_rng(0)
    assert_same(TWO_LOOPS, after, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)
    # The performance model orders instructions by data and per-engine program order only, so
    # interleaving two independent loops does not change the modelled time; it must not grow.
    assert before.latency_ms is not None
    assert profile(after, shapes, tmp_path).latency_ms <= before.latency_ms * (1 + 1e-9)


def test_does_not_fuse_across_a_dependency(tmp_path: Path) -> None:
    rule = FuseLoops()
    assert rule.plan(SHIFTED, None) == []
    assert rule.plan(SHIFTED, profile(SHIFTED, [(512, 512)], tmp_path)) == []


def test_apply_refuses_a_plan_for_another_kernel() -> None:
    rule = FuseLoops()
    with pytest.raises(RuleError):
        rule.apply(SHIFTED, rule.plan(TWO_LOOPS, None)[0])
