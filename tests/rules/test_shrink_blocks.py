"""shrink_blocks: block tensors whose blocks live within one iteration become tiles declared in the
loop (compiler style and tutorial style), and those shared between iterations or loops stay."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_styles import SHAPES, source
from rule_eval import assert_same, profile

from accelopt_core.agents.rules.analysis import model_of
from accelopt_core.agents.rules.base import RuleError
from accelopt_core.agents.rules.shrink_blocks import ShrinkBlocks

RULE = ShrinkBlocks()


def _arrays(shapes) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def _declared(text: str) -> dict[str, tuple]:
    return {name: t.shape for name, t in model_of(text).tensors.items() if t.buffer != "hbm"}


def test_compiler_style_intermediates_become_tiles_of_their_iteration(tmp_path):
    text = source("compiler_swish")
    plans = RULE.plan(text, profile(text, SHAPES["compiler_swish"], tmp_path))
    every = plans[0]
    assert every.params["tensors"] == ["v4", "v5", "v6", "v7", "v8"]
    new = RULE.apply(text, every)
    shapes = _declared(new)
    assert shapes["v6"] == (128, 512) and shapes["v4"] == (128, 1024) and shapes["v3"] == (128, 1)
    assert "        v4 = nl.ndarray((nl.par_dim(128), 1024)" in new  # first thing in the `for i0` body
    assert "v8[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.reciprocal(" in new
    assert_same(text, new, _arrays(SHAPES["compiler_swish"]), tmp_path)
    before, after = (profile(t, SHAPES["compiler_swish"], tmp_path) for t in (text, new))
    assert after.profile["instruction_count"] == before.profile["instruction_count"]  # the same work


def test_a_tutorial_buffer_declared_up_front_shrinks_to_the_row_tile(tmp_path):
    text = source("tutorial_buffered")
    (plan,) = RULE.plan(text, None)
    new = RULE.apply(text, plan)
    assert "buf = nl.ndarray((nl.par_dim(128), cols), dtype=x.dtype, buffer=nl.sbuf)" in new
    assert "buf[...] = nl.load(" in new and "nl.exp(buf[...])" in new
    assert "# one buffer for every row tile, declared up front" in new
    assert_same(text, new, _arrays([(256, 512)]), tmp_path)


def test_blocks_shared_between_loops_or_iterations_stay():
    text = source("compiler_two_loops")
    assert RULE.plan(text, None) == []  # v3 flows from one loop to the next, v4 is one block for all
    with pytest.raises(RuleError):
        RULE.apply(text, RULE.plan(source("compiler_swish"), None)[0])
