"""How long a full-size check takes, and what it holds: the numbers behind "checked in seconds".

For every kernel, at its task's full size, in a fresh process each:
  trace s      `accelopt profile --no-check`: the sandboxed recording and the trace-only replay, timed
  check s      the full check on SEEDS fresh seeds (the numeric replays, the references, the comparison)
               and the timing, as `accelopt profile` runs it
  peak MiB     the most resident memory the check's processes (the profiler, the kernel's sandboxed child,
               the seed workers) held together, sampled every 0.1 s
  verdict      correct / WRONG / unchecked (our limit: the check's budget ran out) / the error
  replay s     one numeric replay of the kernel's tape on one seed's inputs, in this process
  numpy s      the task's own NumPy reference on the same inputs
  ratio        replay s / numpy s (the target: within 10x)

Kernels: the 14 NKIBench baselines bundled in nkibench/ (this project's own), and the public calibration set
(shared/calibration: seven NKIBench kernels as their authors published them; found as tests/calibration_set.py
finds it, skipped where absent). The other public NKIBench kernels are held out and not read.

Usage: python3 benchmarks/check_speed.py [--only lora gqa_full ...] [--seeds 5] [--seconds 1800] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

NKIBENCH = ("matmul", "transpose_matmul", "bmm", "bmm_softmax", "lora", "swiglu", "rmsnorm_matmul",
            "add_rmsnorm_matmul", "matmul_add_rmsnorm", "gqa_full", "rope_single_freq_apply", "silu", "adamw", "mamba")


def kernels() -> dict[str, dict[str, str | None]]:
    """name -> kernel file and task: `nkibench/NAME` by the bundled task's name, `calibration/NAME` by the
    published reference file."""
    from calibration_set import calibration_cases

    from accelopt_core.tasks.registry import task_files

    table: dict[str, dict[str, str | None]] = {
        f"nkibench/{name}": {"kernel": task_files(name).kernel, "task": name, "reference": None} for name in NKIBENCH}
    for case in calibration_cases():
        name = Path(case["kernel"]).stem
        table[f"calibration/{name}"] = {"kernel": case["kernel"], "task": None, "reference": case["reference"]}
    return table


def tree_rss(root: int) -> int:
    """Bytes resident in `root` and every process below it, now."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * page
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


class PeakMemory:
    """The most this process and its children held together while the block ran, sampled in a thread."""

    def __enter__(self) -> PeakMemory:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, tree_rss(os.getpid()))

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def measure(name: str, seeds: int, seconds: float) -> dict[str, Any]:
    """Every figure of one kernel, in this process."""

    from accelopt_core.blas import single_threaded_blas
    from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
    from accelopt_core.nki.replay import ReplayLimits, replay
    from accelopt_core.nki.tape import tape_to_plain
    from accelopt_core.profiling import SandboxLimits, SimulatorProfiler, TaskRef

    single_threaded_blas()
    spec = kernels()[name]
    task = TaskRef(name=spec["task"], reference=spec["reference"])
    source = Path(str(spec["kernel"])).read_text()
    limits = SandboxLimits(seconds=seconds, check_seconds=seconds)
    row: dict[str, Any] = {"kernel": name}
    start = time.perf_counter()
    traced = SimulatorProfiler(seeds=seeds, limits=limits, cache={}).profile(source, task, check=False,
                                                                            kernel_label=str(spec["kernel"]))
    row["trace_s"] = time.perf_counter() - start
    row["latency_ms"] = traced.latency_ms
    with PeakMemory() as memory:
        start = time.perf_counter()
        checked = SimulatorProfiler(seeds=seeds, limits=limits, cache={}).profile(source, task,
                                                                                 kernel_label=str(spec["kernel"]))
        row["check_s"] = time.perf_counter() - start
    row["peak_mib"] = memory.peak / 2**20
    row["verdict"] = (f"error: {checked.error}" if checked.error else f"unchecked: {checked.unchecked}"
                      if checked.unchecked else "correct" if checked.correct else f"WRONG: {checked.check_message}")
    loaded = task.load()
    case = loaded.make_case(1)
    start = time.perf_counter()
    case.reference()
    row["numpy_s"] = time.perf_counter() - start
    specs = [TensorSpec.of(a) for a in case.inputs]
    recorded = run_kernel(load_kernel(str(spec["kernel"])), specs, loaded.launch.kernel_args, numeric=False,
                          record=True, grid=loaded.launch.grid)
    tape = json.loads(json.dumps(tape_to_plain(recorded.trace)))
    del recorded
    start = time.perf_counter()
    replay(tape, case.inputs, "trn1", numeric=True, limits=ReplayLimits(seconds=seconds))
    row["replay_s"] = time.perf_counter() - start
    row["ratio"] = row["replay_s"] / row["numpy_s"] if row["numpy_s"] > 0 else None
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", help="kernel names or parts of them (lora, calibration/gqa_full), "
                        "measured in this order")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1800.0, help="the check's limit (high: to measure)")
    parser.add_argument("--json")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.seeds, args.seconds)))
        return
    table = list(kernels())
    names = list(dict.fromkeys(n for part in args.only for n in table if part in n)) if args.only else table
    print(f"{'kernel':32} {'trace s':>8} {'check s':>8} {'peak MiB':>9} {'replay s':>9} {'numpy s':>8} {'ratio':>7}"
          "  verdict", flush=True)
    rows = []
    for name in names:
        run = subprocess.run([sys.executable, __file__, "--one", name, "--seeds", str(args.seeds), "--seconds",
                              str(args.seconds)], capture_output=True, text=True)
        if run.returncode != 0:
            tail = (run.stderr.strip().splitlines() or ["?"])[-1]
            rows.append({"kernel": name, "failed": tail})
            print(f"{name:32} the measurement failed: {tail}", flush=True)
            continue
        row = json.loads(run.stdout.strip().splitlines()[-1])
        rows.append(row)
        ratio = f"{row['ratio']:.1f}x" if row["ratio"] is not None else "-"
        print(f"{name:32} {row['trace_s']:8.1f} {row['check_s']:8.1f} {row['peak_mib']:9.0f} {row['replay_s']:9.1f}"
              f" {row['numpy_s']:8.2f} {ratio:>7}  {row['verdict']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
