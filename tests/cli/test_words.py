"""The words of the reports: counts take their noun's number, a search's progress counts each
verdict apart, and the model's notes reach the text report as they reach the JSON."""

from __future__ import annotations

from accelopt_core.agents.base import Candidate
from accelopt_core.profiling import ProfileResult
from accelopt_core.report import counted, render
from accelopt_core.search.policy import tally


def _result(**fields: object) -> ProfileResult:
    return ProfileResult("k.py", "silu", "trn1", "simulator", **fields)  # type: ignore[arg-type]


def test_counts_take_the_number_of_their_noun() -> None:
    assert (counted(1, "seed"), counted(5, "seed"), counted(0, "evaluated candidate")) == (
        "1 seed", "5 seeds", "0 evaluated candidates")
    report = render(_result(correct=True, seeds=[7], rel_l2_error=0.0, max_abs_error=0.0))
    assert "correct on 1 seed (" in report


def test_progress_counts_checked_unchecked_and_wrong_apart() -> None:
    verdicts = [_result(correct=True), _result(correct=None), _result(correct=None), _result(correct=False),
                _result(error="boom")]
    said = tally([Candidate(str(i), str(i), r) for i, r in enumerate(verdicts)])
    assert said == "5 evaluated: 1 checked correct, 2 unchecked, 1 wrong, 1 failed"
    assert tally([]) == "0 evaluated"


def test_the_model_s_notes_are_in_the_text_report_as_in_the_json() -> None:
    note = "live SBUF peaks at 300000 B/partition, above the usable 180224 B: loaded blocks ..."
    report = render(_result(correct=None, latency_ms=1.0, bottleneck="dma", profile={"notes": [note]}))
    assert f"note      {note}" in report.splitlines()


def test_optimize_help_says_what_each_preset_is() -> None:
    from accelopt_core.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    text = " ".join(commands["optimize"].format_help().split())
    assert "quick (B=2 N=4 K=1 T=4, 300 s budget)" in text and "default (B=4 N=8 K=1 T=8, 540 s budget)" in text
    assert "paper (B=6 N=12 K=2 T=16, no time budget)" in text
