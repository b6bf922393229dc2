"""fill_partitions: a loop of element-wise work on 64-row tiles stacks two iterations on the 128
partitions (compiler style with block tensors, the tutorials' style with tiles bound by `nl.load`),
and loops that reduce, multiply matrices, share a tile or do not divide stay as written."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_styles import SHAPES, source
from rule_eval import assert_same, profile

from accelopt_core.agents.rules.analysis import model_of
from accelopt_core.agents.rules.fill_partitions import FillPartitions, _Fold, _Reader

RULE = FillPartitions()


def _arrays(shapes) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def _stacks_and_runs_faster(name: str, tmp_path, checked=None) -> str:
    text = source(name)
    before = profile(text, SHAPES[name], tmp_path, checked=checked)
    (plan,) = RULE.plan(text, before)
    assert plan.params["factor"] == 2
    new = RULE.apply(text, plan)
    assert_same(text, new, _arrays(SHAPES[name]), tmp_path)
    after = profile(new, SHAPES[name], tmp_path)
    assert after.latency_ms < before.latency_ms
    assert after.profile["vector_engine_instruction_count"] * 2 == before.profile["vector_engine_instruction_count"]
    return new


def test_compiler_style_block_tensors_grow_to_128_partitions(tmp_path):
    new = _stacks_and_runs_faster("compiler_rotary", tmp_path)
    shapes = {name: t.shape for name, t in model_of(new).tensors.items() if t.buffer == "sbuf"}
    assert shapes["v5"] == (2, 128, 512) and shapes["v10"] == (2, 2, 128, 256)
    assert "for i0 in nl.affine_range(2):" in new
    assert "v5[i0, 64 + nl.arange(64)[:, None], nl.arange(512)[None, :]] = nl.load(v1[0, nl.arange(64)[:, None], " \
           "512 * (2 * i0 + 1) + nl.arange(512)[None, :]]" in new
    assert "v10[i0, i1, nl.arange(128)[:, None], nl.arange(256)[None, :]] = nl.multiply(" in new


def test_tutorial_tiles_bound_by_loads_become_stacked_tiles(tmp_path):
    new = _stacks_and_runs_faster("tutorial_rotary", tmp_path, checked=[(64, 1024)] * 4)
    assert "for c in nl.affine_range((x0.shape[1] // 512) // 2):" in new
    assert "a = nl.ndarray((128, 512), dtype=x0.dtype, buffer=nl.sbuf)" in new
    assert "a[64:128, :] = nl.load(x0[0:64, (2 * c + 1) * 512:((2 * c + 1) + 1) * 512])" in new
    assert "nl.store(out1[0:64, (2 * c + 1) * 512:((2 * c + 1) + 1) * 512], value=second[64:128, :])" in new


def test_a_trip_count_that_is_odd_at_a_checked_size_stays(tmp_path):
    text = source("tutorial_rotary")
    assert RULE.plan(text, profile(text, SHAPES["tutorial_rotary"], tmp_path, checked=[(64, 1536)] * 4)) == []
    assert RULE.plan(text, None) == []  # without the input sizes the count is unknown


def test_full_tiles_matmuls_and_shared_tiles_stay():
    assert RULE.plan(source("compiler_swish"), None) == []  # 128 partitions already
    assert RULE.plan(source("compiler_matmul"), None) == []
    shared = source("compiler_rotary").replace(
        "value=v6[i0, nl.arange(64)[:, None], nl.arange(512)[None, :]]",
        "value=v6[0, nl.arange(64)[:, None], nl.arange(512)[None, :]]")
    assert RULE.plan(shared, None) == []  # every iteration stores block 0: not its own block
    crossing = source("compiler_rotary").replace("256 * i1 + nl.arange(256)", "256 * i0 + nl.arange(256)", 1)
    assert RULE.plan(crossing, None) == []  # the loop variable reaches a free-dimension index


@pytest.mark.parametrize("loop", ["nl.static_range", "range"])
def test_static_and_python_range_loops_are_stacked_too(tmp_path, loop):
    """The rotary tutorial's loop written in the other forms public kernels use."""
    text = source("tutorial_rotary").replace("nl.affine_range(x0.shape[1] // 512)", f"{loop}(x0.shape[1] // 512)")
    shapes = SHAPES["tutorial_rotary"]
    (plan,) = RULE.plan(text, profile(text, shapes, tmp_path, checked=[(64, 1024)] * 4))
    new = RULE.apply(text, plan)
    assert f"for c in {loop}((x0.shape[1] // 512) // 2):" in new
    assert_same(text, new, _arrays(shapes), tmp_path)


def test_a_python_loop_handing_a_value_to_the_next_iteration_is_not_stacked():
    text = source("tutorial_rotary").replace("nl.affine_range(x0.shape[1] // 512)", "range(x0.shape[1] // 512)")
    carried = text.replace("        nl.store(out1[0:64, c * 512:(c + 1) * 512], value=second)\n",
                           "        nl.store(out1[0:64, 0:512], value=second)\n")  # the last iteration's wins
    model = model_of(carried)
    assert "`out1` is written at a place that does not follow the loop" in _Reader(model, model.loops[0], [2]).fold()
    assert isinstance(_Reader(model_of(text), model_of(text).loops[0], [2]).fold(), _Fold)
