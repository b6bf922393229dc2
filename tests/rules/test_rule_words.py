"""What the rules say quotes only code that is in the kernel, a loop swap says it only swaps,
and a lesson's sentences end with one period."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from accelopt_core.agents.base import Candidate, SearchContext
from accelopt_core.agents.rules.agent import RuleAgent
from accelopt_core.agents.rules.fuse_elementwise import FuseElementwise
from accelopt_core.agents.rules.interchange import InterchangeLoops
from accelopt_core.agents.rules.registry import default_rules
from accelopt_core.profiling import ProfileResult

ROOT = Path(__file__).resolve().parents[2]
SQUARE = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    mean = nl.load(x[0:128, 0:512])
    nl.store(out[0:128, 0:512], value=mean * mean)
    return out
'''


def test_a_fusion_quotes_the_kernel_s_own_code() -> None:
    (plan,) = FuseElementwise().plan(SQUARE, None)
    assert "replace `mean * mean` by the single activation nl.square" in plan.description
    (plan,) = FuseElementwise().plan(SQUARE.replace("mean * mean", "nl.multiply(mean, mean)"), None)
    assert "`nl.multiply(mean, mean)` (mean * mean)" in plan.description and "x * x" not in plan.description


def test_a_loop_swap_says_it_only_swaps() -> None:
    matmul = (ROOT / "nkibench" / "kernels" / "matmul.py").read_text()
    plans = InterchangeLoops().plan(matmul, None)
    assert plans and all("only swaps the loops" in p.description and "can be hoisted" not in p.description
                         for p in plans)
    assert "can be hoisted" not in InterchangeLoops.summary


def test_a_lesson_ends_each_sentence_with_one_period() -> None:
    result = ProfileResult("k.py", "silu", "trn1", "simulator", latency_ms=1.0, correct=True)
    slow = Candidate("a", "a", result)
    fast = Candidate("b", "b", replace(result, latency_ms=0.5), "a", "hoist the load out of the loop.",
                     "rule:hoist_invariant_loads")
    lesson = RuleAgent(default_rules()).summarize(slow, fast, SearchContext("silu", "elementwise", "trn1"))
    assert ".." not in lesson and "out of the loop. Result: 2.00x faster" in lesson
