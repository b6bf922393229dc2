"""The hover shows on a line what the latency assumes the compiler does there (a repeated load removed),
and the kernel-name hover and the text report list every assumption: a new user could not tell why a
tiled matmul with two loops swapped was predicted faster than the hand-blocked one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
from accelopt_core.perfmodel import estimate
from accelopt_core.perfmodel.assumptions import REPEATED_LOAD
from accelopt_core.profiling import ProfileResult
from accelopt_core.report import render
from server.describe import line_markdown, summary_markdown
from server.state import KernelDocument

KERNEL = """import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x, y):
    out = nl.ndarray((4, 128, 256), dtype=np.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        scale = nl.load(y)
        tile = nl.load(x[i])
        nl.store(out[i], value=nl.multiply(tile, scale))
    return out
"""
LOOP_LINE, REPEATED_LINE, FRESH_LINE = 9, 10, 11


def profiled_document(tmp_path: Path) -> KernelDocument:
    """The kernel as the editor holds it, with the simulator's profile of it on trn1."""
    path = tmp_path / "kernel.py"
    path.write_text(KERNEL)
    specs = [TensorSpec((4, 128, 256), np.dtype(np.float32)), TensorSpec((128, 256), np.dtype(np.float32))]
    trace = run_kernel(load_kernel(str(path)), specs, {}, numeric=False).trace
    profile = estimate(trace, load_hardware("trn1")).to_dict()
    result = ProfileResult(str(path), "kernel", "trn1", "simulator", latency_ms=profile.pop("latency_ms"),
                           bottleneck=profile.pop("bottleneck"), lines=profile.pop("lines"), profile=profile)
    doc = KernelDocument.create(path.as_uri(), KERNEL)
    doc.trace = result
    doc.profiled_source = KERNEL
    return doc


def test_the_hover_on_a_repeated_load_says_it_is_assumed_removed_with_its_bytes(tmp_path: Path) -> None:
    doc = profiled_document(tmp_path)
    text = line_markdown(doc, REPEATED_LINE) or ""
    assert f"- assumes {REPEATED_LOAD}: 3 times this line loads HBM data" in text
    assert f"{3 * 128 * 256 * 4:,} bytes not moved" in text


def test_lines_without_an_assumption_do_not_mention_one(tmp_path: Path) -> None:
    doc = profiled_document(tmp_path)
    for line in (LOOP_LINE, FRESH_LINE):
        text = line_markdown(doc, line)
        assert text and "assumes" not in text


def test_the_kernel_hover_and_the_text_report_list_the_assumptions(tmp_path: Path) -> None:
    doc = profiled_document(tmp_path)
    assert f"| compiler assumed | {REPEATED_LOAD} (line {REPEATED_LINE})" in (summary_markdown(doc) or "")
    assert f"assumes   line {REPEATED_LINE}: {REPEATED_LOAD}: 3 times" in render(doc.result)  # type: ignore[arg-type]
