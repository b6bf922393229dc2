"""interchange_loops: two nested affine loops are swapped when a load in the inner one does not
depend on the outer one; the swap itself is an enabler, hoist_invariant then takes the load out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rule_eval import assert_same, profile

from accelopt_core.agents.rules.base import RuleError
from accelopt_core.agents.rules.hoist import HoistInvariant
from accelopt_core.agents.rules.interchange import InterchangeLoops

# Rows outside, columns inside: every row tile reloads the same K tiles of B; B as a whole
# (512 x 8192 floats, 128 KiB per partition) is too big to keep in SBUF.
NEST = '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a_t, b):
    k_size, m_size = a_t.shape
    _, n_size = b.shape
    c = nl.ndarray((m_size, n_size), dtype=a_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // 128):  # row tiles
        for n in nl.affine_range(n_size // 512):  # column tiles
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // 128):
                a_tile = nl.load(a_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                b_tile = nl.load(b[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nisa.nc_matmul(a_tile, b_tile)
            nl.store(c[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=c.dtype))
    return c
'''

# Every load depends on both loops, and the second nest is sequential: nothing to gain or allowed.
NO_SWAP = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // 128):
        for c in nl.affine_range(cols // 512):
            tile = nl.load(x[r * 128:(r + 1) * 128, c * 512:(c + 1) * 512])
            nl.store(out[r * 128:(r + 1) * 128, c * 512:(c + 1) * 512], value=nl.exp(tile))
    for r in nl.sequential_range(rows // 128):
        for c in nl.sequential_range(cols // 512):
            head = nl.load(x[0:128, c * 512:(c + 1) * 512])
            nl.store(out[r * 128:(r + 1) * 128, c * 512:(c + 1) * 512], value=head)
    return out
'''

SHAPES = [(512, 256), (512, 16384)]  # B: 256 KiB per partition, more than the compiler can keep on chip


def test_swaps_rows_and_columns_so_the_weights_can_be_hoisted(tmp_path: Path) -> None:
    rule = InterchangeLoops()
    before = profile(NEST, SHAPES, tmp_path)
    plans = rule.plan(NEST, before)
    assert len(plans) == 1
    plan = plans[0]
    assert plan.rule == "interchange_loops" and plan.line == 12 and plan.priority > 0
    assert plan.params == {"outer_var": "m", "outer_iter": "nl.affine_range(m_size//128)",
                           "inner_var": "n", "inner_iter": "nl.affine_range(n_size//512)"}
    swapped = rule.apply(NEST, plan)
    assert "    for n in nl.affine_range(n_size // 512):  # column tiles\n" \
           "        for m in nl.affine_range(m_size // 128):  # row tiles\n" in swapped
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s, dtype=np.float32) for s in SHAPES]
    assert_same(NEST, swapped, arrays, tmp_path)
    # the point of the swap: B's tiles are now invariant of the inner loop, and the hoist that
    # follows loads each of them once
    hoist = HoistInvariant()
    middle = profile(swapped, SHAPES, tmp_path)
    follow = next(p for p in hoist.plan(swapped, middle) if p.params["stmt"].startswith("b_tile="))
    assert follow.params["target_var"] == "m" and follow.params["index"] == "k"
    final = hoist.apply(swapped, follow)
    assert_same(NEST, final, arrays, tmp_path)
    after = profile(final, SHAPES, tmp_path)
    assert before.latency_ms is not None and after.latency_ms is not None
    assert after.latency_ms < before.latency_ms
    assert after.profile["hbm_read_bytes"] < before.profile["hbm_read_bytes"]


def test_does_not_fire_without_an_invariant_load_or_on_sequential_loops(tmp_path: Path) -> None:
    rule = InterchangeLoops()
    assert rule.plan(NO_SWAP, None) == []
    assert rule.plan(NO_SWAP, profile(NO_SWAP, [(256, 1024)], tmp_path)) == []


def test_apply_refuses_a_plan_for_another_kernel() -> None:
    rule = InterchangeLoops()
    with pytest.raises(RuleError):
        rule.apply(NO_SWAP, rule.plan(NEST, None)[0])


def _in_form(text: str, form: str) -> str:
    """NEST with its two outer loops written in another loop form public kernels use."""
    if form == "stepped range":
        return text.replace("nl.affine_range(m_size // 128)", "range(0, m_size, 128)").replace(
            "nl.affine_range(n_size // 512)", "range(0, n_size, 512)").replace(
            "m * 128:(m + 1) * 128", "m:m + 128").replace("n * 512:(n + 1) * 512", "n:n + 512")
    return text.replace("nl.affine_range(m_size // 128)", f"{form}(m_size // 128)").replace(
        "nl.affine_range(n_size // 512)", f"{form}(n_size // 512)")


@pytest.mark.parametrize("form", ["nl.static_range", "range", "stepped range"])
def test_static_and_python_range_loops_that_carry_nothing_are_swapped_too(tmp_path: Path, form: str) -> None:
    """The swap works on every loop form whose iterations the analysis finds independent."""
    text = _in_form(NEST, form)
    rule = InterchangeLoops()
    (plan,) = rule.plan(text, None)
    assert (plan.params["outer_var"], plan.params["inner_var"]) == ("m", "n")
    swapped = rule.apply(text, plan)
    assert swapped.index("for n in") < swapped.index("for m in")
    shapes = [(512, 256), (512, 1024)]
    rng = np.random.default_rng(1)
    assert_same(text, swapped, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)


@pytest.mark.parametrize("form", ["nl.static_range", "range"])
def test_a_python_loop_writing_one_place_in_every_iteration_is_not_swapped(form: str) -> None:
    """Every row tile storing to the same rows: the last one wins, so the order of iterations matters."""
    text = _in_form(NEST, form).replace("nl.store(c[m * 128:(m + 1) * 128,", "nl.store(c[0:128,")
    assert InterchangeLoops().plan(text, None) == []
    assert InterchangeLoops().plan(NEST.replace("nl.store(c[m * 128:(m + 1) * 128,", "nl.store(c[0:128,"), None)
