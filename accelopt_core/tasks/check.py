"""The correctness check's pieces: seeds a kernel cannot predict, and a full comparison of its outputs
with the reference (the profilers run the kernel; this judges what came back)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import numpy as np

DEFAULT_SEED_COUNT = 5


def fresh_seeds(count: int = DEFAULT_SEED_COUNT) -> list[int]:
    """Seeds the kernel cannot know in advance."""
    return [secrets.randbelow(2**31) for _ in range(count)]


def compare(outputs: Sequence[np.ndarray | None], expected: Sequence[np.ndarray], rtol: float
            ) -> tuple[float, float, str | None]:
    """Relative L2 error of the whole output (NKIBench's metric), max abs error, and why it fails."""
    if len(outputs) != len(expected):
        return np.inf, np.inf, f"kernel returned {len(outputs)} outputs, reference has {len(expected)}"
    worst_rel = worst_abs = 0.0
    for i, (out, ref) in enumerate(zip(outputs, expected, strict=True)):
        if out is None:
            return np.inf, np.inf, f"output {i} was not produced"
        if out.shape != ref.shape:
            return np.inf, np.inf, f"output {i} has shape {out.shape}, reference {ref.shape}"
        stats = _difference(out, ref)
        if stats is None:
            bad = int(np.size(out) - np.count_nonzero(np.isfinite(out)))
            return np.inf, np.inf, f"output {i} has {bad} NaN/inf values (uninitialised or overflowed)"
        diff_norm, ref_norm, max_abs = stats
        rel = diff_norm / ref_norm if ref_norm > 0 else diff_norm
        worst_rel = max(worst_rel, rel)
        worst_abs = max(worst_abs, max_abs)
    if worst_rel > rtol:
        return worst_rel, worst_abs, f"relative L2 error {worst_rel:.3g} exceeds tolerance {rtol:.3g}"
    return worst_rel, worst_abs, None


_CHUNK = 1 << 22  # elements per slice: float64 temporaries stay at tens of MB even for 1 GiB outputs


def _difference(out: np.ndarray, ref: np.ndarray) -> tuple[float, float, float] | None:
    """||out - ref||, ||ref|| and max |out - ref| in float64, slice by slice; None if out has NaN/inf."""
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    diff_sq = ref_sq = max_abs = 0.0
    for start in range(0, flat_out.size, _CHUNK):
        o = flat_out[start:start + _CHUNK].astype(np.float64)
        if not np.isfinite(o).all():
            return None
        r = flat_ref[start:start + _CHUNK].astype(np.float64)
        d = o - r
        diff_sq += float(np.dot(d, d))
        ref_sq += float(np.dot(r, r))
        max_abs = max(max_abs, float(np.abs(d).max(initial=0.0)))
    return diff_sq ** 0.5, ref_sq ** 0.5, max_abs

