"""The public NKI samples, run as a new user would: each kernel unmodified, checked against a NumPy
reference written from the sample's own test (benchmarks/public_samples/*.py), then profiled.

The kernels are not part of this project: they are read from a local copy of the public
aws-neuron/nki-samples repository (its tutorials, its contributed kernels, and the reference kernels
removed from `main` in Dec 2025 / Jan 2026, read from the commits before their removal). Pass the
repository's git directory (a bare clone is enough) as MIRROR or in ACCELOPT_NKI_SAMPLES; samples
whose file is absent from it are skipped.

Each sample runs `python3 -m accelopt_core profile KERNEL --reference REF --kernel-name NAME --json`
(the sample's launch grid and Python arguments come from the reference) in a fresh process. Its row
says `ok` (checked correct and profiled), `wrong` (profiled, outputs differ), `error` (one line on
stderr: the kernel failed or uses an API we do not simulate) or `crash` (anything else: a traceback,
no JSON). `--no-check` times the trace only. `--check-in-process` times the trace with the CLI and
checks the outputs in a separate plain Python process instead of the sandbox (the same comparison,
without the sandbox's way of handing outputs back).

Usage: python3 benchmarks/public_samples.py MIRROR [--only NAME ...] [--seeds N] [--no-check | --check-in-process]
       [--json OUT] [--root CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCES = Path(__file__).resolve().parent / "public_samples"

# nki-samples commits: LEGACY is the last one with every legacy-API kernel (tutorials, reference
# kernels, contributed kernels), before the matmul tutorial moved to the new `nki` API and the
# reference kernels were removed; CURRENT is the newest, whose matmul tutorial uses the new API.
LEGACY = "fc5c69f79c899d719f6c351fd01acf3c419a6b8b"
CURRENT = "6905a68a122f937e68403727759f035ddd144f95"
PACKAGE = "src/nki_samples"
TUTORIALS = f"{PACKAGE}/tutorials"
REFERENCE_KERNELS = f"{PACKAGE}/reference"


@dataclass(frozen=True)
class Sample:
    """One kernel of the samples repository and the reference it is checked against."""

    name: str
    path: str  # file in the samples repository
    kernel: str  # function to run (--kernel-name)
    reference: str  # file in benchmarks/public_samples
    commit: str = LEGACY
    hardware: str = "trn1"


def _tutorial(name: str, file: str, kernel: str, reference: str, commit: str = LEGACY) -> Sample:
    return Sample(name, f"{TUTORIALS}/{file}", kernel, reference, commit)


_ATTENTION = "attention_fwd_performance/attention_kernels.py"
_MATMUL = "matrix_multiplication/matrix_multiplication_nki_kernels.py"
_MATMUL_KERNELS = ("basic", "tiled", "hoist_load", "block_free_dimension", "fully_optimized")

SAMPLES: tuple[Sample, ...] = (
    _tutorial("tensor_add", "tensor_addition/tensor_addition_nki_kernels.py", "nki_tensor_add", "tensor_add.py"),
    _tutorial("spmd_tensor_add", "tensor_addition/spmd_tensor_addition_nki_kernels.py", "nki_tensor_add_kernel_",
              "tensor_add_grid.py"),
    _tutorial("spmd_tensor_add_nc2", "tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py",
              "nki_tensor_add_nc2", "tensor_add_nc2.py"),
    _tutorial("transpose2d", "transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_", "transpose2d.py"),
    _tutorial("average_pool2d", "average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel",
              "average_pool2d.py"),
    _tutorial("softmax", "softmax/softmax_nki_kernels.py", "nki_softmax_kernel", "softmax.py"),
    _tutorial("rmsnorm", "rmsnorm/rmsnorm_nki_kernels.py", "nki_rmsnorm_kernel", "rmsnorm.py"),
    *(_tutorial(f"layernorm_{v}", "layernorm/layernorm_nki_kernel.py", f"nki_layernorm_kernel_{v}", "layernorm.py")
      for v in ("v1", "v2")),
    *(_tutorial(f"mamba_{v}", "fused_mamba/mamba_nki_kernels.py", f"mamba_{v}", "mamba.py")
      for v in ("v1", "v2", "v3")),
    *(_tutorial(f"matmul_{k}", _MATMUL, f"nki_matmul_{k}_", "matmul_small.py" if k == "basic" else "matmul_large.py")
      for k in _MATMUL_KERNELS),
    *(_tutorial(f"matmul_{k}_new_api", _MATMUL, f"nki_matmul_{k}_",
                "matmul_small.py" if k == "basic" else "matmul_large.py", CURRENT) for k in _MATMUL_KERNELS),
    _tutorial("sd_attention", "sd_attention/sd_attention_nki_kernels.py", "fused_self_attn_for_SD_small_head_size",
              "sd_attention_tutorial.py"),
    _tutorial("rotary", "rotary/rotary_nki_kernels.py", "nki_apply_rotary_embedding", "rotary.py"),
    *(_tutorial(f"attention_{v}", _ATTENTION, f"attn_fwd_{v}",
                "attention_tutorial_short.py" if v in ("v1", "v2") else "attention_tutorial.py")
      for v in ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v8a", "v9", "v10", "v11")),
    Sample("flash_fwd", f"{REFERENCE_KERNELS}/attention.py", "flash_fwd", "flash_fwd.py"),
    Sample("flash_attn_bwd", f"{REFERENCE_KERNELS}/attention.py", "flash_attn_bwd", "flash_bwd.py"),
    Sample("sd_attention_small_head", f"{REFERENCE_KERNELS}/attention.py", "fused_self_attn_for_SD_small_head_size",
           "sd_attention_small_head.py"),
    Sample("allocated_sd_attention", f"{REFERENCE_KERNELS}/allocated_attention.py",
           "allocated_fused_self_attn_for_SD_small_head_size", "allocated_sd_attention.py"),
    Sample("allocated_rmsnorm_qkv", f"{REFERENCE_KERNELS}/allocated_fused_linear.py", "allocated_fused_rms_norm_qkv",
           "rmsnorm_qkv.py"),
    Sample("double_row_matmul", f"{REFERENCE_KERNELS}/double_row_matmul.py", "quantized_double_row_matmul",
           "double_row_matmul.py", hardware="trn2"),
    Sample("rmsnorm_quant", f"{REFERENCE_KERNELS}/rmsnorm_quant/rmsnorm_quant.py", "rmsnorm_quant_kernel",
           "rmsnorm_quant.py"),
    Sample("add_nx8x128x512", f"{REFERENCE_KERNELS}/tutorial.py", "add_kernel_nx8x128x512", "add_nx8.py"),
    Sample("select_and_scatter", f"{REFERENCE_KERNELS}/vision.py", "select_and_scatter_kernel",
           "select_and_scatter.py"),
    Sample("resize_nearest", f"{REFERENCE_KERNELS}/vision.py", "resize_nearest_fixed_dma_kernel", "resize_nearest.py"),
    Sample("adaptive_avg_pool2d", f"{REFERENCE_KERNELS}/vision.py", "adaptive_avg_pool2d_kernel",
           "adaptive_avg_pool2d.py"),
    Sample("interpolate_bilinear", "contributed/interpolate_bilinear_fwd.py", "interpolate_bilinear_2x_fwd",
           "interpolate.py"),
    Sample("interpolate_trilinear", "contributed/interpolate_trilinear_fwd.py", "interpolate_trilinear_2x_fwd",
           "interpolate_trilinear.py"),
    Sample("maxpooling", "contributed/maxpooling.py", "max_pooling_2d_stride_1", "maxpool.py"),
    Sample("pipelined_attention", "contributed/pipelined_attention.py", "flash_fwd", "pipelined_attention.py"),
    Sample("contributed_matmul", "contributed/matmul.py", "matmul", "contributed_matmul.py"),
)


@dataclass
class Row:
    """What one sample did."""

    name: str
    status: str  # ok | wrong | error | crash | skipped
    latency_ms: float | None = None
    detail: str = ""
    seconds: float = 0.0


def export(mirror: str, commit: str, path: str, into: Path) -> Path | None:
    """Write the samples package holding `path` at `commit` under `into` (the helper modules a kernel
    imports, relatively from its own folder or from one above, included); None when the mirror does not
    have it."""
    folder = PACKAGE if path.startswith(PACKAGE + "/") else os.path.dirname(path)
    target = into / commit[:12]
    if not (target / path).is_file():
        archive = subprocess.run(["git", f"--git-dir={mirror}", "archive", commit, folder], capture_output=True)
        if archive.returncode != 0:
            return None
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target / path if (target / path).is_file() else None


def run_sample(sample: Sample, kernel: Path, seeds: int, check: bool, timeout: float, root: Path) -> Row:
    command = [sys.executable, "-m", "accelopt_core", "profile", str(kernel), "--reference",
               str(REFERENCES / sample.reference), "--kernel-name", sample.kernel, "--hardware", sample.hardware,
               "--json", "--seeds", str(seeds)]
    if not check:
        command.append("--no-check")
    began = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Row(sample.name, "crash", detail=f"no answer within {timeout:g} s", seconds=timeout)
    seconds = time.perf_counter() - began
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        return Row(sample.name, "crash" if len(lines) != 1 else "error", detail=(lines or ["no output"])[-1][:300],
                   seconds=seconds)
    if result.get("error"):
        status = "error" if len(lines) == 1 else "crash"
        return Row(sample.name, status, detail=result["error"].splitlines()[0][:300], seconds=seconds)
    if result.get("correct") is False:
        return Row(sample.name, "wrong", result.get("latency_ms"), str(result.get("check_message"))[:300], seconds)
    return Row(sample.name, "ok", result.get("latency_ms"), "" if check else "trace only", seconds)


def check_in_process(sample: Sample, kernel: Path, seeds: int, timeout: float, root: Path) -> tuple[bool, str]:
    """(correct, why not) from `compare_one` run in a child Python of the checkout `root`."""
    command = [sys.executable, __file__, "--compare-one", str(kernel), str(REFERENCES / sample.reference),
               sample.kernel, sample.hardware, str(seeds)]
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": str(root)})
    except subprocess.TimeoutExpired:
        return False, f"the check took more than {timeout:g} s"
    try:
        verdict = json.loads(done.stdout)
    except json.JSONDecodeError:
        return False, (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return bool(verdict["correct"]), verdict["message"] or ""


def compare_one(kernel_path: str, reference: str, name: str, hardware: str, seeds: int) -> dict[str, object]:
    """The check of the profiler, in this process: fresh seeds, the task's launch, relative L2 error."""
    from accelopt_core.nki import load_kernel, run_kernel
    from accelopt_core.tasks.check import compare, fresh_seeds
    from accelopt_core.tasks.task import load_reference

    task = load_reference(reference)
    kernel = load_kernel(kernel_path, name)
    for seed in fresh_seeds(seeds):
        case = task.make_case(seed)
        run = run_kernel(kernel, case.inputs, task.kernel_args, hardware=hardware, grid=task.grid)
        _, _, problem = compare(case.convert(run.outputs), case.reference(), task.rtol)
        if problem:
            return {"correct": False, "message": f"seed {seed}: {problem}"}
    return {"correct": True, "message": None}


def main() -> int:
    if sys.argv[1:2] == ["--compare-one"]:
        kernel_path, reference, name, hardware, seeds = sys.argv[2:7]
        print(json.dumps(compare_one(kernel_path, reference, name, hardware, int(seeds))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirror", nargs="?", default=os.environ.get("ACCELOPT_NKI_SAMPLES"),
                        help="git directory of aws-neuron/nki-samples (or ACCELOPT_NKI_SAMPLES)")
    parser.add_argument("--only", nargs="+", help="run only these samples")
    parser.add_argument("--seeds", type=int, default=1, help="seeds checked per sample (default 1)")
    parser.add_argument("--no-check", action="store_true", help="trace-only timing, no numeric check")
    parser.add_argument("--check-in-process", action="store_true",
                        help="time with the CLI (trace only), check the outputs in a plain child process")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per sample")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the checkout whose accelopt runs the samples (default: this one), e.g. to compare "
                        "with an older commit")
    args = parser.parse_args()
    if not args.mirror or not os.path.isdir(args.mirror):
        print("public_samples: pass the git directory of aws-neuron/nki-samples (or set ACCELOPT_NKI_SAMPLES)",
              file=sys.stderr)
        return 2
    chosen = [s for s in SAMPLES if not args.only or s.name in args.only]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="nki-samples-") as scratch:
        for sample in chosen:
            kernel = export(args.mirror, sample.commit, sample.path, Path(scratch))
            if kernel is None:
                row = Row(sample.name, "skipped", detail=f"{sample.path} is not in the mirror")
            else:
                in_process = args.check_in_process and not args.no_check
                row = run_sample(sample, kernel, args.seeds, not (args.no_check or in_process), args.timeout,
                                 args.root)
                if in_process and row.status == "ok":
                    correct, why = check_in_process(sample, kernel, args.seeds, args.timeout, args.root)
                    row.status, row.detail = ("ok", "checked in process") if correct else ("wrong", why)
            rows.append(row)
            latency = f"{row.latency_ms:10.4f}" if row.latency_ms is not None else " " * 10
            print(f"{row.name:30} {row.status:7} {latency} ms  {row.seconds:6.1f} s  {row.detail}", flush=True)
    ran = [r for r in rows if r.status != "skipped"]
    print(f"\n{sum(r.status == 'ok' for r in ran)} of {len(ran)} ran {'and were correct' if not args.no_check else ''}"
          f" (simulated {'/'.join(sorted({s.hardware for s in chosen}))}); "
          + ", ".join(f"{k}: {sum(r.status == k for r in ran)}" for k in ("wrong", "error", "crash")))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([asdict(r) for r in rows], handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
