"""The shared kernel analysis: index expressions as affine forms, block tensors used within one
iteration, loads that repeat in a loop, engines and profile costs, the same answers in every style."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from kernel_styles import SHAPES, source
from rule_eval import profile

from accelopt_core.agents.rules.analysis import Affine, Span, canonical_name, model_of


def _element(model, text: str):
    sub = cst.parse_expression(f"t[{text}]")
    assert isinstance(sub, cst.Subscript)
    return model.element(sub.slice[0].slice)


def test_index_expressions_of_every_style_become_affine_forms():
    model = model_of(source("compiler_swish"))
    assert _element(model, "512 * i1 + nl.arange(512)[None, :]") == Affine.of(0, {"i1": 512}, [(1, 512)])
    assert _element(model, "-128 * i0 + -1 * i1 + 7") == Affine.of(7, {"i0": -128, "i1": -1})
    tutorial = model_of(source("tutorial_swish"))
    assert _element(tutorial, "r * 128:(r + 1) * 128") == Span(Affine.of(0, {"r": 128}), 128)
    assert _element(tutorial, "nl.ds(r * 64, 64)") == Span(Affine.of(0, {"r": 64}), 64)
    assert _element(tutorial, ":") == Span(Affine(), None)
    assert _element(tutorial, "r * r") is None  # not affine: not understood, never guessed


def test_names_are_canonical_under_any_alias():
    aliases = {"nl": "neuronxcc.nki.language", "language": "nki.language", "nki": "nki"}
    assert canonical_name("nl.load", aliases) == "nl.load"
    assert canonical_name("language.load", aliases) == "nl.load"
    assert canonical_name("nki.isa.activation", aliases) == "nisa.activation"
    modern = model_of(source("modern_scale"))
    calls = [(op.call, op.engine) for op in modern.ops if op.call and "dma_copy" in op.call]
    assert calls and all(engine == "dma" for _, engine in calls)


def test_block_tensors_used_within_one_iteration_are_found():
    model = model_of(source("compiler_swish"))
    local = {name: model.iteration_local(name) for name in ("v4", "v5", "v6", "v7", "v8")}
    assert {n: (r.loop.var, r.dims) for n, r in local.items() if not isinstance(r, str)} == {
        "v4": ("i0", (0,)), "v5": ("i0", (0,)), "v6": ("i1", (0, 1)), "v7": ("i1", (0, 1)), "v8": ("i1", (0, 1))}
    assert isinstance(model.iteration_local("v3"), str)  # no block dimension


def test_a_block_read_by_another_loop_or_shared_between_iterations_is_not_local():
    across = source("compiler_two_loops")
    model = model_of(across)
    assert "no loop" in model.iteration_local("v3")  # written by one loop, read by the next
    assert "share a block" in model.iteration_local("v4")  # block 0 in every iteration


def test_loads_that_repeat_in_a_loop_are_found_in_every_style():
    tutorial = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def kernel(x, w):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for r in nl.affine_range(x.shape[0] // 128):
                tile = nl.load(x[r * 128:(r + 1) * 128, :])
                gain = nl.load(w[0:128, :])
                nl.store(out[r * 128:(r + 1) * 128, :], value=nl.multiply(tile, gain))
            return out
    ''')
    found = [(op.line, loop.var) for op, loop in model_of(tutorial).repeated_loads()]
    assert found == [(11, "r")]
    compiler = source("compiler_reload")
    assert [(op.line, loop.var) for op, loop in model_of(compiler).repeated_loads()] == [(11, "i0")]
    modern = model_of(source("modern_scale"))
    assert [op.line for op, _ in modern.repeated_loads()] == [13]  # the gain tile, also with dma_copy
    assert model_of(source("compiler_swish")).repeated_loads() == []


def test_the_profile_says_what_each_statement_costs(tmp_path):
    text = source("compiler_swish")
    prof = profile(text, SHAPES["compiler_swish"], tmp_path)
    model = model_of(text, prof)
    reciprocal = next(op for op in model.ops if op.call == "nisa.reciprocal")
    assert reciprocal.engine == "vector" and model.cost(reciprocal).get("vector", 0.0) > 0
    load = next(op for op in model.ops if op.call == "nl.load")
    assert load.engine == "dma" and model.cost(load).get("dma", 0.0) > 0
    assert model.trip(load.loops[0]) == 2
    assert model_of(text, prof) is model  # built once, shared by every rule


LOOP_FORMS = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE = 128


@nki.jit
def kernel(x):
    out = nl.ndarray((1024, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    for a in {header}:
        t = nl.load(x[a:a + 128, :])
        nl.store(out[a:a + 128, :], value=t)
    return out
'''


@pytest.mark.parametrize(("header", "trips", "form"), [
    ("range(8)", 8, Affine.of(0, {"a": 1})),
    ("range(0, 1024, TILE)", 8, Affine.of(0, {"a": 128})),
    ("range(256, 1024, 128)", 6, Affine.of(256, {"a": 128})),
    ("range(3, 10)", 7, Affine.of(3, {"a": 1})),
    ("nl.affine_range(0, 1024, 128)", 8, Affine.of(0, {"a": 128})),
    ("nl.static_range(128, 1024, 256)", 4, Affine.of(128, {"a": 256})),
    ("nl.sequential_range(1, 1024, 512)", 2, Affine.of(1, {"a": 512})),
])
def test_every_loop_form_has_a_trip_count_and_an_affine_variable(header, trips, form):
    """`range(start, stop, step)` in every loop form is a loop whose variable in iteration k
    is start + step * k, so index questions work on it as on `affine_range(n)`."""
    model = model_of(LOOP_FORMS.replace("{header}", header))
    (loop,) = model.loops
    assert loop.trips == trips and (loop.start, loop.step) == (form.const, form.coeff("a"))
    assert loop.counted == (header == "range(8)")
    assert _element(model, "a:a + 128") == Span(form, 128)


def test_a_loop_start_or_step_that_is_not_a_known_integer_leaves_the_variable_not_understood():
    model = model_of(LOOP_FORMS.replace("{header}", "range(x.shape[0] // 2, 1024, 128)"))
    (loop,) = model.loops
    assert loop.trips is None and loop.start is None and loop.step == 128
    assert _element(model, "a:a + 128") is None  # never guessed as a + 0


@pytest.mark.parametrize("header", ["range(0, 1024, 128)", "nl.static_range(8)", "nl.sequential_range(0, 1024, 128)",
                                    "nl.affine_range(0, 1024, 128)"])
def test_a_loop_passing_nothing_between_iterations_carries_nothing(header):
    model = model_of(LOOP_FORMS.replace("{header}", header))
    assert model.carried(model.loops[0]) is None


@pytest.mark.parametrize(("body", "why"), [
    ("        t = nl.add(t, prev)\n        prev = t\n", "`prev` carries a value"),
    ("        nl.store(out[0:128, :], value=t)\n", "`out` is written at a place that does not follow"),
    ("        nl.store(out[a + 128:a + 256, :], value=nl.load(out[a:a + 128, :]))\n", "`out` is used at another place"),
])
def test_a_value_handed_to_the_next_iteration_is_found_in_every_loop_form(body, why):
    for header in ("range(0, 896, 128)", "nl.static_range(0, 896, 128)"):
        text = LOOP_FORMS.replace("{header}", header).replace("        nl.store(out[a:a + 128, :], value=t)\n", body)
        if "prev" in body:
            text = text.replace("    for a in", "    prev = nl.zeros((128, 512), dtype=x.dtype)\n    for a in")
        model = model_of(text)
        assert why in (model.carried(model.loops[0]) or "")


def test_reading_a_tensor_s_dtype_or_shape_is_not_using_its_values():
    text = LOOP_FORMS.replace("{header}", "range(0, 1024, 128)").replace(
        "value=t)", "value=nl.copy(t, dtype=out.dtype))")
    model = model_of(text)
    assert model.carried(model.loops[0]) is None


GRIDS = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray((512, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:512]
    g = nl.mgrid[0:128, 256:512]
    for r in nl.affine_range(4):
        t = nl.load(x[r * 128 + i_p, i_f])
        nl.store(out[r * 128 + g.p, g.x], value=t)
    return out
'''


def test_legacy_index_grids_are_element_ranges_like_arange():
    """`nl.mgrid` unpacked into names, or used through `.p` / `.x`, reads as `nl.arange` does."""
    model = model_of(GRIDS)
    assert _element(model, "r * 128 + i_p") == Affine.of(0, {"r": 128}, [(1, 128)])
    assert _element(model, "i_f") == Affine.of(0, ranges=[(1, 512)])
    assert _element(model, "g.x") == Affine.of(256, ranges=[(1, 256)])
    assert _element(model, "r * 128 + g.p") == _element(model, "r * 128 + nl.arange(128)[:, None]")
    load = next(op for op in model.ops if op.call == "nl.load")
    assert load.refs[1].index == (Affine.of(0, {"r": 128}, [(1, 128)]), Affine.of(0, ranges=[(1, 512)]))
