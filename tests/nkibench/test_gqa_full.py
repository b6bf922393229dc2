"""gqa_full: the peak work at the full size matches the docs/nkibench.md formulas
(4 B QH N^2 D, 5 B QH N^2, 4(2 B QH N D + 2 B KH N D))."""

import numpy as np

from accelopt_core.tasks.registry import find_task


def test_peak_work_at_full_size() -> None:
    # B=1, N=4096, QH=16, KH=8, D=128: q is [B, QH, D, N], k is [B, KH, D, N], v is [B, KH, N, D]
    task = find_task("gqa_full")
    shapes = [(1, 16, 128, 4096), (1, 8, 128, 4096), (1, 8, 4096, 128)]
    work = task.peak_work([np.broadcast_to(np.float32(0), shape) for shape in shapes])
    assert work.mm_flops == 137438953472
    assert work.vec_flops == 1342177280
    assert work.hbm_bytes == 100663296
