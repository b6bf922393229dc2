"""`accelopt bench` as a user runs it: table, summary line, JSON and plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_small_prints_a_table_and_writes_json_and_plot(tmp_path: Path) -> None:
    out, plot = tmp_path / "bench.json", tmp_path / "peak.png"
    run = subprocess.run([sys.executable, "-m", "accelopt", "bench", "--small", "--tasks", "silu", "adamw",
                          "--json", str(out), "--plot", str(plot)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "geometric mean % of peak" in run.stdout and "silu" in run.stdout and "adamw" in run.stdout
    data = json.loads(out.read_text())
    assert [t["task"] for t in data["tasks"]] == ["silu", "adamw"]
    assert all(t["correct"] is True and t["peak_percent"] > 0 for t in data["tasks"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_rejects_unknown_tasks() -> None:
    run = subprocess.run([sys.executable, "-m", "accelopt", "bench", "--small", "--tasks", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "unknown NKIBench task" in run.stderr


def test_a_baseline_our_check_could_not_finish_reads_unchecked_not_failed() -> None:
    from accelopt_core.profiling import ProfileResult
    from nkibench.bench import BenchRow, format_table

    result = ProfileResult("lora.py", "lora", "trn1", "simulator", latency_ms=2.5, peak_percent=40.0,
                           unchecked="the check needs more than 1200 s here", unchecked_limit="seconds")
    row = format_table([BenchRow("lora", result, 1.0)], "trn1").splitlines()[3]
    assert row.startswith("lora") and "2.500 ms" in row and "unchecked" in row and "ERROR" not in row
