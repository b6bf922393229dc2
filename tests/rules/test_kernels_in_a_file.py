"""A file of several kernels (none named by the profile): every rule plans on each kernel, its plans name
the kernel, and applying one rewrites that kernel exactly as in a file of its own. Helpers defined inside
a kernel: the rules rewrite their statements, and the analysis reads their body where they are called."""

from __future__ import annotations

import numpy as np
from kernel_styles import source
from rule_eval import assert_same

from accelopt_core.agents.rules.analysis import model_of
from accelopt_core.agents.rules.fuse_elementwise import FuseElementwise
from accelopt_core.agents.rules.interchange import InterchangeLoops

SWISH = source("tutorial_swish").replace("def kernel(", "def swish(")
MATMUL = source("tutorial_matmul").replace("def kernel(", "def matmul(")
BOTH = SWISH + "\n\n" + MATMUL[MATMUL.index("@nki.jit"):]


def _function(text: str, name: str) -> str:
    start = text.index(f"def {name}(")
    end = text.find("@nki.jit", start)
    return text[start:end if end >= 0 else len(text)].rstrip()


def test_each_kernel_of_a_file_is_planned_on_and_named():
    fused = FuseElementwise().plan(BOTH, None)
    swapped = InterchangeLoops().plan(BOTH, None)
    assert fused and {p.params["kernel"] for p in fused} == {"swish"}
    assert swapped and {p.params["kernel"] for p in swapped} == {"matmul"}
    assert all("kernel" not in p.params for p in FuseElementwise().plan(SWISH, None))  # one kernel: as before


def test_a_plan_rewrites_its_kernel_as_in_a_file_of_its_own():
    for rule, alone, name, other in ((FuseElementwise(), SWISH, "swish", "matmul"),
                                     (InterchangeLoops(), MATMUL, "matmul", "swish")):
        plan = rule.plan(BOTH, None)[0]
        wanted = {k: v for k, v in plan.params.items() if k != "kernel"}
        [same] = [p for p in rule.plan(alone, None) if p.params == wanted]
        new = rule.apply(BOTH, plan)
        assert _function(new, name) == _function(rule.apply(alone, same), name)
        assert _function(new, other) == _function(BOTH, other)


HELPER = """import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)

    def gate(tile):
        return nl.reciprocal(nl.add(nl.exp(nl.negative(tile)), 1.0))

    for r in nl.affine_range(x.shape[0] // 128):
        tile = nl.load(x[r * 128:(r + 1) * 128, :])
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.multiply(tile, gate(tile)))
    return out
"""


def test_a_chain_inside_a_helper_of_the_kernel_is_fused(tmp_path):
    plans = FuseElementwise().plan(HELPER, None)
    assert [p.line for p in plans] == [10]
    new = FuseElementwise().apply(HELPER, plans[0])
    assert "        return nl.sigmoid(tile)\n" in new
    assert_same(HELPER, new, [np.random.default_rng(3).standard_normal((256, 1024), dtype=np.float32)], tmp_path)


def test_a_helpers_body_is_read_where_it_is_called():
    model = model_of(HELPER)
    assert 10 not in {op.line for op in model.ops}  # defining the helper runs none of its statements
    assert model.carried(model.loops[0]) is None  # the tile goes in as an argument
    closing = HELPER.replace("def gate(tile):", "def gate():").replace("gate(tile))", "gate())").replace(
        "1.0)", "float(1))")
    model = model_of(closing.replace("nl.affine_range", "range"))
    store = next(op for op in model.ops if op.call == "nl.store")
    assert model.closure(model.helpers["gate"]) == {"tile"}  # not `nl` or the builtin `float`
    assert "tile" in {r.name for r in store.reads}  # the helper reads the loop's tile from the kernel
    assert model.carried(model.loops[0]) == "the helper `gate` reads `tile` of the loop's body from inside"
