"""% of peak from a reference's counted NumPy work (accelopt_core/tasks/work.py), against the hand formulas.

Default: the public NKIBench references of the calibration set (`get_inputs`/`forward`), which declare no peak.
For every case of ../shared/calibration it prints the counted work, how far it is from the hand formula of
docs/nkibench.md (our NKIBench reference's peak_work at the same sizes), the best possible time on trn1 and
what bounds it, trn1's measured latency and the % of peak that latency means. The references run at their
full sizes: about a minute and 4 GiB of memory.

`--ours small` (or `full`): our 14 NKIBench references at that size, each one's declared peak_work against
its own counted work (tests/nkibench/test_counted_work.py pins the same).

Usage: python3 benchmarks/reference_peaks.py [task ...]   |   python3 benchmarks/reference_peaks.py --ours small
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from calibration_set import ABSENT, calibration_cases  # noqa: E402

from accelopt_core.blas import single_threaded_blas  # noqa: E402
from accelopt_core.hardware import load_hardware  # noqa: E402
from accelopt_core.tasks import PeakWork, load_reference  # noqa: E402
from accelopt_core.tasks.registry import all_task_files, find_task  # noqa: E402


def best_time(work: PeakWork) -> tuple[float, str]:
    """Seconds at trn1's peak rates, and which of the three bounds it."""
    peak = load_hardware("trn1").peak
    times = {"matmul": work.mm_flops / peak.matmul_flops, "vector": work.vec_flops / peak.vector_flops,
             "memory": work.hbm_bytes / peak.hbm_bandwidth}
    bound = max(times, key=lambda k: times[k])
    return times[bound], bound


def difference(counted: float, declared: float) -> str:
    return "=" if counted == declared else f"{100 * (counted - declared) / declared:+.1f}%" if declared else "new"


def ours(variant: str) -> None:
    print(f"{'task':24} {'':9} {'declared':>16} {'counted':>16} {'diff':>8}   best time declared / counted")
    for name, files in all_task_files().items():
        if "nkibench" not in files.reference:
            continue
        task = find_task(f"{name}:{variant}")
        case = task.make_case(0)
        assert task.peak_work is not None
        declared, counted = task.peak_work(case.inputs), case.counted_work()
        assert counted is not None
        for index, field in enumerate(("mm_flops", "vec_flops", "hbm_bytes")):
            times = (f"   {best_time(declared)[0] * 1e6:.2f} / {best_time(counted)[0] * 1e6:.2f} us "
                     f"({best_time(counted)[1]})" if index == 0 else "")
            print(f"{name if index == 0 else '':24} {field:9} {getattr(declared, field):16,.0f} "
                  f"{getattr(counted, field):16,.0f} {difference(getattr(counted, field), getattr(declared, field)):>8}"
                  f"{times}", flush=True)


def main(wanted: list[str]) -> None:
    cases = calibration_cases()
    if not cases:
        sys.exit(ABSENT)
    single_threaded_blas()
    print(f"{'task':20} {'mm GFLOP':>9} {'vec MFLOP':>10} {'MiB':>7}  {'vs nkibench.md (mm/vec/bytes)':30} "
          f"{'best us':>8} {'bound':7} {'trn1 ms':>8} {'% of peak':>9} {'count s':>7}")
    for case in cases:
        if wanted and case["task"] not in wanted:
            continue
        began = time.perf_counter()
        counted = load_reference(case["reference"]).counted_work()
        seconds = time.perf_counter() - began
        if counted is None:
            print(f"{case['task']:20} not counted")
            continue
        ours = find_task(case["task"])
        assert ours.peak_work is not None
        declared = ours.peak_work(ours.make_case(0).inputs)
        best, bound = best_time(counted)
        measured = case["measured_trn1"]["latency"]
        versus = " / ".join(difference(getattr(counted, f), getattr(declared, f))
                            for f in ("mm_flops", "vec_flops", "hbm_bytes"))
        print(f"{case['task']:20} {counted.mm_flops / 1e9:9.2f} {counted.vec_flops / 1e6:10.2f} "
              f"{counted.hbm_bytes / 2**20:7.1f}  {versus:30} {best * 1e6:8.1f} {bound:7} {measured:8.3f} "
              f"{100 * best / (measured / 1e3):8.1f}% {seconds:7.1f}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--ours"]:
        single_threaded_blas()
        ours(sys.argv[2] if len(sys.argv) > 2 else "small")
    else:
        main(sys.argv[1:])
