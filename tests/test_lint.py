"""The code base stays ruff clean (part of the suite so CI enforces it)."""

import subprocess
import sys
from pathlib import Path


def test_ruff_is_clean() -> None:
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--quiet", str(root)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
