"""Guards against kernels that game the check ("reward hacking"): facts from the kernel's own
trace that no honest kernel produces. Wrong outputs are caught by the comparison itself."""

from __future__ import annotations

from typing import Any

from ..tasks import PeakWork

# Counted traffic may fall short of the analytic figure only by rounding, never by skipped work.
_SLACK = 0.999


def guard_violation(facts: dict[str, Any], work: PeakWork | None) -> str | None:
    """Why the measured kernel cannot be trusted, or None."""
    if facts.get("returned_input"):
        return "the kernel returned one of its inputs instead of an output it wrote"
    line = facts.get("uninitialized_read")
    if line is not None:
        return f"line {line} reads an output tensor before anything was written to it"
    if work is None or work.counted:  # what a reference did, not a minimum: a kernel may do less honestly
        return None
    mm_flops = facts.get("hardware_flops", 0) - facts.get("transpose_flops", 0)
    if work.mm_flops and mm_flops < _SLACK * work.mm_flops:
        return (f"the kernel does {mm_flops:.3g} matmul flops, below the task's minimum of {work.mm_flops:.3g}: "
                "it skips work")
    moved = facts.get("hbm_read_bytes", 0) + facts.get("hbm_write_bytes", 0)
    if work.hbm_bytes and moved < _SLACK * work.hbm_bytes:
        return (f"the kernel moves {moved:.3g} bytes to and from HBM, below the {work.hbm_bytes:.3g} bytes "
                "every input and output needs: it skips work")
    return None
