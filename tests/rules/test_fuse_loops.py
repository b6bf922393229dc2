"""fuse_loops: two adjacent loops over the same range become one when no iteration of one needs a
result of another iteration; a second loop that reads the first one's buffer elsewhere stays apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kernel_styles import SHAPES, source
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
    # the buffer's writer and its shifted reader (lines 12, 14), and `last`'s writer and the reader of
    # its last value (lines 17, 19), stay apart; the reader of the buffer and the independent loop after
    # it (lines 14, 17) may fuse once `last = ...` moves in front
    for prof in (None, profile(SHIFTED, [(512, 512)], tmp_path)):
        assert [p.line for p in rule.plan(SHIFTED, prof)] == [14]


def test_apply_refuses_a_plan_for_another_kernel() -> None:
    rule = FuseLoops()
    with pytest.raises(RuleError):
        rule.apply(SHIFTED, rule.plan(TWO_LOOPS, None)[0])


def _loops(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("for "))


def test_two_compiler_style_nests_over_the_same_blocks_fuse_down_to_the_block(tmp_path: Path) -> None:
    """The first nest writes v3[i1, i0] (row block i0, column half i1), the second reads v3[i3, i2]: the
    outer loops fuse (row block), then the inner ones (column half), and v3 lives one block at a time."""
    rule = FuseLoops()
    text = source("compiler_two_nests")
    shapes = SHAPES["compiler_two_nests"]
    before = profile(text, shapes, tmp_path)
    (plan,) = rule.plan(text, before)
    assert plan.params == {"var": "i0", "iter": "nl.affine_range(2)", "var2": "i2", "nested": 1}
    assert "`v3` then live one iteration" in plan.description
    after = rule.apply(text, plan)
    assert _loops(after) == 2 and "v3[i3, i2" not in after and "v3[i1, i0" in after
    rng = np.random.default_rng(1)
    assert_same(text, after, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)
    fused = profile(after, shapes, tmp_path)
    peak = "sbuf_peak_live_bytes_per_partition"
    assert fused.profile[peak] < before.profile[peak]  # one block of v3 alive, not four


def test_a_tutorial_buffer_filled_by_one_loop_and_read_by_the_next_fuses(tmp_path: Path) -> None:
    text = source("tutorial_buffered").replace(
        "        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.exp(buf[r]))\n",
        "    for j in nl.affine_range(rows // 128):\n"
        "        nl.store(out[j * 128:(j + 1) * 128, :], value=nl.exp(buf[j]))\n")
    rule = FuseLoops()
    (plan,) = rule.plan(text, None)
    after = rule.apply(text, plan)
    assert _loops(after) == 1 and "value=nl.exp(buf[r])" in after
    rng = np.random.default_rng(2)
    assert_same(text, after, [rng.standard_normal((256, 512), dtype=np.float32)], tmp_path)
    shifted = text.replace("nl.exp(buf[j])", "nl.exp(buf[rows // 128 - 1 - j])")
    assert rule.plan(shifted, None) == []  # the reader walks the blocks the other way


def test_a_loop_that_recomputes_an_earlier_one_goes_and_its_readers_read_the_first(tmp_path: Path) -> None:
    """Compiler output loads and exponentiates x twice (two nests needed it): the second loop goes, the
    product reads the first copy, and a loop of other work in between does not stop it."""
    rule = FuseLoops()
    text = source("compiler_twice")
    shapes = [(256, 512), (256, 512)]
    before = profile(text, shapes, tmp_path)
    (drop,) = [p for p in rule.plan(text, before) if "drop" in p.params]
    assert drop.params == {"drop": "i2", "keep": "i0", "iter": "nl.affine_range(2)"}
    after = rule.apply(text, drop)
    assert "for i2 in" not in after and "v6 = nl.ndarray" not in after and "v7 = nl.ndarray" not in after
    assert "nl.multiply(v5[i3, nl.arange(128)[:, None], nl.arange(512)[None, :]], v5[i3," in after
    rng = np.random.default_rng(9)
    assert_same(text, after, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)
    dropped = profile(after, shapes, tmp_path)
    assert dropped.profile["instruction_count"] == before.profile["instruction_count"] - 4
    # the 2025 compiler already loads x once (the model keeps a repeated load's data on chip when it fits),
    # the exponentials it computes as written: what goes is the second pass of the Scalar engine
    assert dropped.profile["hbm_read_bytes"] == before.profile["hbm_read_bytes"]
    assert dropped.latency_ms is not None and before.latency_ms is not None
    assert dropped.profile["engine_busy_time"]["scalar"] < before.profile["engine_busy_time"]["scalar"]
    assert dropped.latency_ms <= before.latency_ms  # this small kernel's time is its DMA's
    changed = text.replace("nl.load(v1[128 * i2 +", "nl.load(v2[128 * i2 +")  # not the same data any more
    assert [p for p in rule.plan(changed, None) if "drop" in p.params] == []


@pytest.mark.parametrize("loop", ["nl.static_range", "range"])
def test_a_recomputing_loop_goes_in_every_loop_form(tmp_path: Path, loop: str) -> None:
    """The same duplicate written with static_range or Python range loops."""
    text = source("compiler_twice").replace("nl.affine_range(2)", f"{loop}(2)")
    (drop,) = [p for p in FuseLoops().plan(text, None) if "drop" in p.params]
    assert drop.params == {"drop": "i2", "keep": "i0", "iter": f"{loop}(2)"}
    after = FuseLoops().apply(text, drop)
    assert "for i2 in" not in after
    shapes = [(256, 512), (256, 512)]
    rng = np.random.default_rng(9)
    assert_same(text, after, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)


def test_a_python_loop_whose_iterations_read_each_other_s_blocks_is_not_dropped() -> None:
    """Every iteration reads the block iteration 0 wrote: the analysis finds a value handed between
    iterations of a Python loop (an affine_range promises there is none) and the rule declines."""
    text = source("compiler_twice")
    for i, block in (("i0", "v4"), ("i2", "v6")):
        text = text.replace(f"data={block}[{i}, nl.arange(128)", f"data={block}[0, nl.arange(128)")
    assert [p for p in FuseLoops().plan(text, None) if "drop" in p.params]
    python = text.replace("nl.affine_range(2)", "range(2)")
    assert [p for p in FuseLoops().plan(python, None) if "drop" in p.params] == []
