"""mamba: the peak work at the full size matches the docs/nkibench.md formulas (0, 8MCS, 4(2CM + CS + 2SM + CM))."""

import numpy as np

from accelopt_core.tasks.registry import find_task


def test_peak_work_at_full_size() -> None:
    # M=7168, C=256, S=16: delta and u are [C, M], A is [C, S], B and C are [S, M]
    task = find_task("mamba")
    shapes = [(256, 7168), (256, 7168), (256, 16), (16, 7168), (16, 7168)]
    work = task.peak_work([np.broadcast_to(np.float32(0), shape) for shape in shapes])
    assert work.mm_flops == 0
    assert work.vec_flops == 234881024
    assert work.hbm_bytes == 22953984
