"""interleave_iterations: an innermost loop whose body is a chain of dependent instructions is unrolled
by two and the copies interleaved (compiler style: fully unrolled block indices; tutorial style: bound
names renamed per copy); the same instructions, the waits between them hidden."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_styles import SHAPES, source
from rule_eval import assert_same, profile

from accelopt_core.agents.rules.interleave import InterleaveIterations

RULE = InterleaveIterations()


def _arrays(shapes) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def test_a_compiler_style_chain_of_two_iterations_is_unrolled_and_interleaved(tmp_path):
    text, shapes = source("compiler_swish"), SHAPES["compiler_swish"]
    before = profile(text, shapes, tmp_path)
    (plan,) = RULE.plan(text, before)
    assert plan.params["var"] == "i1" and plan.params["trips"] == 2
    new = RULE.apply(text, plan)
    assert "for i1 in" not in new
    first = new.index("v7[i0, 0, nl.arange(128)")
    assert first < new.index("v7[i0, 1, nl.arange(128)") < new.index("v8[i0, 0, nl.arange(128)")  # alternating
    assert_same(text, new, _arrays(shapes), tmp_path)
    after = profile(new, shapes, tmp_path)
    assert after.profile["instruction_count"] == before.profile["instruction_count"]
    assert after.latency_ms < before.latency_ms  # the same work, less waiting


def test_tutorial_style_temporaries_get_a_name_per_copy(tmp_path):
    text, shapes = source("tutorial_chain"), [(512, 512)]
    assert RULE.plan(text, None) == []  # the trip count is known from a run only
    (plan,) = RULE.plan(text, profile(text, shapes, tmp_path))
    new = RULE.apply(text, plan)
    assert "for r in nl.affine_range((rows // 128) // 2):" in new
    assert "a_0 = nl.multiply(t_0, 2.0)" in new and "a_1 = nl.multiply(t_1, 2.0)" in new
    assert new.index("a_1 = ") < new.index("b_0 = ")
    assert "x[(2 * r + 1) * 128:((2 * r + 1) + 1) * 128, :]" in new and "x[(2 * r) * 128:" in new
    assert_same(text, new, _arrays(shapes), tmp_path)


def test_accumulating_loops_and_values_used_after_the_loop_are_left_alone(tmp_path):
    matmul = source("tutorial_matmul")
    assert RULE.plan(matmul, profile(matmul, SHAPES["tutorial_matmul"], tmp_path)) == []
    leaked = source("tutorial_chain").replace("    return out", "    nl.store(out[0:128, :], value=c)\n    return out")
    assert RULE.plan(leaked, profile(leaked, [(512, 512)], tmp_path)) == []


@pytest.mark.parametrize("loop", ["nl.static_range", "range"])
def test_static_and_python_range_loops_are_interleaved_too(tmp_path, loop):
    """A rule that works on one loop form works on the others public kernels write."""
    text = source("tutorial_chain").replace("nl.affine_range(rows // 128)", f"{loop}(rows // 128)")
    (plan,) = RULE.plan(text, profile(text, [(512, 512)], tmp_path))
    new = RULE.apply(text, plan)
    assert f"for r in {loop}((rows // 128) // 2):" in new and "a_1 = nl.multiply(t_1, 2.0)" in new
    assert_same(text, new, _arrays([(512, 512)]), tmp_path)


def test_a_python_loop_passing_a_value_to_its_next_iteration_is_left_alone(tmp_path):
    chained = "        c = nl.maximum(b, a)\n        c = nl.add(c, prev)\n        prev = c\n"
    start = "    prev = nl.zeros((128, cols), dtype=x.dtype, buffer=nl.sbuf)\n    for r in range"
    text = source("tutorial_chain").replace("nl.affine_range(rows // 128)", "range(rows // 128)").replace(
        "        c = nl.maximum(b, a)\n", chained).replace("    for r in range", start)
    assert RULE.plan(text, profile(text, [(512, 512)], tmp_path)) == []


@pytest.mark.parametrize("loop", ["range", "nl.static_range", "nl.affine_range"])
def test_a_loop_with_a_start_and_a_step_is_interleaved_by_doubling_its_step(tmp_path, loop):
    """Public kernels write `for r in range(0, rows, 128)` and index `x[r:r + 128]`: the second copy is
    `r + 128`, the header steps twice as far."""
    text = source("tutorial_chain").replace("nl.affine_range(rows // 128)", f"{loop}(0, rows, 128)").replace(
        "r * 128:(r + 1) * 128", "r:r + 128")
    (plan,) = RULE.plan(text, profile(text, [(512, 512)], tmp_path))
    new = RULE.apply(text, plan)
    assert f"for r in {loop}(0, rows, 2 * (128)):" in new and "x[(r + 128):(r + 128) + 128, :]" in new
    assert_same(text, new, _arrays([(512, 512)]), tmp_path)


def test_a_loop_of_two_steps_is_unrolled_to_its_two_values(tmp_path):
    text = source("tutorial_chain").replace("nl.affine_range(rows // 128)", "range(64, rows, 128)").replace(
        "r * 128:(r + 1) * 128", "r - 64:r + 64")
    (plan,) = RULE.plan(text, profile(text, [(256, 512)], tmp_path))
    new = RULE.apply(text, plan)
    assert "for r in" not in new and "x[64 - 64:64 + 64, :]" in new and "x[192 - 64:192 + 64, :]" in new
    assert_same(text, new, _arrays([(256, 512)]), tmp_path)


def test_a_loop_with_a_start_and_no_step_gets_a_step_of_two(tmp_path):
    text = source("tutorial_chain").replace("nl.affine_range(rows // 128)", "range(0, rows // 128)")
    (plan,) = RULE.plan(text, profile(text, [(512, 512)], tmp_path))
    new = RULE.apply(text, plan)
    assert "for r in range(0, rows // 128, 2):" in new and "x[(r + 1) * 128:((r + 1) + 1) * 128, :]" in new
    assert_same(text, new, _arrays([(512, 512)]), tmp_path)
