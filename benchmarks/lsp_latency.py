"""Language server latency and footprint, measured from a real LSP client over stdio.

- initialize: from starting `python -m server` to the initialize response (median of --starts runs);
- hover and code lens round trips with a cached profile (p50 / p95 over --requests each);
- didSave -> diagnostics: after an edit that changes the kernel (so nothing is cached), the time until
  the trace-only profile is published, and until the checked one is, for the small and full-size
  silu and matmul NKIBench kernels (the check runs on the small variant);
- memory: server and worker RSS before and after --edits incremental edits (profiling on change).

Each measurement uses a fresh, temporary memory database. Usage:
    python benchmarks/lsp_latency.py [--requests 300] [--edits 5000] [--skip-full] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.uris import from_fs_path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "nkibench" / "kernels"


def plain(value: Any) -> Any:
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Session:
    """One server process and a minimal client that records diagnostics."""

    def __init__(self, workspace: Path, memory_db: Path, options: dict[str, Any] | None = None):
        self.workspace = workspace
        self.memory_db = memory_db
        self.options = options or {}
        self.client = LanguageClient("lsp-latency", "1")
        self.diagnostics: dict[str, list[tuple[float, list[Any]]]] = {}
        self.versions: dict[str, int] = {}
        self.pid = 0

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: types.PublishDiagnosticsParams) -> None:
            self.diagnostics.setdefault(params.uri, []).append((time.perf_counter(), list(params.diagnostics)))

        for method in (types.WINDOW_LOG_MESSAGE, types.WINDOW_SHOW_MESSAGE):
            self.client.feature(method)(lambda params: None)
        self.client.feature(types.WORKSPACE_CONFIGURATION)(lambda params: [None for _ in params.items])

    async def start(self) -> float:
        env = dict(os.environ, ACCELOPT_MEMORY_DB=str(self.memory_db))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        began = time.perf_counter()
        await self.client.start_io(sys.executable, "-m", "server", env=env)
        uri = from_fs_path(str(self.workspace))
        capabilities = types.ClientCapabilities(
            workspace=types.WorkspaceClientCapabilities(configuration=True),
            text_document=types.TextDocumentClientCapabilities(
                hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown])))
        await self.client.initialize_async(types.InitializeParams(
            capabilities=capabilities, root_uri=uri, process_id=os.getpid(), initialization_options=self.options,
            workspace_folders=[types.WorkspaceFolder(uri=uri or "", name="ws")]))
        seconds = time.perf_counter() - began
        self.client.initialized(types.InitializedParams())
        server = getattr(self.client, "_server", None)
        self.pid = server.pid if server is not None else 0
        return seconds

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), timeout=30)
        finally:
            self.client.exit(None)
            await self.client.stop()

    def open(self, path: Path, text: str) -> str:
        path.write_text(text)
        uri = from_fs_path(str(path)) or ""
        self.versions[uri] = 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        return uri

    def replace_all(self, uri: str, text: str) -> None:
        self.versions[uri] += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))

    def insert(self, uri: str, line: int, character: int, text: str) -> None:
        self.versions[uri] += 1
        where = types.Range(start=types.Position(line, character), end=types.Position(line, character))
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[types.TextDocumentContentChangePartial(range=where, text=text)]))

    def delete(self, uri: str, line: int, start: int, end: int) -> None:
        self.versions[uri] += 1
        where = types.Range(start=types.Position(line, start), end=types.Position(line, end))
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[types.TextDocumentContentChangePartial(range=where, text="")]))

    def save(self, uri: str) -> None:
        self.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))

    async def report(self, uri: str) -> dict[str, Any] | None:
        return plain(await self.client.protocol.send_request_async("accelopt/report", {"uri": uri}))

    async def status(self) -> dict[str, Any]:
        return plain(await self.client.protocol.send_request_async("accelopt/status", {}))

    async def wait_profiled(self, uri: str, checked: bool, timeout: float = 900.0) -> float:
        """Seconds until the report shows a (checked) profile of the current text; polls every 10 ms."""
        began = time.perf_counter()
        while time.perf_counter() - began < timeout:
            report = await self.report(uri)
            if report and not report["outdated"] and report["result"]:
                done = report["result"]["error"] or not checked or (
                    report["phase"] == "idle" and report["result"]["correct"] is not None)
                if done:
                    return time.perf_counter() - began
            await asyncio.sleep(0.01)
        raise TimeoutError(f"no profile of {uri} after {timeout:g} s")


def kernel_text(name: str, task: str) -> str:
    return f"# accelopt: task={task}\n" + (KERNELS / f"{name}.py").read_text()


async def measure_initialize(folder: Path, starts: int) -> dict[str, float]:
    times = []
    for index in range(starts):
        session = Session(folder, folder / f"init{index}.db")
        times.append(await session.start())
        await session.stop()
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


async def measure_requests(folder: Path, requests: int) -> dict[str, Any]:
    session = Session(folder, folder / "requests.db")
    await session.start()
    try:
        text = kernel_text("silu", "silu:small")
        uri = session.open(folder / "silu_small.py", text)
        await session.wait_profiled(uri, checked=True)
        lines = text.splitlines()
        def_line = next(i for i, line in enumerate(lines) if line.startswith("def kernel"))
        body_line = next(i for i, line in enumerate(lines) if "nl.load(" in line)
        hovers, lenses = [], []
        document = types.TextDocumentIdentifier(uri=uri)
        for index in range(requests):
            line = def_line if index % 2 else body_line
            began = time.perf_counter()
            result = await session.client.text_document_hover_async(types.HoverParams(
                text_document=document, position=types.Position(line, 5)))
            hovers.append(1000 * (time.perf_counter() - began))
            assert result is not None
            began = time.perf_counter()
            found = await session.client.text_document_code_lens_async(types.CodeLensParams(text_document=document))
            lenses.append(1000 * (time.perf_counter() - began))
            assert found
        return {name: {"p50_ms": percentile(samples, 50), "p95_ms": percentile(samples, 95),
                       "max_ms": max(samples), "n": len(samples)}
                for name, samples in (("hover", hovers), ("code_lens", lenses))}
    finally:
        await session.stop()


async def measure_save(folder: Path, name: str, task: str) -> dict[str, float]:
    """Open (and fully profile) the kernel, then change it so nothing is cached, save, and time the
    trace-only and checked profiles of the new text."""
    session = Session(folder, folder / f"save-{name}-{task.replace(':', '-')}.db", {"debounceMs": 0})
    await session.start()
    try:
        text = kernel_text(name, task)
        uri = session.open(folder / f"{name}_{task.replace(':', '_')}.py", text)
        await session.wait_profiled(uri, checked=True)
        await asyncio.sleep(0.5)  # the old text's last publication is in: anything later is the new profile's
        # A blank line under the directive: a new kernel text (nothing cached). With profiling on save, the
        # server publishes nothing for the edit itself, only for the profile that the save starts.
        lines = text.splitlines(keepends=True)
        session.replace_all(uri, lines[0] + "\n" + "".join(lines[1:]))
        began = time.perf_counter()
        session.save(uri)
        trace = await session.wait_profiled(uri, checked=False)
        checked = await session.wait_profiled(uri, checked=True)
        await asyncio.sleep(0.2)
        after = [(t - began, sorted(d.range.start.line for d in items))
                 for t, items in session.diagnostics.get(uri, []) if t >= began]
        final = after[-1][1] if after else None
        # first: the trace-only profile's findings; complete: the rule quick fixes planned for it are in too
        return {"trace_s": trace, "checked_s": trace + checked,
                "first_diagnostics_s": after[0][0] if after else float("nan"),
                "diagnostics_with_fixes_s": next((t for t, lines in after if lines == final), float("nan"))}
    finally:
        await session.stop()


async def measure_edits(folder: Path, edits: int) -> dict[str, Any]:
    session = Session(folder, folder / "edits.db", {"profileOn": "change", "debounceMs": 300})
    await session.start()
    try:
        text = kernel_text("silu", "silu:small")
        uri = session.open(folder / "typing.py", text)
        await session.wait_profiled(uri, checked=True)
        status = await session.status()
        before = {"server": rss_mb(session.pid), "worker": status["profileLane"]["workerRssMb"],
                  "jobs": status["counters"].get("profile_jobs", 0)}
        line = len(text.splitlines())  # type at the end of the file, in a comment
        session.insert(uri, line, 0, "# ")
        began = time.perf_counter()
        samples = []
        column = 2
        for index in range(edits):
            if index % 40 == 39:  # a word typed: delete it again so the file stays small
                session.delete(uri, line, 2, column)
                column = 2
            else:
                session.insert(uri, line, column, "x")
                column += 1
            if index % 25 == 24:
                await asyncio.sleep(0.005)  # a fast typist, not one giant batch
            if index % 1000 == 999:
                samples.append(rss_mb(session.pid))
        typing_s = time.perf_counter() - began
        await session.wait_profiled(uri, checked=True)
        status = await session.status()
        after = {"server": rss_mb(session.pid), "worker": status["profileLane"]["workerRssMb"],
                 "jobs": status["counters"].get("profile_jobs", 0)}
        return {"edits": edits, "typing_s": typing_s, "server_rss_before_mb": before["server"],
                "server_rss_after_mb": after["server"], "server_rss_samples_mb": samples,
                "worker_rss_before_mb": before["worker"], "worker_rss_after_mb": after["worker"],
                "profile_jobs_during_edits": after["jobs"] - before["jobs"],
                "profiles_cancelled": status["counters"].get("profiles_cancelled", 0)}
    finally:
        await session.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lsp-latency-") as tmp:
        folder = Path(tmp)
        results["initialize"] = await measure_initialize(folder, args.starts)
        print(f"initialize       median {results['initialize']['median_s'] * 1000:.0f} ms "
              f"(min {results['initialize']['min_s'] * 1000:.0f}, max {results['initialize']['max_s'] * 1000:.0f})",
              flush=True)
        results["requests"] = await measure_requests(folder, args.requests)
        for name, stats in results["requests"].items():
            print(f"{name:<16} p50 {stats['p50_ms']:.1f} ms  p95 {stats['p95_ms']:.1f} ms  max {stats['max_ms']:.1f} ms"
                  f"  (n={stats['n']}, cached profile)", flush=True)
        cases = [("silu", "silu:small"), ("matmul", "matmul:small")]
        if not args.skip_full:
            cases += [("silu", "silu"), ("matmul", "matmul")]
        results["save"] = {}
        for name, task in cases:
            stats = await measure_save(folder, name, task)
            results["save"][task] = stats
            print(f"didSave {task:<13} diagnostics {stats['first_diagnostics_s']:.2f} s (with rule quick fixes "
                  f"{stats['diagnostics_with_fixes_s']:.2f} s); profile trace-only {stats['trace_s']:.2f} s, "
                  f"checked {stats['checked_s']:.2f} s", flush=True)
        results["edits"] = await measure_edits(folder, args.edits)
        edits = results["edits"]
        samples = ", ".join(f"{value:.0f}" for value in edits["server_rss_samples_mb"])
        print(f"{edits['edits']} edits in {edits['typing_s']:.1f} s: server RSS {edits['server_rss_before_mb']:.0f} -> "
              f"{edits['server_rss_after_mb']:.0f} MB (every 1000 edits: {samples}),"
              f" worker {edits['worker_rss_before_mb']:.0f} -> {edits['worker_rss_after_mb']:.0f} MB, "
              f"{edits['profile_jobs_during_edits']} profile jobs, {edits['profiles_cancelled']} cancelled", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=5, help="server starts for the initialize time")
    parser.add_argument("--requests", type=int, default=300, help="hover and code lens requests each")
    parser.add_argument("--edits", type=int, default=5000, help="scripted edits for the memory run")
    parser.add_argument("--skip-full", action="store_true", help="skip the full-size silu and matmul saves")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
