"""Every number says where it came from, from the result's own backend: the performance model's are
"simulated", a Trainium host's (also through the profiling service) "measured"."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelopt_core.profiling import ProfileResult, measured_on
from accelopt_core.report import render
from accelopt_core.tasks.registry import task_files
from server.describe import line_markdown, summary_markdown
from server.features.code_lens import headline_title
from server.state import KernelDocument

LABELS = {"simulator": "simulated trn2", "neuron": "measured on trn2 (host)"}


def profiled(backend: str) -> ProfileResult:
    return ProfileResult("silu.py", "silu", "trn2", backend, correct=True, latency_ms=1.25, peak_percent=40.0,
                         rel_l2_error=1e-7, max_abs_error=1e-6,
                         bottleneck="vector", seeds=[1, 2],
                         lines=[{"line": 1, "time_ms": 0.5, "engine": "vector", "engines": {"vector": 0.5},
                                 "instructions": 3}])


def editor_document(result: ProfileResult) -> KernelDocument:
    source = "# accelopt: task=silu\n" + Path(task_files("silu").kernel).read_text()
    doc = KernelDocument.create("file:///nowhere/silu.py", source)
    doc.trace = doc.checked = result
    doc.profiled_source = source
    return doc


@pytest.mark.parametrize(("backend", "label"), LABELS.items())
def test_the_label_follows_the_backend(backend: str, label: str) -> None:
    result = profiled(backend)
    assert measured_on(result) == label
    assert label in render(result)
    doc = editor_document(result)
    assert label in (summary_markdown(doc) or "")
    assert label in (line_markdown(doc, 1) or "")
    assert label in (headline_title(doc) or "")
    other = next(text for text in LABELS.values() if text != label)
    assert other not in render(result) + (summary_markdown(doc) or "") + (headline_title(doc) or "")
