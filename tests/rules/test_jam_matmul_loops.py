"""jam_matmul_loops: the loop over output tiles goes inside the matmul reduction (compiler style, and
tutorial style where the accumulator is a tile per output tile), so consecutive matmuls share their
stationary tile; it stays where that would change the stationary tile or overfill PSUM."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from kernel_styles import SHAPES, source
from rule_eval import assert_same, profile, trace

from accelopt_core.agents.rules.unroll_jam import JamMatmulLoops

RULE = JamMatmulLoops()


def _stationary_switches(text: str, shapes, tmp_path) -> tuple[int, int]:
    """(matmuls that load a different stationary tile than the one before, matmuls): transposes excluded."""
    matmuls = [i for i in trace(text, shapes, tmp_path).instructions
               if i.op == "nc_matmul" and not (i.attrs or {}).get("is_transpose")]
    keys = [(m.reads[0].tensor, m.reads[0].region) for m in matmuls]
    return sum(1 for a, b in itertools.pairwise(keys) if a != b) + 1, len(matmuls)


def test_compiler_style_output_tiles_jam_into_the_reduction(tmp_path):
    text, shapes = source("compiler_matmul"), SHAPES["compiler_matmul"]
    (plan,) = RULE.plan(text, profile(text, shapes, tmp_path))
    assert plan.params == {"var": "i3", "iter": "nl.affine_range(2)", "accumulator": "v10", "trips": 2}
    new = RULE.apply(text, plan)
    assert new.index("for i4 in") < new.index("for i3 in")  # the output loop is inside the reduction
    rng = np.random.default_rng(5)
    assert_same(text, new, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)
    before, after = _stationary_switches(text, shapes, tmp_path), _stationary_switches(new, shapes, tmp_path)
    assert before[1] == after[1] == 8 and after[0] == before[0] // 2  # each stationary tile serves 2 in a row


def test_tutorial_style_accumulators_become_one_block_per_output_tile(tmp_path):
    text, shapes = source("tutorial_matmul"), SHAPES["tutorial_matmul"]
    assert RULE.plan(text, None) == []  # how many output tiles there are is known from a run only
    (plan,) = RULE.plan(text, profile(text, shapes, tmp_path))
    new = RULE.apply(text, plan)
    assert "acc = nl.zeros((n_size // 512, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)" in new
    assert "acc[n] += nl.matmul(lhs, w, transpose_x=True)" in new and "nl.copy(acc[n], dtype=out.dtype)" in new
    assert new.index("lhs = nl.multiply(") < new.index("for n in nl.affine_range(n_size // 512):\n")
    rng = np.random.default_rng(6)
    assert_same(text, new, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)
    before, after = _stationary_switches(text, shapes, tmp_path), _stationary_switches(new, shapes, tmp_path)
    assert after[0] < before[0] and after[1] == before[1]


def test_no_jam_when_the_stationary_tile_follows_the_output_loop_or_psum_would_overflow(tmp_path):
    swapped = source("compiler_matmul").replace(
        "nisa.nc_matmul(v9[i1, i4, nl.arange(128)[:, None], nl.arange(128)[None, :]], v6[i4, nl.arange(128)[:, "
        "None], 512 * i3 + nl.arange(512)[None, :]]",
        "nisa.nc_matmul(v9[i1, i3, nl.arange(128)[:, None], nl.arange(128)[None, :]], v6[i4, nl.arange(128)[:, "
        "None], 512 * i3 + nl.arange(512)[None, :]]")
    assert swapped != source("compiler_matmul") and RULE.plan(swapped, None) == []
    text = source("tutorial_matmul")
    wide = [(256, 256), (256, 4096)]  # 8 output tiles: 8 accumulators would take every PSUM bank
    assert RULE.plan(text, profile(text, wide, tmp_path)) == []


def test_the_transpose_nl_matmul_makes_of_an_unchanged_operand_is_made_once_per_step(tmp_path):
    text, shapes = source("tutorial_rows_matmul"), [(256, 256), (256, 1024)]
    (plan,) = RULE.plan(text, None)  # two output tiles, written as a number
    new = RULE.apply(text, plan)
    assert "stationary_t = nl.copy(nl.transpose(rows[:, k * 128:(k + 1) * 128]))" in new
    assert "acc[n] += nl.matmul(stationary_t, w, transpose_x=True)" in new
    rng = np.random.default_rng(8)
    assert_same(text, new, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)

    def transposes(t: str) -> int:
        return sum(1 for i in trace(t, shapes, tmp_path).instructions if i.op == "nc_transpose"
                   or (i.op == "nc_matmul" and (i.attrs or {}).get("is_transpose")))

    assert transposes(new) == transposes(text) // 2  # once per (m, k) instead of per (m, n, k)


@pytest.mark.parametrize("loop", ["nl.static_range", "range"])
def test_output_loops_in_static_and_python_range_form_jam_too(tmp_path, loop):
    """The tutorial matmul's output loop written in the other forms public kernels use."""
    text = source("tutorial_matmul").replace("nl.affine_range(n_size // 512)", f"{loop}(n_size // 512)")
    shapes = SHAPES["tutorial_matmul"]
    (plan,) = RULE.plan(text, profile(text, shapes, tmp_path))
    new = RULE.apply(text, plan)
    assert "acc[n] += nl.matmul(lhs, w, transpose_x=True)" in new
    rng = np.random.default_rng(6)
    assert_same(text, new, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)


def test_a_python_output_loop_storing_every_tile_to_one_place_does_not_jam(tmp_path):
    """The last tile's store wins: the order of a Python loop's iterations matters (an affine_range
    promises it does not, and jams)."""
    one_place = source("tutorial_matmul").replace("n * 512:(n + 1) * 512], value=result)", "0:512], value=result)")
    assert len(RULE.plan(one_place, profile(one_place, SHAPES["tutorial_matmul"], tmp_path))) == 1
    text = one_place.replace("nl.affine_range(n_size // 512)", "range(n_size // 512)")
    assert RULE.plan(text, profile(text, SHAPES["tutorial_matmul"], tmp_path)) == []
