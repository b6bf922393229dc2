"""Optimize from the editor: $/progress while the beam search runs, verified candidates as code
actions whose WorkspaceEdit rewrites the kernel, and cancellation through the progress token.

The search runs with the scripted agent of tests/search (known wins on silu), injected through the
`optimizerAgents` initialization option, so the test does not depend on the rule set."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from calibration_set import ABSENT, calibration_cases
from lsp_client import AGENTS, SILU, SMALL_SILU, apply_edit, running_server, wait_for
from lsprotocol import types

pytestmark = pytest.mark.asyncio

SCRIPTED = {"optimizerAgents": [f"{AGENTS}:ScriptedAgent"], "searchWorkers": 2}
SLEEPY = {"optimizerAgents": [f"{AGENTS}:SleepyAgent"], "searchWorkers": 2}
FUSED = "nisa.activation(op=nl.exp, data=tile, scale=-1.0)"


async def test_optimize_reports_progress_and_its_rewrite_applies(workspace: Path, memory_db: Path) -> None:
    async with running_server(workspace, memory_db, init_options=SCRIPTED) as editor:
        uri = editor.open(workspace / "silu_small.py", SMALL_SILU)
        await editor.profiled(uri)
        summary = await editor.command("accelopt.optimize", uri)
        assert not summary.get("error"), summary
        assert summary["speedup"] > 1.04 and not summary["cancelled"]
        rewrites = summary["rewrites"]
        assert rewrites and rewrites[0]["title"].startswith("Apply rewrite: ")
        assert "x faster (" in rewrites[0]["title"] and "% of peak, checked on 5 seeds)" in rewrites[0]["title"]

        (reports,) = editor.client.progress_reports.values()
        kinds = [r.kind for r in reports]
        assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds
        assert reports[0].cancellable
        messages = [r.message for r in reports if r.kind == "report"]
        assert any("best 1." in m and "% of peak" in m and "iteration" in m for m in messages), messages

        hint = await wait_for(lambda: editor.diagnostics(uri, "rewrite-available"), 10, what="the rewrite hint")
        def_line = hint[0].range.start.line + 1
        actions = await editor.actions(uri, def_line, hint)
        rewrite = next(a for a in actions if a.kind == types.CodeActionKind.RefactorRewrite)
        assert rewrite.title == rewrites[0]["title"] and rewrite.is_preferred
        edit = rewrite.edit
        assert edit is not None and edit.document_changes and edit.change_annotations
        (annotation,) = edit.change_annotations.values()
        assert annotation.needs_confirmation  # editors show a diff preview before applying
        (change,) = edit.document_changes
        assert isinstance(change, types.TextDocumentEdit) and change.text_document.version == 1
        assert all(isinstance(e, types.AnnotatedTextEdit) for e in change.edits)

        new_text = apply_edit(SMALL_SILU, edit, uri)
        assert FUSED in new_text and "import neuronxcc.nki.isa as nisa" in new_text
        assert new_text.splitlines()[0] == "# accelopt: task=silu:small"  # only the rewritten lines changed
        editor.change(uri, new_text)
        editor.save(uri)
        report = await editor.profiled(uri)
        assert report["result"]["correct"] is True
        assert report["result"]["latency_ms"] < summary["base"]["latency_ms"]
        await wait_for(lambda: not editor.diagnostics(uri, "rewrite-available"), 10,
                       what="the offer for the old text to go")


async def test_optimize_is_cancelled_through_its_progress_token(workspace: Path, memory_db: Path) -> None:
    async with running_server(workspace, memory_db, init_options=SLEEPY) as editor:
        uri = editor.open(workspace / "silu_small.py", SMALL_SILU)
        await editor.profiled(uri)
        running = asyncio.ensure_future(editor.command("accelopt.optimize", uri))
        token = await wait_for(lambda: next(iter(editor.client.progress_reports), None), 30, what="a progress token")
        await wait_for(lambda: any(r.kind == "report" for r in editor.client.progress_reports[token]), 60,
                       what="the first evaluated candidate")
        titles = [lens.command.title for lens in await editor.lenses(uri) if lens.command]
        assert any(t.startswith("Optimizing") for t in titles), titles
        editor.client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
        summary = await asyncio.wait_for(running, timeout=30)  # the hanging candidates are killed
        assert summary["cancelled"] is True and summary["rewrites"] == []
        assert editor.client.progress_reports[token][-1].kind == "end"
        status = await editor.status()
        assert status["searchLane"]["crashed"] == 0 and status["searchLane"]["running"] == 0
        titles = [lens.command.title for lens in await editor.lenses(uri) if lens.command]
        assert "Optimize" in titles


VSCODE = {**SCRIPTED, "client": "vscode", "reportPanel": True, "secrets": {"llmApiKey": "sk-not-logged"}}


async def test_vscode_client_commands(workspace: Path, memory_db: Path) -> None:
    """As the VS Code extension drives it: results carry `message` (no window/showMessage), the report
    holds the search history, Apply Best Rewrite goes through workspace/applyEdit, Show Memory is markdown."""
    async with running_server(workspace, memory_db, init_options=VSCODE) as editor:
        uri = editor.open(workspace / "silu_small.py", SMALL_SILU)
        profiled = await editor.profiled(uri)
        nothing = await editor.command("accelopt.applyBestRewrite", uri)
        assert nothing["applied"] is False and "run Optimize first" in nothing["message"]

        refreshes = editor.client.lens_refreshes
        before = len(refreshes)
        summary = await editor.command("accelopt.optimize", uri)
        assert summary["message"].startswith("silu_small.py: best verified rewrite")
        assert len(refreshes) > before  # the "Optimizing… (stop)" lens goes away
        assert not [m for m in editor.client.messages if "best verified rewrite" in m.message]
        titles = [lens.command.title for lens in await editor.lenses(uri) if lens.command]
        assert "Optimize" in titles

        report = await editor.report(uri)
        assert report is not None
        history = report["history"]
        assert [h["iteration"] for h in history] == list(range(len(summary["history"]) + 1))
        # point 0 is the baseline, timed as the profile was
        assert history[0]["best_latency_ms"] == pytest.approx(profiled["result"]["latency_ms"], rel=1e-6)
        assert history[-1]["best_latency_ms"] == pytest.approx(summary["best"]["latency_ms"])

        shown = await editor.command("accelopt.showReport", uri)
        assert shown["text"] and editor.client.shown_documents == []  # the extension has its own panel

        applied = await editor.command("accelopt.applyBestRewrite", uri)
        assert applied["applied"] is True and "faster" in applied["message"]
        (edit,) = editor.client.applied_edits
        assert FUSED in apply_edit(SMALL_SILU, edit, uri)

        memory = await editor.command("accelopt.showMemory", uri)
        assert memory["markdown"].startswith("# AccelOpt memory: silu:small on trn1")
        assert "Recent searches" in memory["markdown"] and "| finished |" in memory["markdown"]
        logged = " ".join(m.message for m in editor.client.log_messages)
        assert "sk-not-logged" not in logged


async def test_optimize_offers_a_verified_rule_rewrite_of_a_compiler_style_kernel(workspace: Path,
                                                                                  memory_db: Path) -> None:
    """A kernel as the compiler writes it (block tensors, v-names, ISA calls), linked to a public-form
    reference by the NKIBench layout: the rule-based optimizer's rewrite comes back verified, as a code
    action whose edit gives a kernel that checks correct and runs faster."""
    kernel = (Path(__file__).parents[1] / "rules" / "kernels" / "compiler_swish.py").read_text()
    reference = (Path(__file__).parent / "swish_reference.py").read_text()
    new_text = await _optimize_and_apply(workspace, memory_db, "swish", kernel, reference, timeout=180)
    assert "nl.silu(" in new_text or "nisa.activation(" in new_text  # the chain became fewer instructions


async def test_optimize_offers_a_verified_rewrite_of_a_public_nkibench_kernel(workspace: Path,
                                                                              memory_db: Path) -> None:
    """The public NKIBench silu baseline (calibration set, unmodified) and its public-form reference, at
    full size: Optimize from the editor ends with a verified rewrite that applies and runs faster."""
    case = next((c for c in calibration_cases() if c["task"] == "silu"), None)
    if case is None:
        pytest.skip(ABSENT)
    kernel, reference = Path(case["kernel"]).read_text(), Path(case["reference"]).read_text()
    new_text = await _optimize_and_apply(workspace, memory_db, "silu", kernel, reference, timeout=300)
    assert new_text != kernel


async def _optimize_and_apply(workspace: Path, memory_db: Path, name: str, kernel: str, reference: str,
                              timeout: float) -> str:
    """Open kernels/NAME.py (reference/NAME.py beside it), run Optimize with the rules, apply the first
    rewrite's code action, check the saved kernel is correct and faster (each profile within `timeout`
    seconds); the rewritten text."""
    (workspace / "kernels").mkdir()
    (workspace / "reference").mkdir()
    (workspace / "reference" / f"{name}.py").write_text(reference)
    async with running_server(workspace, memory_db, init_options={"searchWorkers": 2}) as editor:
        uri = editor.open(workspace / "kernels" / f"{name}.py", kernel)
        profiled = await editor.profiled(uri, timeout=timeout)
        assert profiled["result"]["correct"] is True, profiled
        summary = await editor.command("accelopt.optimize", uri)
        assert not summary.get("error"), summary
        assert summary["speedup"] > 1.0 and summary["rewrites"], summary
        title = summary["rewrites"][0]["title"]
        assert title.startswith("Apply rewrite: ") and "checked on 5 seeds" in title

        hint = await wait_for(lambda: editor.diagnostics(uri, "rewrite-available"), 30, what="the rewrite hint")
        actions = await editor.actions(uri, hint[0].range.start.line + 1, hint)
        rewrite = next(a for a in actions if a.kind == types.CodeActionKind.RefactorRewrite and a.title == title)
        assert rewrite.edit is not None
        new_text = apply_edit(kernel, rewrite.edit, uri)
        editor.change(uri, new_text)
        editor.save(uri)
        report = await editor.profiled(uri, timeout=timeout)
        assert report["result"]["correct"] is True
        assert report["result"]["latency_ms"] < profiled["result"]["latency_ms"]
    return new_text


async def test_optimize_rewrites_the_kernel_the_directive_names(workspace: Path, memory_db: Path) -> None:
    """A tutorial file keeps every version of its kernel; `kernel=NAME` picks the one that is profiled and
    optimized, and the rewrite leaves the other versions as they were."""
    head, body = SILU.split("@nki.jit\n")
    versions = "".join(f"@nki.jit\n{body.replace('def kernel(', f'def silu_{v}(')}\n\n" for v in ("v1", "v2"))
    text = "# accelopt: task=silu:small kernel=silu_v2\n" + head + versions
    async with running_server(workspace, memory_db, init_options={"searchWorkers": 2}) as editor:
        uri = editor.open(workspace / "versions.py", text)
        profiled = await editor.profiled(uri)
        assert profiled["result"]["correct"] is True, profiled
        summary = await editor.command("accelopt.optimize", uri)
        assert not summary.get("error") and summary["rewrites"], summary
        hint = await wait_for(lambda: editor.diagnostics(uri, "rewrite-available"), 30, what="the rewrite hint")
        actions = await editor.actions(uri, hint[0].range.start.line + 1, hint)
        rewrite = next(a for a in actions if a.kind == types.CodeActionKind.RefactorRewrite)
        assert rewrite.edit is not None
        new_text = apply_edit(text, rewrite.edit, uri)
        before_v1, before_v2 = text.split("def silu_v2(")
        after_v1, after_v2 = new_text.split("def silu_v2(")
        assert after_v1.split("def silu_v1(")[1] == before_v1.split("def silu_v1(")[1]  # v1 as it was
        assert after_v2 != before_v2
