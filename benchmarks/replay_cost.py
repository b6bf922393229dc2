"""What the trusted side's replay costs, against the kernel's own run.

For each kernel, at its full size, every step runs in a fresh process (so peak memory, max RSS, is the
step's own) and reports its seconds and peak MiB:
  numeric         the kernel's own numeric run (what the sandboxed child did before replay existed)
  trace           its trace-only run (the timing path)
  record          the trace-only run with the tape, encoded to JSON and written (what the child does now);
                  the file's size is the trace on the wire
  replay-trace    the tape parsed and replayed trace-only (the parent's timing path)
  replay-numeric  the tape parsed and replayed numerically on fresh inputs (the parent's check)
The replays' outputs are compared with a NumPy result where the kernel has one here.

Kernels: silu and matmul (the NKIBench baselines, 4096x7168 and 4096x5120 @ 5120x12288 fp32),
matmul-per-block (a matmul that reloads and transposes A for every output tile: 155,904 instructions at
that size) and adamw-calibration (the public calibration kernel, read from shared/calibration).

Usage: python3 benchmarks/replay_cost.py [--only silu matmul ...] [--skip-numeric] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PER_BLOCK_MATMUL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    m_size, k_size = a.shape
    _, n_size = b.shape
    c = nl.ndarray((m_size, n_size), dtype=a.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // 128):
        for n in nl.affine_range(n_size // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // 128):
                a_t = nl.copy(nisa.nc_transpose(nl.load(a[m * 128:(m + 1) * 128, k * 128:(k + 1) * 128])))
                acc += nisa.nc_matmul(a_t, nl.load(b[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512]))
            nl.store(c[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=c.dtype))
    return c
'''
MATMUL_SHAPES = [[4096, 5120], [5120, 12288]]
STEPS = ("numeric", "trace", "record", "replay-trace", "replay-numeric")


def kernels(folder: str) -> dict[str, dict[str, Any]]:
    """name -> kernel file, input shapes and the NumPy result the outputs are compared with."""
    from calibration_set import calibration_cases

    from accelopt_core.tasks.registry import task_files

    per_block = os.path.join(folder, "matmul_per_block.py")
    Path(per_block).write_text(PER_BLOCK_MATMUL)
    table = {
        "silu": {"kernel": task_files("silu").kernel, "shapes": [[4096, 7168]], "expect": "silu"},
        "matmul": {"kernel": task_files("matmul").kernel, "shapes": MATMUL_SHAPES, "expect": "matmul"},
        "matmul-per-block": {"kernel": per_block, "shapes": MATMUL_SHAPES, "expect": "matmul"},
    }
    adamw = next((c for c in calibration_cases() if c["kernel"].endswith("adamw.py")), None)
    if adamw is not None:
        table["adamw-calibration"] = {"kernel": adamw["kernel"], "shapes": [[10944, 2048]] * 4, "expect": "adamw"}
    return table


def expected(name: str, arrays: list[Any]) -> Any:
    import numpy as np

    if name == "silu":
        x = arrays[0].astype(np.float64)
        return x / (1 + np.exp(-x))
    if name == "matmul":
        return arrays[0] @ arrays[1]
    theta, g, m, v = (a.astype(np.float64) for a in arrays)
    m_t, v_t = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
    return theta - 1e-5 * theta - 0.01 * m_t / (np.sqrt(v_t * 1000) + 1e-8)


def step(name: str, which: str, tape_path: str, folder: str) -> dict[str, Any]:
    """One step in this process: its seconds, peak MiB and what it found."""
    import numpy as np

    from accelopt_core.blas import single_threaded_blas
    from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
    from accelopt_core.nki.replay import replay
    from accelopt_core.nki.tape import tape_to_plain

    single_threaded_blas()
    spec = kernels(folder)[name]
    specs = [TensorSpec(tuple(s), np.dtype(np.float32)) for s in spec["shapes"]]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(tuple(s), dtype=np.float32) for s in spec["shapes"]]
    if name == "adamw-calibration":
        arrays[3] = np.abs(arrays[3])
    found: dict[str, Any] = {}
    start = time.perf_counter()
    if which in ("numeric", "trace", "record"):
        kernel = load_kernel(spec["kernel"])
        run = run_kernel(kernel, arrays if which == "numeric" else specs, numeric=which == "numeric",
                         record=which == "record")
        if which == "record":
            with open(tape_path, "w", encoding="utf-8") as handle:
                json.dump(tape_to_plain(run.trace), handle, separators=(",", ":"))
            found["wire_mb"] = os.path.getsize(tape_path) / 1e6
        found["instructions"] = len(run.trace)
        outputs = run.outputs
    else:
        with open(tape_path, encoding="utf-8") as handle:
            tape = json.load(handle)
        numeric = which == "replay-numeric"
        run = replay(tape, arrays if numeric else specs, "trn1", numeric=numeric)
        found["instructions"] = len(run.trace)
        outputs = run.outputs
    seconds = time.perf_counter() - start
    if outputs and outputs[0] is not None:
        reference = expected(spec["expect"], arrays)
        found["rel_l2_error"] = float(np.linalg.norm(outputs[0] - reference) / np.linalg.norm(reference))
    return {"seconds": seconds, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **found}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--skip-numeric", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--kernel", help=argparse.SUPPRESS)
    parser.add_argument("--tape", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(step(args.kernel, args.step, args.tape, args.folder)))
        return
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        names = [n for n in kernels(folder) if not args.only or n in args.only]
        steps = [s for s in STEPS if not (args.skip_numeric and "numeric" in s)]
        print(f"{'kernel':20} {'step':15} {'instructions':>12} {'seconds':>9} {'peak MiB':>9}  notes")
        for name in names:
            tape = os.path.join(folder, f"{name}.json")
            for which in steps:
                out = subprocess.run([sys.executable, __file__, "--step", which, "--kernel", name, "--tape", tape,
                                      "--folder", folder], capture_output=True, text=True, check=True)
                row = {"kernel": name, "step": which, **json.loads(out.stdout.strip().splitlines()[-1])}
                rows.append(row)
                notes = "  ".join(f"{k} {row[k]:.3g}" for k in ("wire_mb", "rel_l2_error") if k in row)
                print(f"{name:20} {which:15} {row['instructions']:>12} {row['seconds']:>9.2f} {row['peak_mib']:>9.0f}"
                      f"  {notes}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
