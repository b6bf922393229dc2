"""The shared kernel analysis: index expressions as affine forms, block tensors used within one
iteration, loads that repeat in a loop, engines and profile costs, the same answers in every style."""

from __future__ import annotations

import textwrap

import libcst as cst
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
