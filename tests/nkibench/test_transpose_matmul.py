"""NKIBench transpose_matmul: the peak work matches docs/nkibench.md."""

import numpy as np

from accelopt_core.tasks.registry import find_task


def test_peak_work_at_full_size() -> None:
    task = find_task("transpose_matmul")
    # K=2048, M=4096, N=10944; A is stored K x M
    a = np.broadcast_to(np.float32(0), (2048, 4096))
    b = np.broadcast_to(np.float32(0), (2048, 10944))
    work = task.peak_work([a, b])
    assert work.mm_flops == 183_609_851_904  # 2MNK
    assert work.vec_flops == 0
    assert work.hbm_bytes == 302_514_176  # 4(MN + NK + MK) = 4 * 75,628,544
