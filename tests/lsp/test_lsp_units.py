"""The server's engine-side helpers on their own (no server process): recognising kernels, linking
tasks, finding repeated loads, minimal edits, settings."""

from __future__ import annotations

import time
from pathlib import Path

from lsp_client import ROOT, SILU

from accelopt_core.editor_api import repeated_loads
from accelopt_core.engine import check_variant, quick_fixes, rewrites
from server.config import Settings, merge
from server.edits import apply_line_edits, line_edits, line_map
from server.kernels import analyze, directive_insert_line, link_task, parse_directive, suggest_tasks

MATMUL = (ROOT / "nkibench" / "kernels" / "matmul.py").read_text()


def test_kernels_are_recognised_by_content() -> None:
    assert analyze(SILU).is_kernel and analyze(SILU).function == "kernel"
    assert not analyze("import numpy as np\n\ndef f(x):\n    return x\n").is_kernel
    modern = "import nki\nimport nki.language as nl\n\n@nki.jit\ndef my_kernel(a):\n    return a\n"
    assert analyze(modern).function == "my_kernel" and analyze(modern).def_line == 5
    broken = analyze(SILU.replace("def kernel(x):", "def kernel(x:"))
    assert broken.is_kernel and broken.syntax_error and broken.syntax_error[0] == 8
    two = "import neuronxcc.nki as nki\n\n@nki.jit\ndef a(x):\n    pass\n\n@nki.jit\ndef b(x):\n    pass\n"
    several = analyze(two)  # no problem: each kernel gets a lens that picks it (test_lsp_several_kernels)
    assert several.choosing and not several.problem and [k.name for k in several.kernels] == ["a", "b"]
    assert analyze(two, chosen="b").function == "b" and analyze(two, chosen="b").named == "b"
    assert analyze("# accelopt: kernel=a\n" + two, chosen="b").function == "b"  # a lens's pick is the latest word
    assert analyze(two, chosen="gone").choosing  # a pick whose function was deleted
    assert analyze("# accelopt: kernel=b\n" + two).function == "b"
    assert analyze("# accelopt: kernel=b\n" + two).named == "b" and analyze(SILU).named is None  # searches are told


def test_directives_and_task_links(tmp_path: Path) -> None:
    directive = parse_directive("'''doc'''\n# accelopt: task=silu:small\n")
    assert directive is not None and directive.line == 2 and directive.task == "silu:small"
    assert parse_directive("# accelopt: colour=blue\n").problems  # type: ignore[union-attr]
    link = link_task(analyze("# accelopt: task=silu\n" + SILU), None)
    assert link.ok and link.ref is not None and link.ref.name == "silu" and link.reference_path
    assert check_variant(link.ref) == "small"
    assert check_variant(link_task(analyze("# accelopt: task=silu:small\n" + SILU), None).ref) is None  # type: ignore[arg-type]
    assert "unknown task" in (link_task(analyze("# accelopt: task=nope\n" + SILU), None).problem or "")
    missing = link_task(analyze("# accelopt: reference=ref.py\n" + SILU), str(tmp_path / "k.py"))
    assert missing.problem and "not found" in missing.problem

    # the NKIBench layout: kernels/NAME.py beside reference/NAME.py
    (tmp_path / "kernels").mkdir()
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "mine.py").write_text("x = 1\n")
    layout = link_task(analyze(SILU), str(tmp_path / "kernels" / "mine.py"))
    assert layout.origin == "nkibench" and layout.ref is not None and layout.ref.reference
    ours = link_task(analyze(SILU), str(ROOT / "nkibench" / "kernels" / "silu.py"))
    assert ours.origin == "nkibench" and ours.ref is not None and ours.ref.name == "silu"
    assert link_task(analyze(SILU), str(tmp_path / "loose.py")).origin == "none"
    assert suggest_tasks("/x/my_silu.py")[0] == "silu"
    assert directive_insert_line("#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nimport x\n") == 2


def test_repeated_loads_are_found_where_a_loop_does_not_change_the_address() -> None:
    loads = repeated_loads(MATMUL, analyze(MATMUL).function)
    assert [(load.line, load.loop_vars) for load in loads] == [(31, ("m",))]
    assert repeated_loads(SILU, analyze(SILU).function) == ()
    written = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n@nki.jit\ndef kernel(a, out):\n"
               "    for i in nl.affine_range(4):\n        t = nl.load(out[0:128, 0:4])\n"
               "        nl.store(out[0:128, 0:4], value=t)\n")
    assert repeated_loads(written, analyze(written).function) == ()  # re-reading what the loop writes is not redundant
    # the rules' analysis answers for every style: compiler output loading into a block tensor, dma_copy
    compiler = (ROOT / "tests" / "rules" / "kernels" / "compiler_reload.py").read_text()
    found = repeated_loads(compiler, analyze(compiler).function)
    assert [(load.line, load.loop_vars) for load in found] == [(11, ("i0",))]
    modern = (ROOT / "tests" / "rules" / "kernels" / "modern_scale.py").read_text()
    assert [load.line for load in repeated_loads(modern, analyze(modern).function)] == [13]


def test_line_edits_are_minimal_and_exact() -> None:
    old = "a\nb\nc\nd"
    new = "a\nB\nc\nd\ne\n"
    edits = line_edits(old, new)
    assert apply_line_edits(old, edits) == new
    assert edits[0].start == 1 and edits[0].end == 2
    assert line_map("x\ny\nz\n", "x\nnew\ny\nz\n") == {1: 1, 2: 3, 3: 4}


def test_settings_merge_validates_and_guards_agents() -> None:
    settings, problems = merge(Settings(), {"accelopt": {"hardware": "trn2", "searchPreset": "fast",
                                                         "llm": {"endpoint": "http://x", "model": "m"}}})
    assert settings.hardware == "trn2" and settings.search_preset == "quick" and settings.llm_model == "m"
    assert problems and "searchPreset" in problems[0]
    settings, problems = merge(Settings(), {"optimizerAgents": ["a.py:Agent"]})
    assert settings.optimizer_agents == () and problems  # workspace settings cannot make us import code
    settings, _ = merge(Settings(), {"optimizerAgents": ["a.py:Agent"]}, trusted=True)
    assert settings.optimizer_agents == ("a.py:Agent",)


class _Rule:
    """A stand-in rule: plans at fixed lines, rewrites by appending a comment, refuses one plan."""

    def __init__(self, name: str, plans: list[tuple[int, float]]):
        self.name = name
        self.plans = plans

    def plan(self, source: str, profile: object) -> list[object]:
        from accelopt_core.agents.rules import Plan

        return [Plan(self.name, line, f"change line {line}", {"line": line}, priority) for line, priority in self.plans]

    def apply(self, source: str, plan: object) -> str:
        from accelopt_core.agents.rules import RuleError

        if plan.line == 13:  # type: ignore[attr-defined]
            raise RuleError("does not fit")
        return source + f"# {self.name} at {plan.line}\n"  # type: ignore[attr-defined]


def test_rule_rewrites_are_ordered_limited_and_skip_plans_that_do_not_apply() -> None:
    found = rewrites([_Rule("a", [(10, 0.2), (13, 0.9)]), _Rule("b", [(11, 0.5), (12, 0.1)])], SILU, None, 2)
    assert [(plan.rule, plan.line) for plan, _ in found] == [("b", 11), ("a", 10)]
    assert found[0][1].endswith("# b at 11\n")


def _timed(latency: dict[str, float], wrong: tuple[str, ...] = (), seconds: float = 0.0):  # type: ignore[no-untyped-def]
    """An evaluation stand-in: each rewrite's latency by the comment its rule appended, and its verdict; each
    evaluation takes `seconds`."""
    from accelopt_core.profiling import ProfileResult

    calls: list[tuple[str, bool]] = []

    def evaluate(source: str, check: bool) -> ProfileResult:
        mark = source.rstrip().rsplit("# ", 1)[-1]
        calls.append((mark, check))
        time.sleep(seconds)
        return ProfileResult("k.py", "silu", "trn1", "simulator", latency_ms=latency[mark],
                             correct=(mark not in wrong) if check else None)
    return evaluate, calls


def test_quick_fixes_offer_only_rewrites_the_model_times_faster_and_check_them() -> None:
    """A quick fix never makes the kernel slower by the model's word; one that fails its check is
    dropped; offered ones are labelled checked only once checked."""
    from accelopt_core.profiling import ProfileResult

    base = ProfileResult("k.py", "silu", "trn1", "simulator", latency_ms=1.0)
    rules = [_Rule("a", [(10, 0.9), (11, 0.8), (12, 0.7), (14, 0.6)])]
    evaluate, calls = _timed({"a at 10": 1.6, "a at 11": 0.8, "a at 12": 0.995, "a at 14": 0.5}, wrong=("a at 14",))
    fixes = quick_fixes(rules, SILU, base, 5, evaluate)
    assert [(f.line, f.estimated_ms, f.checked) for f in fixes] == [(11, 0.8, True)]  # slower, 1.005x, wrong: gone
    assert fixes[0].speedup == 1.25 and fixes[0].baseline_ms == 1.0
    assert ("a at 10", True) not in calls  # a rewrite the model times slower is never checked
    evaluate, calls = _timed({"a at 10": 0.5, "a at 11": 0.8, "a at 12": 0.9, "a at 14": 0.5}, seconds=0.2)
    unchecked = quick_fixes(rules, SILU, base, 2, evaluate, deadline=time.monotonic() + 0.1)  # time for one timing
    assert [(f.line, f.checked) for f in unchecked] == [(10, False)] and all(not check for _, check in calls)


def test_an_applied_quick_fix_that_made_the_kernel_slower_or_wrong_says_so() -> None:
    from accelopt_core.engine import QuickFix
    from accelopt_core.profiling import ProfileResult
    from server.findings import applied_fix_findings

    fix = QuickFix("retune_tile_size", 12, "channel_psize = 64 instead of 128", 0.5, "k", "src", 1.0, 0.8, True)
    slower = ProfileResult("k.py", "mamba", "trn1", "simulator", latency_ms=1.64, correct=True)
    (finding,) = applied_fix_findings(fix, slower, 5)
    assert finding.severity == "warning" and finding.line == 5
    assert "made the kernel 1.64x slower (1 ms -> 1.64 ms); undo to revert it" in finding.message
    wrong = ProfileResult("k.py", "mamba", "trn1", "simulator", latency_ms=0.7, correct=False,
                          check_message="relative L2 error 0.3")
    assert "gives wrong results: relative L2 error 0.3" in applied_fix_findings(fix, wrong, 5)[0].message
    faster = ProfileResult("k.py", "mamba", "trn1", "simulator", latency_ms=0.8, correct=True)
    assert applied_fix_findings(fix, faster, 5) == [] and applied_fix_findings(None, slower, 5) == []


def test_bytes_per_line_exact_when_the_profile_has_them_else_estimated_for_dma_lines() -> None:
    from accelopt_core.profiling import ProfileResult
    from server.describe import bytes_text

    result = ProfileResult("k.py", "silu", "trn1", "simulator",
                           profile={"dma_transfer_total_bytes": 4096, "dma_instruction_count": 4})
    dma_line = {"line": 3, "time_ms": 1.0, "engine": "dma", "instructions": 2, "engines": {"dma": 1.0}}
    assert bytes_text(dma_line, result) == "≈ 2.0 KiB (estimated from this line's share of DMA instructions)"
    vector_line = {"line": 4, "time_ms": 1.0, "engine": "vector", "instructions": 2, "engines": {"vector": 1.0}}
    assert bytes_text(vector_line, result) is None
    exact = {**vector_line, "bytes": {"hbm": 0, "sbuf": 2048, "psum": 512}}
    assert bytes_text(exact, result) == "SBUF 2.0 KiB · PSUM 512 B"


def test_settings_take_the_vscode_extensions_names() -> None:
    sent = {"hardware": "trn2", "llm": {"baseUrl": "http://localhost:8000/v1", "model": "m"},
            "search": {"preset": "default", "budget": 2.5}, "memory": {"dbPath": "/tmp/x.db"},
            "secrets": {"llmApiKey": "sk-1"}, "client": "vscode", "reportPanel": True}
    settings, problems = merge(Settings(), {"accelopt": sent})
    assert problems == []
    assert (settings.hardware, settings.llm_endpoint, settings.llm_model) == ("trn2", "http://localhost:8000/v1", "m")
    assert (settings.search_preset, settings.search_budget, settings.memory_db) == ("default", 2.5, "/tmp/x.db")
    assert "sk-1" not in repr(settings)
    cleared, _ = merge(settings, {"llm": {"baseUrl": ""}, "search": {"budget": 0}, "memory": {"dbPath": ""}})
    assert cleared.llm_endpoint is None and cleared.search_budget is None and cleared.memory_db is None
    old, _ = merge(Settings(), {"searchPreset": "paper", "memoryDb": "/a.db", "llm": {"endpoint": "http://e"}})
    assert (old.search_preset, old.memory_db, old.llm_endpoint) == ("paper", "/a.db", "http://e")
    _, bad = merge(Settings(), {"search": {"preset": "huge"}})
    assert bad and "searchPreset" in bad[0]


def test_a_job_that_cannot_be_sent_fails_instead_of_waiting() -> None:
    """An unpicklable payload (e.g. a masked secret object) fails its job at once."""
    import asyncio
    import threading

    from accelopt_core.editor_api import AnalyzeRequest
    from server.workers import Lane

    async def scenario() -> BaseException | None:
        lane = Lane("test")
        job = lane.submit(AnalyzeRequest(threading.Lock()), timeout=30)  # type: ignore[arg-type]
        try:
            await asyncio.wait_for(job.future, timeout=20)
        except Exception as exc:
            return exc
        finally:
            await lane.close()
        return None

    error = asyncio.run(scenario())
    assert error is not None and "pickle" in str(error).lower()


def test_profile_fractions_read_as_percent_and_drive_the_idle_tensor_finding() -> None:
    """A profile's `*_percent` fields are fractions (neuron-profile's scale): people read 74%, and the
    Tensor engine counts as idle below half of the time, not below 50 times it."""
    from accelopt_core.profiling import ProfileResult
    from server.findings import bottlenecks
    from server.format import fraction, percent

    assert (fraction(0.739), fraction(0.739, 1), fraction(None), percent(41.3)) == ("74%", "73.9%", "-", "41%")
    lines = [{"line": 31, "time_ms": 1.0, "engine": "dma", "instructions": 4, "engines": {"dma": 1.0}}]

    def idle_finding(active: float) -> list[str]:
        result = ProfileResult("k.py", "matmul", "trn1", "simulator", latency_ms=1.0, bound="matmul",
                               bottleneck="dma", lines=lines,
                               profile={"tensor_engine_active_time_percent": active, "hardware_flops": 1})
        return [f.message for f in bottlenecks(analyze(MATMUL), result) if f.code == "idle-tensor-engine"]

    (message,) = idle_finding(0.3)
    assert "idle 70% of the time" in message
    assert idle_finding(0.7) == []


def test_the_spill_finding_follows_an_sbuf_overflow_not_the_kernels_own_scratch() -> None:
    """Spill counters also count a kernel's own scratch HBM (as neuron-profile does); the editor says
    "SBUF overflows" only where live blocks exceed the usable SBUF, or where the backend gives no peak."""
    from accelopt_core.profiling import ProfileResult
    from server.findings import bottlenecks

    def spill_findings(**peak: int) -> list[str]:
        profile = {"spill_save_bytes": 50 << 20, "spill_reload_bytes": 50 << 20, **peak}
        result = ProfileResult("k.py", "matmul", "trn1", "simulator", latency_ms=1.0, bound="memory",
                               bottleneck="dma", lines=[], profile=profile)
        return [f.message for f in bottlenecks(analyze(MATMUL), result) if f.code == "sbuf-spills"]

    usable = {"sbuf_usable_bytes_per_partition": 180224}
    assert spill_findings(sbuf_peak_live_bytes_per_partition=100_000, **usable) == []
    (message,) = spill_findings(sbuf_peak_live_bytes_per_partition=300_000, **usable)
    assert message.startswith("SBUF overflows")
    assert len(spill_findings()) == 1  # a hardware profile has no peak: its spill counters speak


def test_findings_say_only_what_the_profile_shows() -> None:
    """The idle-Tensor finding names no engine it waits on when the Tensor engine is the busiest
    itself, and a repeated load on a line with 0 % of the busy time is not worth a diagnostic."""
    from accelopt_core.profiling import ProfileResult
    from server.findings import bottlenecks

    repeated = repeated_loads(MATMUL, analyze(MATMUL).function)

    def findings(bottleneck: str, hot_line: int) -> dict[str, str]:
        lines = [{"line": hot_line, "time_ms": 1.0, "engine": "tensor", "instructions": 4, "engines": {"tensor": 1.0}},
                 {"line": 31 if hot_line != 31 else 30, "time_ms": 0.0, "engine": "dma", "instructions": 1,
                  "engines": {"dma": 0.0}}]
        result = ProfileResult("k.py", "matmul", "trn1", "simulator", latency_ms=1.0, bound="matmul",
                               bottleneck=bottleneck, lines=lines,
                               profile={"tensor_engine_active_time_percent": 0.4, "hardware_flops": 1})
        return {f.code: f.message for f in bottlenecks(analyze(MATMUL), result, repeated)}

    said = findings("tensor", 31)
    assert "no other engine is busier" in said["idle-tensor-engine"] and "waits on the tensor" not in str(said)
    assert "waits on the dma engine" in findings("dma", 31)["idle-tensor-engine"]
    assert "repeated-load" in said and "repeated-load" not in findings("tensor", 29)  # line 31 at 0 %


def test_a_kernel_picked_with_a_lens_holds_until_the_directive_names_another() -> None:
    from accelopt_core.profiling import ProfileResult
    from server.state import KernelDocument

    two = "import neuronxcc.nki as nki\n\n@nki.jit\ndef a(x):\n    pass\n\n@nki.jit\ndef b(x):\n    pass\n"
    doc = KernelDocument.create("file:///ws/two.py", "# accelopt: kernel=a\n" + two)
    doc.trace = ProfileResult("two.py", "t", "trn1", "simulator", latency_ms=1.0)
    doc.keep(doc.trace)
    assert doc.choose_kernel("b") and doc.info.function == "b" and doc.trace is None and set(doc.kept) == {"a"}
    assert not doc.choose_kernel("nope")
    doc.source = "# accelopt: kernel=a\n" + two + "\n"  # an edit elsewhere keeps the pick
    doc.reanalyze()
    assert doc.info.function == "b"
    doc.source = two  # the directive's kernel= removed: the pick ends with it
    doc.reanalyze()
    assert doc.chosen_kernel is None and doc.info.choosing


def test_the_targeted_nki_release_is_validated() -> None:
    settings, problems = merge(Settings(), {"accelopt": {"nkiVersion": "0.7.0"}})
    assert settings.nki_version == "0.7" and not problems
    settings, problems = merge(Settings(), {"accelopt": {"nkiVersion": "0.9"}})
    assert settings.nki_version == "0.8" and problems
