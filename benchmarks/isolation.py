"""What kernel isolation costs and whether its limits hold (README, "Kernel isolation"):

- the time limit's overshoot for a kernel that spins, and for one that also tries to leave its session;
- the median wall time of one evaluation (silu:small, one seed, no cache), under bubblewrap and without it
  (the same measurement in a child process that has no bwrap on PATH and the explicit opt-in);
- the parent's peak memory when a kernel floods its stderr with 512 MB.

    python3 benchmarks/isolation.py [--runs 20] [--limit 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from accelopt_core.profiling import SandboxLimits, SimulatorProfiler, TaskRef  # noqa: E402
from accelopt_core.profiling.confine import OPT_IN_VARIABLE, isolation_problem  # noqa: E402
from accelopt_core.tasks.registry import task_files  # noqa: E402

DOUBLE_REFERENCE = ("import numpy as np\n\ndef make_inputs(rng):\n    return [rng.standard_normal((128, 64), "
                    "dtype=np.float32)]\n\ndef reference(x):\n    return x * 2.0\n")
KERNEL = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n@nki.jit\ndef kernel(x):\n{body}"
          "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
          "    nl.store(out, value=nl.multiply(nl.load(x), 2.0))\n    return out\n")
SPIN = "    while True:\n        pass\n"
# a shell in a new session, started past the audit hook (before isolation it outlived the kill)
LEAVE_SESSION = ("    import _posixsubprocess, os\n    r, w = os.pipe()\n    try:\n"
                 "        _posixsubprocess.fork_exec([b'/bin/sh', b'-c', b'sleep 30'], [b'/bin/sh'], True, (), None, "
                 "None, -1, -1, -1, -1, -1, -1, r, w, True, True, -1, None, None, None, -1, None, True)\n"
                 "    except OSError:\n        pass\n" + SPIN)
FLOOD = "    import os\n    chunk = b'x' * (1 << 20)\n    for _ in range(512):\n        os.write(2, chunk)\n"


def overshoot(body: str, task: TaskRef, limit: float, runs: int) -> list[float]:
    """Seconds past `limit` until profile() returned, per run."""
    profiler = SimulatorProfiler(seeds=1, limits=SandboxLimits(seconds=limit), cache={})
    late = []
    for _ in range(runs):
        start = time.monotonic()
        result = profiler.profile(KERNEL.format(body=body), task)
        late.append(time.monotonic() - start - limit)
        assert result.error and "did not finish" in result.error, result.error
    return late


def evaluation_seconds(runs: int) -> list[float]:
    """Wall time of one evaluation of the silu baseline on silu:small (one seed, nothing cached)."""
    source = Path(task_files("silu").kernel).read_text()
    SimulatorProfiler(seeds=1, cache={}).profile(source, TaskRef("silu:small"))  # the isolation probe, imports
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = SimulatorProfiler(seeds=1, cache={}).profile(source, TaskRef("silu:small"))
        times.append(time.perf_counter() - start)
        assert result.correct, result.error
    return times


def unconfined_evaluation_seconds(runs: int) -> list[float]:
    """The same, measured by a child that cannot find bwrap and opted in to running without it."""
    env = {**os.environ, "PATH": "/nonexistent", OPT_IN_VARIABLE: "1"}
    code = (f"import sys; sys.path.insert(0, {ROOT!r}); from benchmarks.isolation import evaluation_seconds; "
            f"print(' '.join(map(str, evaluation_seconds({runs}))))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return [float(value) for value in run.stdout.split()]


def flood_peak_mb(task: TaskRef) -> tuple[float, float]:
    """The parent's peak resident memory (MB) before and after a kernel writes 512 MB to stderr."""
    profiler = SimulatorProfiler(seeds=1, cache={})
    profiler.profile(KERNEL.format(body=""), task)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = profiler.profile(KERNEL.format(body=FLOOD), task)
    assert result.correct, result.error
    return before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--limit", type=float, default=3.0)
    args = parser.parse_args()
    if isolation_problem() is not None:
        sys.exit(f"kernels cannot be isolated here: {isolation_problem()}")
    folder = Path(tempfile.mkdtemp(prefix="accelopt-isolation-"))
    (folder / "double_ref.py").write_text(DOUBLE_REFERENCE)
    task = TaskRef(reference=str(folder / "double_ref.py"))
    for name, body in (("spins", SPIN), ("leaves its session, then spins", LEAVE_SESSION)):
        late = overshoot(body, task, args.limit, 5)
        print(f"a kernel that {name}: limit {args.limit:g} s, returned {statistics.median(late):.3f} s after it "
              f"(median of 5, worst {max(late):.3f} s)")
    confined, plain = statistics.median(evaluation_seconds(args.runs)), statistics.median(
        unconfined_evaluation_seconds(args.runs))
    print(f"one evaluation of silu:small (median of {args.runs}): {confined:.3f} s under bubblewrap, {plain:.3f} s "
          f"without, {confined - plain:+.3f} s")
    before, after = flood_peak_mb(task)
    print(f"512 MB on stderr: the parent's peak memory {before:.0f} MB before, {after:.0f} MB after")


if __name__ == "__main__":
    main()
