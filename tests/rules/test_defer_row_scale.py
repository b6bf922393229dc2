"""defer_row_scale: attention's 1/sum moves from every probability to the output rows, in the compiler's
style and the tutorials', and stays where the rows do not stay rows or the factor changes."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_styles import SHAPES, source
from rule_eval import assert_same, profile

from accelopt_core.agents.rules.defer_scale import DeferRowScale
from accelopt_core.agents.rules.registry import default_rules

RULE = DeferRowScale()


def _arrays(shapes) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def test_compiler_style_scales_the_output_rows_and_drops_the_scaled_tile(tmp_path):
    text = source("compiler_attention")
    shapes = SHAPES["compiler_attention"]
    before = profile(text, shapes, tmp_path)
    (plan,) = RULE.plan(text, before)
    assert plan.params == {"product": "v16", "scale_line": 40} and plan.priority > 0
    new = RULE.apply(text, plan)
    assert "v16" not in new  # the scaled tile, its declaration and its statement are gone
    assert "nisa.nc_matmul(v11[i1, nl.arange(128)[:, None], 128 * i2 + nl.arange(128)[None, :]], v6[" in new
    assert ("v20[i1, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.tensor_scalar(data=v19[i1, "
            "nl.arange(128)[:, None], nl.arange(128)[None, :]], op0=nl.multiply, operand0=v15[i1, nl.arange(128)"
            "[:, None], 0], dtype=np.float32, mask=None)") in new
    assert_same(text, new, _arrays(shapes), tmp_path)
    after = profile(new, shapes, tmp_path)
    assert after.latency_ms < before.latency_ms


def test_tutorial_style_transposes_the_exponentials(tmp_path):
    text = source("tutorial_attention")
    (plan,) = RULE.plan(text, None)
    new = RULE.apply(text, plan)
    assert "probs" not in new
    assert "p_t = nisa.nc_transpose(e[:, j * 128:(j + 1) * 128])" in new
    assert "result = nisa.tensor_scalar(data=acc, op0=nl.multiply, operand0=inv, dtype=out.dtype)" in new
    assert_same(text, new, _arrays(SHAPES["tutorial_attention"]), tmp_path)


def test_a_divide_by_the_row_sum_divides_the_rows(tmp_path):
    text = source("tutorial_attention").replace("        inv = nl.reciprocal(total)\n", "").replace(
        "probs = nl.multiply(e, inv)", "probs = nl.divide(e, total)")
    (plan,) = RULE.plan(text, None)
    new = RULE.apply(text, plan)
    assert "result = nisa.tensor_scalar(data=acc, op0=nl.divide, operand0=total, dtype=out.dtype)" in new
    assert_same(text, new, _arrays(SHAPES["tutorial_attention"]), tmp_path)


def test_the_isa_is_imported_where_the_kernel_did_not(tmp_path):
    text = source("tutorial_attention").replace("import neuronxcc.nki.isa as nisa\n", "").replace(
        "nisa.nc_transpose(", "nl.transpose(").replace("acc += nisa.nc_matmul(p_t_sb, values)",
                                                      "acc += nl.matmul(p_t_sb, values, transpose_x=True)")
    (plan,) = RULE.plan(text, None)
    new = RULE.apply(text, plan)
    assert "import neuronxcc.nki.isa as nisa\n" in new and "nisa.tensor_scalar(data=acc" in new


@pytest.mark.parametrize("change", [
    # the scaled tile is also stored: it must exist as it was
    ("        acc = nl.zeros(", "        nl.store(out[r * 128:(r + 1) * 128, :], value=probs[:, 0:128])\n"
      "        acc = nl.zeros("),
    # contracted over the rows (no transpose): the scale is inside the sum
    ("p_t_sb = nl.copy(p_t)", "p_t_sb = nl.copy(probs[:, j * 128:(j + 1) * 128])"),
    # a factor that changes before the result is copied out
    ("        result = nl.copy(", "        inv = nl.multiply(inv, 2.0)\n        result = nl.copy("),
    # a scale by a constant, not a column
    ("probs = nl.multiply(e, inv)", "probs = nl.multiply(e, 0.5)"),
])
def test_it_stays_where_the_rows_do_not_stay_rows(change):
    text = source("tutorial_attention").replace(*change)
    assert text != source("tutorial_attention")
    assert RULE.plan(text, None) == []


def test_compiler_style_a_factor_indexed_by_the_transpose_loop_stays():
    text = source("compiler_attention").replace("operand0=v15[i1, nl.arange(128)[:, None], 0]",
                                                "operand0=v15[i1, nl.arange(128)[:, None], 0 * i1]")
    assert RULE.plan(text, None)  # the same column, spelled otherwise
    moved = source("compiler_attention").replace(
        "        for i2 in nl.affine_range(4):\n",
        "        for i2 in nl.affine_range(4):\n"
        "            v15[i1, nl.arange(128)[:, None], 0] = nisa.reciprocal(data=v14[i1, nl.arange(128)[:, None], 0],"
        " mask=None, dtype=np.float32)\n")
    assert RULE.plan(moved, None) == []


def test_the_search_knows_the_rule():
    assert any(isinstance(rule, DeferRowScale) for rule in default_rules())
