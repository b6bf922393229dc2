"""A kernel the trusted side could not check within its own limits, as the editor shows it: the lens and the
hover keep its timing and say it is unchecked and which setting raises the limit; no "kernel fails", no error
diagnostic, only a note. Its profiles are the real profiler's, on silu with a tiny check budget."""

from __future__ import annotations

import pytest
from lsp_client import SMALL_SILU

from accelopt_core.profiling import ProfileResult, SandboxLimits, SimulatorProfiler, TaskRef
from server.describe import check_text, report, summary_markdown
from server.features.code_lens import headline_title
from server.findings import ERROR, INFO, from_results
from server.format import headline
from server.state import KernelDocument

SETTING = "raise it with the sandboxMemoryMb setting"


@pytest.fixture(scope="module")
def profiles() -> tuple[ProfileResult, ProfileResult]:
    """silu:small traced, then its check out of our memory (1 MiB)."""
    profiler = SimulatorProfiler(seeds=2, limits=SandboxLimits(check_memory_mb=1), cache={})
    trace = profiler.profile(SMALL_SILU, TaskRef("silu:small"), check=False)
    checked = profiler.profile(SMALL_SILU, TaskRef("silu:small"))
    assert trace.latency_ms and checked.unchecked and checked.latency_ms and checked.error is None
    return trace, checked


def document(trace: ProfileResult, checked: ProfileResult | None) -> KernelDocument:
    doc = KernelDocument.create("file:///work/kernels/silu.py", SMALL_SILU)
    doc.profiled_source, doc.trace, doc.checked = SMALL_SILU, trace, checked
    return doc


def test_the_lens_keeps_the_timing_and_says_unchecked(profiles: tuple[ProfileResult, ProfileResult]) -> None:
    title = headline_title(document(*profiles)) or ""
    assert title.startswith(headline(profiles[1]))  # the checked run's timing, "14.7 µs · 32% of peak · ..."
    assert title.endswith(" · unchecked: the check needs more than 1 MB here")
    assert "fails" not in title


def test_the_hover_keeps_its_numbers_and_names_the_setting(profiles: tuple[ProfileResult, ProfileResult]) -> None:
    doc = document(*profiles)
    hover = summary_markdown(doc) or ""
    assert "| latency |" in hover and "fails" not in hover
    assert check_text(doc) == f"unchecked: the check needs more than 1 MB here ({SETTING})"
    assert SETTING in report(doc, "trn1", "simulator")["text"]


def test_no_error_diagnostic_only_a_note(profiles: tuple[ProfileResult, ProfileResult]) -> None:
    trace, checked = profiles
    doc = document(trace, checked)
    findings = from_results(doc.info, trace, checked, None)
    assert not [f for f in findings if f.severity == ERROR]
    (note,) = [f for f in findings if f.code == "unchecked"]
    assert note.severity == INFO and SETTING in note.message


def test_a_timing_out_of_our_limits_says_so_in_the_lens_and_hover() -> None:
    untimed = SimulatorProfiler(limits=SandboxLimits(check_seconds=0), cache={}).profile(
        SMALL_SILU, TaskRef("silu:small"), check=False)
    doc = document(untimed, None)
    assert headline_title(doc) == "unchecked: the timing needs more than 0 s here"
    assert "raise it with the sandboxSeconds setting" in (summary_markdown(doc) or "")
