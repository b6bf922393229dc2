"""`accelopt migrate` over legacy kernels a user has: the 14 bundled NKIBench baselines (each on its task's
small size when it has one) and, given a copy of aws-neuron/nki-samples, its legacy tutorials (matmul,
layernorm, fused mamba, attention, softmax, rmsnorm, transpose, average pool) checked against the
references of benchmarks/public_samples.

Each kernel is copied into a scratch folder and migrated there in a fresh process (`python3 -m accelopt migrate
KERNEL --json`), which runs both versions on the same 5 fresh seeds on simulated trn2. A row says `migrated`
(exit 0: complete and both correct), `left N` (exit 3 with N lines for a person), `disagrees` (exit 3, complete,
a version wrong), `failed` (exit 1: a version did not run) or `bad input` (exit 2).

Usage: python3 benchmarks/migrate_samples.py [--samples MIRROR] [--only NAME ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from public_samples import LEGACY, REFERENCES, SAMPLES, TUTORIALS, export

ROOT = Path(__file__).resolve().parent.parent
BASELINES = ROOT / "nkibench" / "kernels"
# the legacy tutorials the migration is held to, by their rows in public_samples
TUTORIAL_PREFIXES = ("matmul_", "layernorm_", "mamba_", "attention_", "softmax", "rmsnorm", "transpose2d",
                     "average_pool2d")


def migrate(kernel: Path, task_options: list[str], timeout: float = 900) -> dict[str, object]:
    """One `accelopt migrate --json` run: its exit code and the parts of its report a row shows."""
    command = [sys.executable, "-m", "accelopt", "migrate", str(kernel), "--json", *task_options]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"exit": None, "detail": f"no answer within {timeout:g} s"}
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"exit": done.returncode, "detail": done.stderr.strip().splitlines()[-1:] or ["no output"]}
    original, migrated = report["original"], report["migrated"]
    return {"exit": done.returncode, "left": [f"{item['line']}: {item['reason']}" for item in report["needs_person"]],
            "original_ms": original["latency_ms"], "migrated_ms": migrated["latency_ms"],
            "errors": [result["error"] for result in (original, migrated) if result["error"]],
            "hardware": migrated["hardware"]}


def status(row: dict[str, object]) -> str:
    left = row.get("left") or []
    if row["exit"] == 3:
        return f"left {len(left)}" if left else "disagrees"  # type: ignore[arg-type]
    return {0: "migrated", 1: "failed", 2: "bad input"}.get(row["exit"], "crash")  # type: ignore[arg-type]


def show(name: str, row: dict[str, object]) -> dict[str, object]:
    """Print a row as soon as it is measured (a long run keeps what it has), and hand it on."""
    times = f"{row.get('original_ms')} -> {row.get('migrated_ms')} ms (simulated {row.get('hardware')})"
    print(f"{name:<32} {status(row):<10} {times}", flush=True)
    for item in row.get("left") or row.get("errors") or []:  # type: ignore[attr-defined]
        print(f"    {str(item)[:160]}", flush=True)
    return row


def baseline_rows(scratch: Path, only: set[str]) -> dict[str, dict[str, object]]:
    rows = {}
    for kernel in sorted(BASELINES.glob("*.py")):
        if only and kernel.stem not in only:
            continue
        copy = scratch / kernel.name
        shutil.copy(kernel, copy)
        reference = (ROOT / "nkibench" / "reference" / kernel.name).read_text()
        size = ":small" if '"small"' in reference else ""
        name = f"nkibench/{kernel.stem}"
        rows[name] = show(name, migrate(copy, ["--task", f"{kernel.stem}{size}"]))
    return rows


def tutorial_rows(mirror: str, scratch: Path, only: set[str]) -> dict[str, dict[str, object]]:
    rows = {}
    for sample in SAMPLES:
        tutorial = sample.path.startswith(TUTORIALS) and sample.commit == LEGACY
        if not (tutorial and sample.name.startswith(TUTORIAL_PREFIXES)):
            continue
        if only and sample.name not in only:
            continue
        path = export(mirror, sample.commit, sample.path, scratch)
        if path is None:
            continue
        copy = path.with_name(f"{sample.name}.py")
        shutil.copy(path, copy)
        rows[f"tutorial/{sample.name}"] = show(f"tutorial/{sample.name}", migrate(
            copy, ["--reference", str(REFERENCES / sample.reference), "--kernel-name", sample.kernel]))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", help="git directory of an aws-neuron/nki-samples copy (its legacy tutorials)")
    parser.add_argument("--only", nargs="*", default=[], help="rows to run, by name (silu, softmax, ...)")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    only = set(args.only)
    with tempfile.TemporaryDirectory() as scratch:
        rows = baseline_rows(Path(scratch), only)
        if args.samples:
            rows |= tutorial_rows(args.samples, Path(scratch), only)
    done = sum(row["exit"] == 0 for row in rows.values())
    print(f"{done} of {len(rows)} migrate completely and agree")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
