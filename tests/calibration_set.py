"""Where the public calibration set lives (kernels measured on trn1, see docs/calibration.md).

It is data outside the project: tests and benchmarks that read it find it beside the checkout (or set
ACCELOPT_CALIBRATION to its folder) and skip with this module's reason where it is absent."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ABSENT = ("the public calibration set (shared/calibration with cases.json) is not beside this checkout; "
          "set ACCELOPT_CALIBRATION to its folder to run these")


def calibration_dir() -> Path | None:
    """The calibration folder: $ACCELOPT_CALIBRATION, else `shared/calibration` in the checkout's parent
    or grandparent folder (a git worktree one level further down); None where there is none."""
    named = os.environ.get("ACCELOPT_CALIBRATION")
    candidates = [Path(named)] if named else [ROOT.parent / "shared" / "calibration",
                                             ROOT.parent.parent / "shared" / "calibration"]
    return next((c for c in candidates if (c / "cases.json").is_file()), None)


def calibration_cases() -> list[dict[str, Any]]:
    """Every case of cases.json with its `kernel` and `reference` made absolute paths; [] when absent."""
    folder = calibration_dir()
    if folder is None:
        return []
    cases = json.loads((folder / "cases.json").read_text())["cases"]
    return [{**case, "kernel": str(folder / case["kernel"]), "reference": str(folder / case["reference"])}
            for case in cases]
