"""Simulator speed: trace-only and numeric runs of the bundled tiled matmul at 4096x5120 @ 5120x12288.

Each mode runs in its own process so that peak memory (max RSS) is measured per mode.
Usage: python3 benchmarks/simulator_speed.py [--m 4096 --k 5120 --n 12288] [--skip-numeric]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def run_once(mode: str, m: int, k: int, n: int) -> dict[str, float]:
    import numpy as np

    from accelopt_core.blas import single_threaded_blas
    from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
    from accelopt_core.tasks.registry import example_kernel_path

    single_threaded_blas()
    kernel = load_kernel(example_kernel_path("matmul"))
    if mode == "trace":
        args = [TensorSpec((m, k), np.dtype(np.float32)), TensorSpec((k, n), np.dtype(np.float32))]
    else:
        rng = np.random.default_rng(0)
        args = [rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)]
    start = time.perf_counter()
    result = run_kernel(kernel, args, numeric=(mode == "numeric"))
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"instructions": len(result.trace), "seconds": seconds, "peak_rss_mib": peak_mib,
            "instructions_per_second": len(result.trace) / seconds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--k", type=int, default=5120)
    parser.add_argument("--n", type=int, default=12288)
    parser.add_argument("--skip-numeric", action="store_true")
    parser.add_argument("--child", choices=("trace", "numeric"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_once(args.child, args.m, args.k, args.n)))
        return
    modes = ["trace"] + ([] if args.skip_numeric else ["numeric"])
    print(f"tiled matmul {args.m}x{args.k} @ {args.k}x{args.n} float32 (accelopt_core/examples/matmul.py)")
    for mode in modes:
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--m", str(args.m), "--k", str(args.k),
                              "--n", str(args.n)], check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{mode:>8}: {r['instructions']:,} instructions in {r['seconds']:.2f} s "
              f"({r['instructions_per_second']:,.0f}/s), peak RSS {r['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
