"""adamw: the peak work at the full size matches the docs/nkibench.md formulas (0, 7MN, 20MN)."""

import numpy as np

from accelopt_core.tasks.registry import find_task


def test_peak_work_at_full_size() -> None:
    # M=10944, N=2048: theta, g, m and v are all [M, N]
    task = find_task("adamw")
    shapes = [(10944, 2048)] * 4
    work = task.peak_work([np.broadcast_to(np.float32(0), shape) for shape in shapes])
    assert work.mm_flops == 0
    assert work.vec_flops == 156893184
    assert work.hbm_bytes == 448266240
