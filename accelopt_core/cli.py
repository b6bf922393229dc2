"""`accelopt`: the command line. Each subcommand translates arguments into one engine call."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from .nki import KernelLoadError, NkiError, load_kernel
from .profiling import ProfileResult, profile_kernel
from .report import render
from .tasks import Task, TaskError, load_reference
from .tasks.registry import EXAMPLES_DIR, example_kernel_path, find_task

EXIT_KERNEL_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_WRONG_RESULTS = 3


class CliError(Exception):
    """Bad input: printed as one line, exit code 2."""


def _task_for(args: argparse.Namespace) -> Task:
    if args.reference and args.task:
        raise CliError("give either --reference or --task, not both")
    if args.reference:
        return load_reference(args.reference)
    if args.task:
        return find_task(args.task)
    raise CliError("a kernel is checked against a task: pass --reference REF.py or --task NAME")


def _emit(result: ProfileResult, args: argparse.Namespace, kernel_path: str) -> int:
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(render(result, kernel_path))
    if result.error:
        print(f"accelopt: {result.error}", file=sys.stderr)
        return EXIT_KERNEL_FAILED
    if result.correct is False:
        print(f"accelopt: wrong results: {result.check_message}", file=sys.stderr)
        return EXIT_WRONG_RESULTS
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    task = _task_for(args)
    kernel = load_kernel(args.kernel, args.kernel_name)
    seeds = args.seed or None
    if seeds is None and args.seeds is not None:
        from .tasks.check import fresh_seeds

        seeds = fresh_seeds(args.seeds)
    result = profile_kernel(kernel, task, args.hardware, check=not args.no_check, seeds=seeds,
                            rtol=args.rtol, kernel_label=os.path.relpath(args.kernel))
    return _emit(result, args, args.kernel)


def cmd_demo(args: argparse.Namespace) -> int:
    """The embedded default: profile and check the bundled matmul example on the simulator."""
    path = example_kernel_path("matmul")
    task = load_reference(os.path.join(EXAMPLES_DIR, "matmul_ref.py"), "matmul")
    result = profile_kernel(load_kernel(path), task, args.hardware, kernel_label=os.path.relpath(path))
    return _emit(result, args, path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accelopt", description="Check, profile and optimize NKI kernels "
                                     "for AWS Trainium (on a built-in simulator by default).")
    sub = parser.add_subparsers(dest="command", required=True)

    profile = sub.add_parser("profile", help="check a kernel against its task and profile it",
                             description="Exit codes: 0 ok, 1 the kernel failed to run, 2 bad input, "
                             "3 wrong results.")
    profile.add_argument("kernel", help="kernel file (.py)")
    profile.add_argument("--reference", help="reference file (native or NKIBench form)")
    profile.add_argument("--task", help="a named task instead of a reference file")
    profile.add_argument("--kernel-name", help="the kernel function, when the file has several")
    profile.add_argument("--hardware", choices=("trn1", "trn2"), default="trn1")
    profile.add_argument("--backend", choices=("simulator",), default="simulator")
    profile.add_argument("--no-check", action="store_true", help="skip the numeric check (trace-only mode)")
    profile.add_argument("--seeds", type=int, help="number of random seeds to check (default 5)")
    profile.add_argument("--seed", type=int, action="append", help="check this seed (repeatable)")
    profile.add_argument("--rtol", type=float, help="relative L2 tolerance (default: the task's, 2e-5)")
    profile.add_argument("--json", action="store_true", help="print the result as one JSON object")
    profile.set_defaults(func=cmd_profile)

    demo = sub.add_parser("demo", help="profile and check a bundled example kernel on the simulator")
    demo.add_argument("--hardware", choices=("trn1", "trn2"), default="trn1")
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (CliError, TaskError, KernelLoadError) as exc:
        print(f"accelopt: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NkiError as exc:  # raised while loading the kernel module (e.g. an unsupported import)
        print(f"accelopt: {exc}", file=sys.stderr)
        return EXIT_KERNEL_FAILED


if __name__ == "__main__":
    sys.exit(main())
