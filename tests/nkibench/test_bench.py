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
