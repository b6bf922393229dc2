"""benchmarks/rule_plans.py: one line per plan of every rule, to diff what the rules propose before and after a
change to them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from accelopt_core.agents.rules.hoist import HoistInvariant

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "rule_plans.py"

GAIN = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x, g):
    out = nl.ndarray((512, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(4):
        gain = nl.load(g[0:128, :])
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.multiply(nl.load(x[r * 128:(r + 1) * 128, :]), gain))
    return out
'''


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("rule_plans", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_a_plan_is_one_line_with_its_key_priority_and_rewritten_kernel() -> None:
    [line] = _script().plan_lines("k.py", GAIN, None, [HoistInvariant()])
    head, description = line.split(" :: ")
    label, mode, rule, key, priority, where, rewritten = head.split(" ")
    assert (label, mode, rule, priority, where) == ("k.py", "noprofile", "hoist_invariant", "prio=0.01", "line=10")
    assert key.startswith("hoist_invariant@10[") and len(rewritten) == 16 and description.startswith("Hoist `gain")


def test_the_bundled_kernels_are_the_baselines_and_the_examples() -> None:
    labels = [k.label for k in _script().bundled_kernels(None)]
    assert "nkibench/matmul.py" in labels and "examples/matmul.py" in labels
    assert not any(label.endswith("_ref.py") for label in labels)
