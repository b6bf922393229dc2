"""Reading model replies: the last python block wins, prose and reasoning are dropped, and a reply
without code is a reason, never an exception. Plus the cheap checks that send kernels to the fixer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from llm_fakes import SILU, fused

from accelopt_core.agents.llm import extract_code, extract_lesson, extract_plan
from accelopt_core.agents.llm.checks import same_program, static_problem
from accelopt_core.agents.llm.parsing import normalized


def test_the_last_python_block_wins_whatever_its_fence() -> None:
    reply = ("First a snippet:\n```python\nx = 1\n```\nthen the whole kernel:\n```py\ny = 2\n```\n"
             "and a shell line:\n```bash\nrm -rf /\n```\nDone.")
    assert extract_code(reply).code == "y = 2\n"
    assert extract_code("```\nz = 3\n```").code == "z = 3\n"
    assert extract_code("~~~python3\nw = 4\n~~~").code == "w = 4\n"
    assert extract_code("```Python\nv = 5\n```").code == "v = 5\n"


def test_replies_without_code_give_a_reason() -> None:
    assert extract_code("I think the kernel is optimal.").reason == "the reply has no fenced python code block"
    assert extract_code("").reason == "the reply is empty"
    assert extract_code("```bash\nls\n```").code is None
    assert extract_code("```python\n\n```").code is None


def test_reasoning_and_leading_prose_inside_a_block_are_dropped() -> None:
    reply = "<think>maybe ```python\nwrong = 1\n``` here</think>\nAnswer:\n```python\nHere is the kernel:\nok = 1\n```"
    assert extract_code(reply).code == "ok = 1\n"
    unclosed = "<think>still thinking about ```python blocks"
    assert extract_code(unclosed).reason == "the reply is empty"


def test_a_block_cut_at_the_token_limit_is_returned_for_the_checks_to_judge() -> None:
    found = extract_code("```python\ndef kernel(x):\n    return (x +")
    assert found.code is not None and static_problem(found.code, SILU) is not None


def test_nested_fences_inside_a_longer_fence() -> None:
    reply = "````python\ns = '''\n```\n'''\n````"
    assert extract_code(reply).code == "s = '''\n```\n'''\n"


@given(st.text(max_size=300))
def test_parsing_never_raises(text: str) -> None:
    extract_code(text)
    extract_plan(text)
    extract_lesson(text)


def test_plans_have_a_title_and_keep_their_text() -> None:
    plan = extract_plan("**Plan:** fuse the exp into one activation\nWhere: line 16\nSteps:\n- use scale=-1")
    assert plan is not None and plan.title == "fuse the exp into one activation"
    assert "Steps:\n- use scale=-1" in plan.text
    heading = extract_plan("## Widen tiles to 1024 columns\n\nDetails follow.")
    assert heading is not None and heading.title == "Widen tiles to 1024 columns"
    assert extract_plan("") is None and extract_plan("<think>hmm</think>") is None
    with_code = extract_plan("Plan: hoist the load\n```python\na = 1\nb = 2\nc = 3\nd = 4\n```\nWhy: fewer DMAs")
    assert with_code is not None and "a = 1" not in with_code.text and "Why: fewer DMAs" in with_code.text
    long = extract_plan("Plan: " + "word " * 100)
    assert long is not None and len(long.title) <= 165 and long.title.endswith("...")


def test_identical_plans_normalize_alike() -> None:
    assert normalized("Plan: Fuse  the exp!\n") == normalized("plan: fuse the exp")
    assert normalized("use 512 columns") != normalized("use 1024 columns")


def test_lessons_are_plain_and_short() -> None:
    text = ("## Lesson\n**Summary:** Fusing element-wise steps removes instructions. It pays on vector-bound "
            "kernels. A third sentence. A fourth one. A fifth that is cut.")
    lesson = extract_lesson(text)
    assert lesson == ("Fusing element-wise steps removes instructions. It pays on vector-bound kernels. "
                      "A third sentence. A fourth one.")
    assert extract_lesson("   ") is None


def test_static_checks_name_what_is_wrong() -> None:
    assert static_problem(fused(SILU), SILU) is None
    broken = SILU.replace("for r in nl.affine_range(rows // tile_p):", "for r in nl.affine_range(rows // tile_p)")
    assert static_problem(broken, SILU) == "candidate.py:13: syntax error: expected ':'"
    assert "outside function" in (static_problem(SILU + "return 1\n", SILU) or "")
    assert "defines no function" in (static_problem("x = 1\n", SILU) or "")
    renamed = SILU.replace("def kernel(x):", "def kernel(x, scale):")
    assert "parameters changed from (x) to (x, scale)" in (static_problem(renamed, SILU) or "")
    lowered = SILU.replace("dtype=x.dtype", "dtype=nl.bfloat16")
    assert "lower precision (bfloat16)" in (static_problem(lowered, SILU) or "")


def test_formatting_only_changes_are_the_same_program() -> None:
    assert same_program(SILU, SILU.replace("    rows, cols = x.shape", "    rows, cols = x.shape  # sizes"))
    assert not same_program(SILU, fused(SILU))
