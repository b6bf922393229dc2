"""NKIBench matmul: the baseline kernel passes the check, and the peak work matches nkibench.md."""

from pathlib import Path

import numpy as np

from accelopt_core.nki import load_kernel
from accelopt_core.tasks.check import check_kernel
from accelopt_core.tasks.registry import find_task, task_files

ROOT = Path(__file__).resolve().parents[2]


def test_small_baseline_is_correct_on_five_seeds() -> None:
    task = find_task("matmul:small")
    kernel = load_kernel(str(ROOT / "nkibench" / "kernels" / "matmul.py"))
    result = check_kernel(kernel, task, seeds=[1, 2, 3, 4, 5])
    assert result.correct, result.message
    assert task_files("matmul").kernel == str(ROOT / "nkibench" / "kernels" / "matmul.py")


def test_peak_work_at_full_size() -> None:
    task = find_task("matmul")
    # M=4096, K=5120, N=12288: zero-stride arrays of the full shapes, nothing big is allocated
    a = np.broadcast_to(np.float32(0), (4096, 5120))
    b = np.broadcast_to(np.float32(0), (5120, 12288))
    work = task.peak_work([a, b])
    assert work.mm_flops == 515_396_075_520  # 2MNK
    assert work.vec_flops == 0
    assert work.hbm_bytes == 536_870_912  # 4(MN + NK + MK) = 4 * 134,217,728
