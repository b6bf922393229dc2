"""Every rule's plans on a set of kernels, one line per plan: to show a change to the rules leaves what they
propose as it was (run it before and after, then diff the two outputs).

A line names the kernel file, whether it was planned with its profile or without, the rule, the plan's key
(rule, line and parameters), priority and line, a hash of the kernel the plan rewrites it to (or the error
applying it raised) and the plan's description. The kernels: the NKIBench baselines (nkibench/kernels), the
calibration kernels (a folder in the public NKIBench layout, --calibration) and the examples
(accelopt_core/examples), each planned without and with its trace-only profile (simulated trn1); with
--samples, every Python file of a local copy of aws-neuron/nki-samples at the given commits, without a profile.
Profiles are kept in --profiles (a pickle), so two runs plan on the same profiles whatever the simulator does.

    python3 benchmarks/rule_plans.py [--rules hoist_invariant ...] [--calibration DIR]
                                     [--samples GIT_DIR --commit SHA ...] [--profiles FILE] > plans.txt
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from accelopt_core.agents.rules.registry import default_rules  # noqa: E402
from accelopt_core.engine import ProfilerSettings, make_profiler  # noqa: E402
from accelopt_core.profiling import TaskRef  # noqa: E402


@dataclass(frozen=True)
class Kernel:
    """One kernel file to plan on, and the task that profiles it (None: planned without a profile only)."""

    label: str
    source: str
    task: TaskRef | None = None


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _python_files(folder: str) -> list[str]:
    return sorted(f for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))


def bundled_kernels(calibration: str | None) -> Iterator[Kernel]:
    """The NKIBench baselines, the calibration kernels (when the folder is given) and the examples."""
    bench = os.path.join(ROOT, "nkibench", "kernels")
    for name in _python_files(bench):
        yield Kernel(f"nkibench/{name}", _read(os.path.join(bench, name)), TaskRef(name[:-3]))
    if calibration:
        for name in _python_files(os.path.join(calibration, "kernels")):
            yield Kernel(f"calibration/{name}", _read(os.path.join(calibration, "kernels", name)),
                         TaskRef(reference=os.path.join(calibration, "reference", name)))
    examples = os.path.join(ROOT, "accelopt_core", "examples")
    for name in _python_files(examples):
        if not name.endswith("_ref.py"):
            reference = os.path.join(examples, f"{name[:-3]}_ref.py")
            yield Kernel(f"examples/{name}", _read(os.path.join(examples, name)),
                         TaskRef(reference=reference) if os.path.exists(reference) else None)


def sample_kernels(git_dir: str, commits: Sequence[str]) -> Iterator[Kernel]:
    """The Python files (tests aside) of a copy of nki-samples at each commit."""
    for commit in commits:
        listing = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", commit, "src/"],
                                 capture_output=True, text=True, check=True).stdout.split()
        for path in listing:
            if path.endswith(".py") and "test" not in path:
                text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                                      capture_output=True, text=True, check=True).stdout
                yield Kernel(f"samples@{commit[:7]}/{path}", text)


def profiles(kernels: Sequence[Kernel], path: str | None) -> dict[str, Any]:
    """Each kernel's trace-only profile (None when it fails), read from `path` when there, else made and kept."""
    found: dict[str, Any] = {}
    if path and os.path.exists(path):
        with open(path, "rb") as handle:
            found = pickle.load(handle)
    missing = [k for k in kernels if k.task is not None and k.label not in found]
    if missing:
        profiler = make_profiler(ProfilerSettings(seeds=1, check_variant=None))
        for kernel in missing:
            try:
                result = profiler.profile(kernel.source, kernel.task, check=False)  # type: ignore[arg-type]
            except Exception as exc:  # the reference could not draw inputs: planned without a profile
                print(f"# no profile of {kernel.label}: {type(exc).__name__}: {exc}", file=sys.stderr)
                result = None
            found[kernel.label] = result if result is not None and result.error is None else None
        if path:
            with open(path, "wb") as handle:
                pickle.dump(found, handle)
    return found


def plan_lines(label: str, source: str, profile: Any, rules: Sequence[Any]) -> Iterator[str]:
    """One line per plan of every rule on `source` (a planner's or an apply's exception is a line too)."""
    mode = "profile" if profile is not None else "noprofile"
    for rule in rules:
        try:
            plans = rule.plan(source, profile)
        except Exception as exc:  # a crashing planner is part of what the rules do
            yield f"{label} {mode} {rule.name} PLAN-ERROR {type(exc).__name__}: {exc}"
            continue
        for plan in plans:
            try:
                outcome = hashlib.sha256(rule.apply(source, plan).encode()).hexdigest()[:16]
            except Exception as exc:
                outcome = f"APPLY-ERROR {type(exc).__name__}: {exc}"
            yield (f"{label} {mode} {rule.name} {plan.key} prio={plan.priority!r} line={plan.line} {outcome} :: "
                   f"{plan.description}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", nargs="*", help="only these rules (default: all, in their order)")
    parser.add_argument("--calibration", help="a folder of kernels/ and reference/ in the public NKIBench layout")
    parser.add_argument("--samples", help="the git directory of a copy of aws-neuron/nki-samples")
    parser.add_argument("--commit", nargs="*", default=[], help="the samples' commits to read")
    parser.add_argument("--profiles", help="a pickle of the profiles, made when absent, read when present")
    args = parser.parse_args(argv)
    rules = [r for r in default_rules() if not args.rules or r.name in args.rules]
    kernels = list(bundled_kernels(args.calibration))
    if args.samples:
        kernels += list(sample_kernels(args.samples, args.commit))
    found = profiles(kernels, args.profiles)
    for kernel in kernels:
        for line in plan_lines(kernel.label, kernel.source, None, rules):
            print(line, flush=True)
        if found.get(kernel.label) is not None:
            for line in plan_lines(kernel.label, kernel.source, found[kernel.label], rules):
                print(line, flush=True)


if __name__ == "__main__":
    main()
