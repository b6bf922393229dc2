"""% of peak for the public NKIBench references of the calibration set, from their counted NumPy work.

The public references (`get_inputs`/`forward`) declare no peak: "% of peak" comes from counting the work
each one does while it runs (accelopt_core/tasks/work.py). For every case of ../shared/calibration it prints
the counted work, how far it is from the hand formula of shared/nkibench.md (our NKIBench reference's
peak_work at the same sizes), the best possible time on trn1 and what bounds it, trn1's measured latency and
the % of peak that latency means. The references run at their full sizes: minutes and a few GiB of memory.

Usage: python3 benchmarks/reference_peaks.py [task ...]
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
from accelopt_core.tasks.registry import find_task  # noqa: E402


def best_time(work: PeakWork) -> tuple[float, str]:
    """Seconds at trn1's peak rates, and which of the three bounds it."""
    peak = load_hardware("trn1").peak
    times = {"matmul": work.mm_flops / peak.matmul_flops, "vector": work.vec_flops / peak.vector_flops,
             "memory": work.hbm_bytes / peak.hbm_bandwidth}
    bound = max(times, key=lambda k: times[k])
    return times[bound], bound


def difference(counted: float, declared: float) -> str:
    return "=" if counted == declared else f"{100 * (counted - declared) / declared:+.1f}%" if declared else "new"


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
    main(sys.argv[1:])
