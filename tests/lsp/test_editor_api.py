"""The editor's typed interface to the engine: its messages cross the process boundary as dicts and come back
the same, a message that does not fit its dataclass is refused, and the rules' libcst analysis runs in the
worker, never in the language server's process."""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest
from lsp_client import ROOT

from accelopt_core.editor_api import (
    AnalyzeReply,
    AnalyzeRequest,
    FixesRequest,
    KernelRequest,
    LLMRequest,
    OptimizeReply,
    OptimizeRequest,
    ProfileReply,
    ProfileRequest,
    ProfileResult,
    ProfilerSettings,
    RepeatedLoad,
    TaskRef,
    message_from_dict,
)

SILU = TaskRef(name="silu")


def crossed(message: object) -> object:
    """`message` as the other process reads it: its dict pickled, unpickled and rebuilt."""
    return message_from_dict(pickle.loads(pickle.dumps(message.to_dict())))  # type: ignore[attr-defined]


def test_every_message_comes_back_as_it_was_sent() -> None:
    kernel = {"source": "def k(): pass\n", "task": SILU, "hardware": "trn2", "profiler": ProfilerSettings(seeds=2),
              "memory_db": "/tmp/m.db", "label": "/ws/k.py", "kernel_name": "k"}
    result = ProfileResult("k.py", "silu", "trn2", "simulator", latency_ms=1.5)
    sent = [ProfileRequest(**kernel, check=True), ProfileReply(result), ProfileReply(task_error="no such task"),
            FixesRequest(**kernel, profile=result, limit=2, rule_specs=("m:rules",), seconds=5.0),
            AnalyzeRequest("def k(): pass\n", "k"), AnalyzeReply((RepeatedLoad(3, 2, ("i",)),)),
            OptimizeRequest(**kernel, preset="quick", llm=LLMRequest("http://x", "m")),
            OptimizeReply(error="no task", notes=("LLM planner not used",))]
    for message in sent:
        assert crossed(message) == message


def test_a_message_that_does_not_fit_its_dataclass_is_refused() -> None:
    with pytest.raises(KeyError):
        message_from_dict({"kind": "rewrite-everything"})
    with pytest.raises(TypeError):
        message_from_dict({**AnalyzeRequest("x").to_dict(), "payload": {}})
    with pytest.raises(TypeError):
        message_from_dict({"kind": "analyze"})  # no source


def test_the_rules_analysis_runs_in_the_worker_and_libcst_never_loads_in_the_server(tmp_path: Path) -> None:
    """A session profiles nkibench's matmul (one load repeats in a loop) with its real worker lanes: the
    repeated-load diagnostic comes, and the server's process has not imported libcst."""
    script = textwrap.dedent(f"""
        import asyncio, sys
        from server.config import Settings
        from server.features.diagnostics import findings
        from server.session import Session

        async def main() -> None:
            session = Session(Settings(memory_db={str(tmp_path / "m.db")!r}, max_quick_fixes=1))
            session.ready.set()
            path = {str(ROOT / "nkibench" / "kernels" / "matmul.py")!r}
            doc = session.open("file://" + path, open(path).read(), 1)
            for _ in range(1200):
                if doc.repeated_loads and doc.phase == "idle":
                    break
                await asyncio.sleep(0.1)
            codes = sorted({{f.code for f in findings(doc)}})
            await session.shutdown()
            print(repr((codes, "libcst" in sys.modules)))

        asyncio.run(main())
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    codes, libcst_loaded = ast.literal_eval(run.stdout.strip().splitlines()[-1])
    assert "repeated-load" in codes and libcst_loaded is False


def test_an_optimize_request_is_a_kernel_request_with_its_own_fields_by_keyword() -> None:
    """The kernel's fields are declared once (KernelRequest); the search's follow them, keyword-only."""
    kernel_fields = [item.name for item in fields(KernelRequest)]
    assert issubclass(OptimizeRequest, KernelRequest)
    assert [item.name for item in fields(OptimizeRequest)][:len(kernel_fields)] == kernel_fields
    with pytest.raises(TypeError):
        OptimizeRequest("def k(): pass\n", SILU, "trn1", ProfilerSettings(), None, "k.py", None, "quick")  # type: ignore[misc]


def test_the_editors_search_runs_its_candidates_as_the_users_file(tmp_path: Path) -> None:
    """A kernel importing its package's helpers (as the nki-library's do) is searched from the editor as from the
    command line: the worker hands the file's path to the search, which profiles every candidate as that file."""
    import threading

    from server.worker import optimize_job

    package = tmp_path / "lib"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sizes.py").write_text("ROW_TILE = 128\n")
    kernel = package / "scale.py"
    kernel.write_text(textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        from .sizes import ROW_TILE


        @nki.jit
        def kernel(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            for r in nl.affine_range(a.shape[0] // ROW_TILE):
                x = nl.load(a[r * ROW_TILE:(r + 1) * ROW_TILE, :])
                nl.store(out[r * ROW_TILE:(r + 1) * ROW_TILE, :], value=nl.exp(x))
            return out
    '''))
    (tmp_path / "ref.py").write_text(textwrap.dedent('''
        import numpy as np


        def make_inputs(rng, rows=256, cols=512):
            return [rng.standard_normal((rows, cols)).astype(np.float32)]


        def reference(a):
            return np.exp(a.astype(np.float64))
    '''))
    request = OptimizeRequest(kernel.read_text(), TaskRef(reference=str(tmp_path / "ref.py")), "trn1",
                              ProfilerSettings(), str(tmp_path / "m.db"), str(kernel), preset="quick", workers=1)
    reply = optimize_job(request, threading.Event(), lambda _event: None)
    assert reply.error is None and reply.search is not None
    assert reply.search.base.result.error is None and reply.search.base.result.correct is True
