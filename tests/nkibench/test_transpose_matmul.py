"""NKIBench transpose_matmul: the baseline kernel passes the check (ragged last column tile included),
and the peak work matches nkibench.md."""

from pathlib import Path

import numpy as np

from accelopt_core.nki import load_kernel
from accelopt_core.tasks.check import check_kernel
from accelopt_core.tasks.registry import find_task

ROOT = Path(__file__).resolve().parents[2]


def test_small_baseline_is_correct_on_five_seeds() -> None:
    task = find_task("transpose_matmul:small")
    assert task.make_case(0).inputs[1].shape[1] % 512 != 0  # the small size keeps a ragged tile
    kernel = load_kernel(str(ROOT / "nkibench" / "kernels" / "transpose_matmul.py"))
    result = check_kernel(kernel, task, seeds=[1, 2, 3, 4, 5])
    assert result.correct, result.message


def test_peak_work_at_full_size() -> None:
    task = find_task("transpose_matmul")
    # K=2048, M=4096, N=10944; A is stored K x M
    a = np.broadcast_to(np.float32(0), (2048, 4096))
    b = np.broadcast_to(np.float32(0), (2048, 10944))
    work = task.peak_work([a, b])
    assert work.mm_flops == 183_609_851_904  # 2MNK
    assert work.vec_flops == 0
    assert work.hbm_bytes == 302_514_176  # 4(MN + NK + MK) = 4 * 75,628,544
