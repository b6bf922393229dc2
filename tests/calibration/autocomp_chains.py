"""The two trn1 optimization chains of shared/calibration/autocomp against the model.

Seventeen versions of the tutorial BF16 matmul and of single-head attention, each a rewrite of its parent,
timed on a trn1 (README there). Shared by tests/calibration/test_autocomp_chains.py and
benchmarks/calibration.py: every prediction is a trace-only run of the unmodified version at the
reference's full size, estimated on trn1 and memoised per version. Where the set is absent, `versions()` is
empty and callers skip with `ABSENT`.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration_set import calibration_dir

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
from accelopt_core.perfmodel import PerfReport, estimate
from accelopt_core.tasks.task import load_reference

ABSENT = ("the autocomp chains (shared/calibration/autocomp/cases.json) are not beside this checkout; set "
          "ACCELOPT_CALIBRATION to the calibration folder to run these")
# a step counts as an improvement when trn1 measured the child faster by more than this share
STEP_MARGIN = 0.05


@dataclass(frozen=True)
class Version:
    """One version of a chain: where its code is and what trn1 measured."""

    trace: str
    index: int
    parent: int | None
    measured_ms: float
    kernel: Path
    function: str
    reference: Path

    @property
    def name(self) -> str:
        return f"{self.trace}/{self.index:02d}"


def versions() -> list[Version]:
    """Every version of both chains, in file order; [] where the set is absent."""
    folder = calibration_dir()
    path = folder / "autocomp" / "cases.json" if folder else None
    if path is None or not path.is_file():
        return []
    data = json.loads(path.read_text())
    entries = data["cases"] if isinstance(data, dict) else data
    return [Version(e["trace"], e["index"], e["parent_index"], e["measured_ms"], path.parent / e["kernel_file"],
                    e["kernel_name"], path.parent / e["reference_file"]) for e in entries]


@functools.cache
def predicted(version: Version) -> PerfReport:
    """The model's report for the version, as `accelopt profile --no-check` times it at the full size."""
    reference = load_reference(str(version.reference), variant="full")
    specs = [TensorSpec.of(a) for a in reference.make_case(0).inputs]
    run = run_kernel(load_kernel(str(version.kernel), version.function), specs, reference.launch.kernel_args,
                     numeric=False)
    return estimate(run.trace, load_hardware("trn1"))


def error(version: Version) -> float:
    """(predicted - measured) / measured latency."""
    return predicted(version).latency_ms / version.measured_ms - 1


def improvements(chain: list[Version]) -> list[tuple[Version, Version]]:
    """(parent, child) steps the hardware measured faster by more than STEP_MARGIN."""
    by_index = {(v.trace, v.index): v for v in chain}
    steps = []
    for child in chain:
        parent = by_index.get((child.trace, child.parent)) if child.parent is not None else None
        if parent is not None and child.measured_ms < (1 - STEP_MARGIN) * parent.measured_ms:
            steps.append((parent, child))
    return steps


def summary(chain: list[Version]) -> dict[str, float]:
    """Median |error| and the share of measured improvements predicted faster."""
    steps = improvements(chain)
    faster = sum(predicted(child).latency < predicted(parent).latency for parent, child in steps)
    return {"median_abs_error": statistics.median(abs(error(v)) for v in chain),
            "improvements": len(steps), "predicted_faster": faster}
