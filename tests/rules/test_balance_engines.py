"""balance_engines: moves work off a bottlenecked Vector engine (numbers unchanged, model latency
down) and stays quiet when the compute engines are not the bottleneck."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import numpy as np
import pytest
from kernel_styles import SHAPES as STYLE_SHAPES
from kernel_styles import source
from rule_eval import assert_same, profile

from accelopt_core.agents.rules import RuleError
from accelopt_core.agents.rules.engine_balance import BalanceEngines

RULE = BalanceEngines()

VECTOR_BOUND = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x, y):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(rows // 128):
            t = nl.load(x[r * 128:(r + 1) * 128, :])
            s = nl.load(y[r * 128:(r + 1) * 128, :])
            u = nl.multiply(t, 3.0)  # scale
            v = nl.multiply(s, t)
            w = nl.add(u, v)
            m = nl.maximum(nl.minimum(w, s), v)  # clamp
            p = nl.multiply(m, w)
            q = nl.subtract(p, v)
            e = nl.maximum(q, u)
            nl.store(out[r * 128:(r + 1) * 128, :], value=nl.copy(e))
        return out
''')

DMA_BOUND = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x, y):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(rows // 128):
            t = nl.load(x[r * 128:(r + 1) * 128, :])
            nl.store(out[r * 128:(r + 1) * 128, :], value=nl.multiply(t, 2.0))
        return out
''')

SHAPES = [(2048, 1024), (2048, 1024)]


# The same kernel with its last copy pinned to the Vector engine by its author.
PINNED_COPY = VECTOR_BOUND.replace(
    "import neuronxcc.nki.language as nl", "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl"
).replace("value=nl.copy(e))", "value=nisa.tensor_copy(e, engine=nisa.vector_engine))")


@pytest.mark.parametrize("text, hardware, target, construct", [
    (VECTOR_BOUND, "trn2", "gpsimd", "v = nisa.tensor_tensor(s, t, op=np.multiply, engine=nisa.gpsimd_engine)"),
    (PINNED_COPY, "trn1", "scalar", "value=nisa.tensor_copy(e, engine=nisa.scalar_engine)"),
])
def test_vector_work_moves_to_an_idle_engine(tmp_path, text, hardware, target, construct):
    prof = profile(text, SHAPES, tmp_path, hardware=hardware)
    assert prof.bottleneck == "vector"
    plans = RULE.plan(text, prof)
    assert plans and all(p.rule == "balance_engines" for p in plans)
    chosen = [p for p in plans if p.params["target"] == target and RULE.apply(text, p).count(construct)]
    assert chosen, [p.description for p in plans]
    new = RULE.apply(text, chosen[0])
    assert construct in new and "import neuronxcc.nki.isa as nisa" in new
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s, dtype=np.float32) for s in SHAPES]
    assert_same(text, new, arrays, tmp_path)
    assert profile(new, SHAPES, tmp_path, hardware=hardware).latency_ms < prof.latency_ms


def test_no_move_to_gpsimd_where_it_shares_the_vector_engines_sbuf_port(tmp_path):
    """On trn1 (NC-v2) Vector and GpSimd take turns on one SBUF port: the model prices that, and moving
    vector work to GpSimd made this kernel slower (0.131 -> 0.141 ms), so the rule does not offer it."""
    prof = profile(VECTOR_BOUND, SHAPES, tmp_path)
    assert prof.bottleneck == "vector"
    assert all(p.params["target"] != "gpsimd" for p in RULE.plan(VECTOR_BOUND, prof))


def test_plans_follow_the_profile_per_line_times(tmp_path):
    """Priorities come from what the profile says each line costs the bottleneck; in the 2025
    calibration an fp32 tensor_tensor takes one pass like a copy, so no plan outranks the copy's."""
    prof = profile(PINNED_COPY, SHAPES, tmp_path, hardware="trn2")
    plans = RULE.plan(PINNED_COPY, prof)
    assert plans[0].params["expr"] in ("nl.multiply(s,t)", "nl.add(u,v)", "nl.minimum(w,s)",
                                       "nl.maximum(nl.minimum(w,s),v)", "nl.multiply(m,w)", "nl.subtract(p,v)",
                                       "nl.maximum(q,u)")
    copy = next(p for p in plans if p.params["expr"] == "nisa.tensor_copy(e,engine=nisa.vector_engine)")
    assert 0 < copy.priority <= plans[0].priority
    assert plans == sorted(plans, key=lambda p: -p.priority)


def test_work_the_compiler_already_put_on_an_idle_engine_stays(tmp_path):
    """`nl.multiply(t, 3.0)` leaves the engine to the compiler, which runs an affine op on Vector or
    Scalar (the model places it on Scalar here): pinning it there gains nothing, so it is not a plan."""
    prof = profile(VECTOR_BOUND, SHAPES, tmp_path, hardware="trn2")
    assert next(ln for ln in prof.lines if ln["line"] == 13)["engine"] == "scalar"
    plans = RULE.plan(VECTOR_BOUND, prof)
    assert plans and all(p.params["expr"] != "nl.multiply(t,3.0)" for p in plans)


def test_apply_refuses_a_changed_source(tmp_path):
    prof = profile(PINNED_COPY, SHAPES, tmp_path)
    plan = RULE.plan(PINNED_COPY, prof)[0]
    with pytest.raises(RuleError):
        RULE.apply(PINNED_COPY.replace("tensor_copy(e,", "tensor_copy(m,"), plan)


def test_no_plan_when_dma_is_the_bottleneck(tmp_path):
    prof = profile(DMA_BOUND, [(512, 2048), (512, 2048)], tmp_path)
    assert prof.bottleneck == "dma"
    assert RULE.plan(DMA_BOUND, prof) == []
    assert RULE.plan(DMA_BOUND, None) == []


@pytest.mark.parametrize("tensor_over_vector, fires", [(1.2, True), (2.0, False)])
def test_a_nearly_as_busy_vector_engine_behind_the_tensor_engine_is_unloaded(tmp_path, tensor_over_vector, fires):
    """A Tensor-engine bottleneck with Vector close behind: they wait on each other, so moving vector
    work still shortens the kernel; with Vector far behind the rule stays quiet."""
    prof = profile(PINNED_COPY, SHAPES, tmp_path)
    busy = dict(prof.profile["engine_busy_time"])
    busy["tensor"] = busy["vector"] * tensor_over_vector
    matmul_bound = replace(prof, bottleneck="tensor", profile={**prof.profile, "engine_busy_time": busy})
    plans = RULE.plan(PINNED_COPY, matmul_bound)
    assert bool(plans) == fires
    assert all("vector is the busiest" in p.description for p in plans)


# ---------------------------------------------------------------- read-outs of matmul results

def _instructions_on(result, engine: str) -> int:
    return int(result.profile[f"{engine}_engine_instruction_count"])


# Each style's read-out of PSUM, and the same copy pinned to the Vector engine by its author.
READ_OUTS = {
    "compiler_matmul": ("nl.copy(v10[i1, i3, nl.arange(128)[:, None], nl.arange(512)[None, :]], dtype=np.float32, "
                        "mask=None)",
                        "nisa.tensor_copy(v10[i1, i3, nl.arange(128)[:, None], nl.arange(512)[None, :]], "
                        "dtype=np.float32, engine=nisa.vector_engine)"),
    "tutorial_matmul": ("nl.copy(acc, dtype=out.dtype)",
                        "nisa.tensor_copy(acc, dtype=out.dtype, engine=nisa.vector_engine)"),
}


def _pinned_read_out(name: str) -> str:
    placed, pinned = READ_OUTS[name]
    text = source(name)
    assert placed in text
    text = text.replace(placed, pinned)
    if "import neuronxcc.nki.isa as nisa" not in text:
        text = text.replace("import neuronxcc.nki.language as nl",
                            "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl")
    return text


@pytest.mark.parametrize("name", ["compiler_matmul", "tutorial_matmul"])
def test_matmul_read_outs_leave_the_engine_that_prepares_the_operands(tmp_path, name):
    """Vector prepares the Tensor engine's operands (the transposes' copies, a scaling) and also copies
    the results out of PSUM, where the author pinned that copy there: the read-outs move to the Scalar
    engine; the operand copies stay."""
    text, shapes = _pinned_read_out(name), STYLE_SHAPES[name]
    before = profile(text, shapes, tmp_path)
    (plan,) = [p for p in RULE.plan(text, before) if p.params.get("decouple")]
    assert len(plan.params["decouple"]) == 1 and plan.params["target"] == "scalar"
    new = RULE.apply(text, plan)
    assert new.count("engine=nisa.scalar_engine") == 1
    if name == "compiler_matmul":
        assert "v9[i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.copy(v8" in new  # a feeder
    rng = np.random.default_rng(4)
    assert_same(text, new, [rng.standard_normal(s, dtype=np.float32) for s in shapes], tmp_path)
    after = profile(new, shapes, tmp_path)
    moved = _instructions_on(before, "vector") - _instructions_on(after, "vector")
    assert moved > 0 and _instructions_on(after, "scalar") - _instructions_on(before, "scalar") == moved
    assert after.latency_ms < before.latency_ms


@pytest.mark.parametrize("name", ["compiler_matmul", "tutorial_matmul"])
def test_a_read_out_the_compiler_places_is_not_moved(tmp_path, name):
    """`nl.copy` leaves the engine to the compiler, and the model runs the read-out where it
    finishes first: pinning it gains nothing, so it is not a plan."""
    text, shapes = source(name), STYLE_SHAPES[name]
    assert not [p for p in RULE.plan(text, profile(text, shapes, tmp_path)) if p.params.get("decouple")]


def test_no_read_out_moves_where_nothing_else_feeds_the_tensor_engine(tmp_path):
    """Loaded operands go straight to the Tensor engine: the Vector engine only reads results out."""
    text = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl


        @nki.jit
        def kernel(a_t, b):
            out = nl.ndarray((128, 512), dtype=a_t.dtype, buffer=nl.shared_hbm)
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(a_t.shape[0] // 128):
                acc += nisa.nc_matmul(nl.load(a_t[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]))
            nl.store(out, value=nl.copy(acc, dtype=out.dtype))
            return out
    ''')
    shapes = [(256, 128), (256, 512)]
    assert [p for p in RULE.plan(text, profile(text, shapes, tmp_path)) if p.params.get("decouple")] == []


# A tensor_scalar written one keyword argument per line, as the attention tutorial writes its softmax's scaling.
ONE_ARGUMENT_PER_LINE = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x, y):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(rows // 128):
            t = nl.load(x[r * 128:(r + 1) * 128, :])
            s = nl.load(y[r * 128:(r + 1) * 128, :])
            v = nl.multiply(s, t)
            w = nl.add(v, t)
            m = nl.maximum(nl.minimum(w, s), v)
            p = nl.multiply(m, w)
            e = nl.maximum(nl.subtract(p, v), t)
            scaled = nisa.tensor_scalar(data=e,
                                        op0=nl.multiply,
                                        operand0=3.0,
                                        engine=nisa.vector_engine)
            nl.store(out[r * 128:(r + 1) * 128, :], value=scaled)
        return out
''')


def test_a_call_written_one_argument_per_line_moves_as_valid_code(tmp_path):
    """Each argument is printed without its comma: the newline after a comma was kept and the rewrite read
    `tensor_scalar(data=e,, op0=...` (a syntax error that ended the search on the attention tutorial); the plan
    quotes the call on one line (its line breaks and indentation were printed inside the sentence)."""
    prof = profile(ONE_ARGUMENT_PER_LINE, SHAPES, tmp_path)
    assert prof.bottleneck == "vector"
    moves = [p for p in RULE.plan(ONE_ARGUMENT_PER_LINE, prof) if p.params["expr"].startswith("nisa.tensor_scalar")]
    assert moves, [p.description for p in RULE.plan(ONE_ARGUMENT_PER_LINE, prof)]
    assert "(`nisa.tensor_scalar(data=e, op0=nl.multiply, operand0=3.0," in moves[0].description
    assert "\n" not in moves[0].description
    new = RULE.apply(ONE_ARGUMENT_PER_LINE, moves[0])
    engine = moves[0].params["target"]
    assert (f"nisa.tensor_scalar(data=e, op0=nl.multiply, operand0=3.0, engine=nisa.{engine}_engine)") in new
    rng = np.random.default_rng(5)
    assert_same(ONE_ARGUMENT_PER_LINE, new, [rng.standard_normal(s, dtype=np.float32) for s in SHAPES], tmp_path)
