"""A client nobody here wrote: headless Neovim's built-in LSP client opens a kernel and prints the
diagnostics, hover and code lenses it received. Neovim is installed from Debian when missing
(scripts/ensure-debian-packages; see docs/neovim.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from lsp_client import SMALL_SILU, line_of, server_environment

PROBE = Path(__file__).parent / "neovim" / "probe.lua"


def test_neovim_receives_diagnostics_hover_and_lenses(workspace: Path, memory_db: Path,
                                                       debian_tool: Callable[[str, str], str]) -> None:
    nvim = debian_tool("nvim", "neovim")
    kernel = workspace / "silu_small.py"
    kernel.write_text(SMALL_SILU)
    env = server_environment(memory_db)
    env.update(PROBE_PYTHON=sys.executable, PROBE_ROOT=str(workspace), PROBE_KERNEL=str(kernel),
               PROBE_LINE=str(line_of(SMALL_SILU, "def kernel")), HOME=str(workspace.parent),
               XDG_STATE_HOME=str(workspace.parent / "state"), XDG_DATA_HOME=str(workspace.parent / "data"))
    run = subprocess.run([nvim, "--headless", "--clean", "-n", "-c", f"luafile {PROBE}"], env=env,
                         capture_output=True, text=True, timeout=150, cwd=workspace)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no output from Neovim (exit {run.returncode}):\n{run.stdout}\n{run.stderr}"
    seen = json.loads(lines[-1])
    print(json.dumps(seen, indent=2, ensure_ascii=False))  # what Neovim received, for the test log
    assert seen["waited"] and seen["diagnostics"]
    assert all(d["message"] for d in seen["diagnostics"])
    assert "| latency |" in seen["hover"] and "| % of peak |" in seen["hover"]
    assert seen["lenses"] and " · simulated trn1 · " in seen["lenses"][0] and "Optimize" in seen["lenses"]
    assert os.path.exists(memory_db)
