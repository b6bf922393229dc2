"""The trn1 model on the two autocomp chains (shared/calibration/autocomp): the tutorial BF16 matmul and
single-head attention, each version a rewrite of its parent, timed on trn1.

Every version runs unmodified without an internal error; over both chains the median latency error stays
within issue 37's bar (20 %); of the rewrites trn1 measured faster, the model predicts at least the ones it
does today faster (7 of 11; issue 37's bar is 80 %: it misses attention 02 -> 03, whose 02 keeps a
512 KiB/partition QK block in PSUM that the model does not spill; 06 -> 07, the same code timed 15 % apart;
07 -> 08, whose 128-element Scalar/Vector instructions wait on each other across engines and still pay their
static overhead in the model; and matmul 04 -> 05); and no version's physical floor is above its measured time.
`python3 benchmarks/calibration.py` prints the table.
"""

from __future__ import annotations

import pytest
from autocomp_chains import ABSENT, error, improvements, predicted, summary, versions

VERSIONS = versions()
pytestmark = pytest.mark.skipif(not VERSIONS, reason=ABSENT)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
def test_runs_unmodified_and_its_floor_is_below_the_measurement(version) -> None:
    report = predicted(version)
    assert report.latency > 0 and report.instruction_count > 0
    assert 1e3 * report.physical_floor_time < version.measured_ms


def test_median_error_over_both_chains_meets_the_bar() -> None:
    assert summary(VERSIONS)["median_abs_error"] <= 0.20, [(v.name, round(error(v), 3)) for v in VERSIONS]


def test_measured_improvements_are_predicted_faster() -> None:
    result = summary(VERSIONS)
    assert len(improvements(VERSIONS)) == 11
    assert result["predicted_faster"] >= 9, result
