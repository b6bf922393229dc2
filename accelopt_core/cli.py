"""The engine's command line (`python -m accelopt_core`). Each subcommand translates arguments into one
engine call. The front ends built on the engine (the language server, the NKIBench runner) are not
imported here: the `accelopt` command (package `accelopt`) hands them in as `FrontEnd`s."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from .blas import single_threaded_blas
from .engine import PLANNERS, REMOTE, ProfilerSettings, SearchSettings, check_variant, limits_of, make_profiler
from .hardware import available_hardware
from .memory.cli import add_memory_parser
from .nki import KernelLoadError, NkiError
from .nki.loader import check_source, declared_hardware, read_source
from .profiling import ProfileResult, SandboxLimits, TaskRef
from .profiling.confine import INSTALL_HINT, isolation_problem, unconfined_allowed
from .report import CLI_LIMIT_KNOBS, render
from .search.config import PRESETS, describe_presets
from .service.cli import add_serve_arguments, run_serve
from .tasks import TaskError
from .tasks.declared import split_reference
from .tasks.registry import task_files
from .tasks.task import parse_grid

EXIT_KERNEL_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_WRONG_RESULTS = 3
EXIT_UNCHECKED = 4  # the kernel ran and was timed; checking it needs more than our --seconds / --memory-mb


class CliError(Exception):
    """Bad input: printed as one line, exit code 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a usage error said in one line (what is wrong, and where the help is) instead of
    the whole usage block above it; still exit code 2. Subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


@dataclass(frozen=True)
class FrontEnd:
    """A command served by a package built on the engine; it parses the arguments after its name itself."""

    name: str
    help: str
    run: Callable[[list[str]], int]


def _task_for(args: argparse.Namespace) -> TaskRef:
    if args.reference and args.task:
        raise CliError("give either --reference or --task, not both")
    try:
        grid = parse_grid(args.grid) if args.grid else None
    except ValueError as exc:
        raise CliError(f"--grid {exc}") from None
    if args.reference:
        path, variant = split_reference(args.reference)
        if variant and args.backend == REMOTE:
            raise CliError("a reference's size variant is not sent to a profiling service; profile it on the "
                           "simulator, or name a task (--task NAME:VARIANT)")
        ref = TaskRef(reference=path, grid=grid, variant=variant)
    elif args.task:
        ref = TaskRef(name=args.task, grid=grid)
    else:
        raise CliError("a kernel is checked against a task: pass --reference REF.py or --task NAME")
    ref.load()  # bad references are bad input, reported before anything runs
    return ref


def _read_kernel(args: argparse.Namespace) -> str:
    """The kernel's source, checked without running it; settles `args.hardware` when not given: the
    target its decorator names (`@nki.jit(platform_target="trn2")`), else trn1."""
    source = read_source(args.kernel)
    check_source(source, args.kernel, args.kernel_name)
    if args.hardware is None:
        declared = declared_hardware(source, args.kernel, args.kernel_name)
        args.hardware = declared if declared in available_hardware() else "trn1"
    return source


def _emit(result: ProfileResult, args: argparse.Namespace, kernel_path: str) -> int:
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(render(result, kernel_path))
    # the failure again on stderr, for scripts and logs; not for a person at a terminal, who just read it in
    # the report, nor where stderr goes where the report went (`2>&1`), which would say it twice
    say = args.json or not (sys.stdout.isatty() or same_destination(sys.stdout, sys.stderr))
    if result.error:
        if say:
            print(f"accelopt: {result.error}", file=sys.stderr)
        return EXIT_KERNEL_FAILED
    if result.correct is False:
        if say:
            print(f"accelopt: wrong results: {result.check_message}", file=sys.stderr)
        return EXIT_WRONG_RESULTS
    if result.unchecked:
        if say:
            print(f"accelopt: {result.unchecked_text(*CLI_LIMIT_KNOBS)}", file=sys.stderr)
        return EXIT_UNCHECKED
    return 0


def same_destination(first: Any, second: Any) -> bool:
    """Whether two streams write to the same place: one terminal, file or pipe."""
    try:
        one, other = os.fstat(first.fileno()), os.fstat(second.fileno())
    except (AttributeError, OSError, ValueError):  # a stream with no file behind it (a test's StringIO)
        return False
    return (one.st_dev, one.st_ino, one.st_rdev) == (other.st_dev, other.st_ino, other.st_rdev)


def positive_int(text: str) -> int:
    """An argparse type for counts that must be at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _profiler_settings(args: argparse.Namespace) -> ProfilerSettings:
    if args.backend == REMOTE:
        if not args.service_url or not args.token_file:
            raise CliError("--backend remote needs --service-url and --token-file")
        return ProfilerSettings(REMOTE, args.service_url, read_source(args.token_file).strip())
    # the user's own file, named on the command line: where bubblewrap cannot run it still runs, with a warning
    return ProfilerSettings(seeds=args.seeds or 5, rtol=args.rtol, limits=limits_of(args.seconds, args.memory_mb,
                                                                                         allow_unconfined=True))


def _add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = SandboxLimits()
    parser.add_argument("--seconds", type=positive, help=f"seconds the kernel's run, and the check, may take "
                        f"(default: {defaults.seconds:g} for the run; for the check {defaults.seconds:g}, or for a "
                        f"task with large inputs a second per MiB of inputs per seed, up to "
                        f"{defaults.longest_check():g})")
    parser.add_argument("--memory-mb", type=int, help=f"memory the kernel's run, and the check, may use, in MiB "
                        f"(default {defaults.memory_mb})")


def positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def cmd_profile(args: argparse.Namespace) -> int:
    task = _task_for(args)
    source = _read_kernel(args)
    profiler = make_profiler(_profiler_settings(args))
    # the file's absolute path: its folder (or its package's) is what the sandbox shows the kernel
    result = profiler.profile(source, task, args.hardware, check=not args.no_check, seeds=args.seed,
                              kernel_label=os.path.abspath(args.kernel), kernel_name=args.kernel_name)
    result.kernel = os.path.relpath(args.kernel)
    return _emit(result, args, args.kernel)


def cmd_demo(args: argparse.Namespace) -> int:
    """The embedded default, offline: optimize a bundled NKIBench baseline on the simulator with the
    rule-based optimizer and show before/after (the kernel is copied, the bundled file is untouched)."""
    from .optimize import OptimizeRun, run_optimize

    files = task_files(args.task)
    os.makedirs(args.out_dir, exist_ok=True)
    kernel_path = os.path.join(args.out_dir, f"{files.name}.py")
    source = read_source(files.kernel)
    with open(kernel_path, "w", encoding="utf-8") as handle:
        handle.write(source)
    require_isolation("simulator")
    task = TaskRef(name=files.name)
    settings = SearchSettings(args.preset, profiler=ProfilerSettings(check_variant=check_variant(task),
                                                                     limits=limits_of(None, None)))
    return run_optimize(OptimizeRun(kernel_path, args.hardware, db=args.db), settings, source, task)


def cmd_optimize(args: argparse.Namespace) -> int:
    """Beam search for a faster kernel; prints progress, writes the best kernel and a diff."""
    from .optimize import optimize_command

    task = _task_for(args)
    source = _read_kernel(args)
    if args.backend == "remote" and not (args.service_url and args.token_file):
        raise CliError("--backend remote needs --service-url and --token-file")
    require_isolation(args.backend)
    return optimize_command(args, source, task)


def cmd_migrate(args: argparse.Namespace) -> int:
    """A legacy kernel as an NKI 0.8 kernel next to it, both run on the same 5 fresh seeds (see migrate.py)."""
    from .migrate import migrate_source, migration_dict, render_migration, verify
    from .nki.api_versions import detect_version

    task = _task_for(args)
    source = read_source(args.kernel)
    check_source(source, args.kernel, args.kernel_name)
    if not detect_version(source).legacy:
        raise CliError(f"{args.kernel} imports nothing from neuronxcc.nki: there is no legacy kernel to migrate")
    migration = migrate_source(source, args.kernel_name)
    out = args.out or f"{os.path.splitext(args.kernel)[0]}.migrated.py"
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(migration.source)
    verified = verify(source, migration.source, task, args.hardware, profiler=make_profiler(_profiler_settings(args)),
                      kernel_name=args.kernel_name)
    report = migration_dict(args.kernel, out, migration, verified)
    print(json.dumps(report, indent=2) if args.json else render_migration(args.kernel, out, migration, verified))
    return int(report["exit_code"])


def require_isolation(backend: str) -> None:
    """A search runs kernels a model or a rule wrote: only under the OS sandbox, unless the user opted in."""
    problem = isolation_problem() if backend == "simulator" else None
    if problem is not None and not unconfined_allowed():
        raise CliError(f"kernels cannot be isolated here: {problem}; {INSTALL_HINT}")


def _add_task_arguments(parser: argparse.ArgumentParser) -> None:
    """The kernel file (and which of its functions), and what it is checked against."""
    parser.add_argument("kernel", help="kernel file (.py)")
    parser.add_argument("--kernel-name", help="the kernel function, when the file has several")
    parser.add_argument("--reference", help="reference file (native or NKIBench form); REF.py:VARIANT picks one "
                        "of its size VARIANTS (default: the first)")
    parser.add_argument("--task", help="a named task instead of a reference file")


def _add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", help="SPMD launch grid, e.g. 4 or 2x2 (default: the reference's GRID, else none)")
    parser.add_argument("--hardware", choices=available_hardware(),
                        help="the Trainium to time on (default: the kernel's platform_target, else trn1)")


def _add_backend_arguments(parser: argparse.ArgumentParser, backend_help: str) -> None:
    """--backend and the profiling service's address and token."""
    parser.add_argument("--backend", choices=("simulator", REMOTE), default="simulator", help=backend_help)
    parser.add_argument("--service-url", help="profiling service URL, for --backend remote")
    parser.add_argument("--token-file", help="file holding the service's bearer token, for --backend remote")


def _add_kernel_command(sub: Any, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A command on one kernel checked against its task within --seconds / --memory-mb, its result in words or,
    with --json, as one JSON object."""
    parser = sub.add_parser(name, help=summary, description=description)
    _add_task_arguments(parser)
    _add_limit_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return parser


def _add_profile_parser(sub: Any) -> None:
    profile = _add_kernel_command(sub, "profile", "check a kernel against its task and profile it",
                                  "Exit codes: 0 ok, 1 the kernel failed to run, 2 bad input, 3 wrong results, 4 "
                                  "unchecked: the kernel ran and was timed, but checking it needs more than "
                                  "--seconds / --memory-mb allow here.")
    _add_launch_arguments(profile)
    _add_backend_arguments(profile, "where to profile: the built-in simulator or a profiling service (--service-url)")
    profile.add_argument("--no-check", action="store_true", help="skip the numeric check (trace-only mode)")
    profile.add_argument("--seeds", type=positive_int, help="number of random seeds to check (default 5)")
    profile.add_argument("--seed", type=int, action="append", help="check this seed (repeatable)")
    profile.add_argument("--rtol", type=float, help="relative L2 tolerance (default: the task's, 2e-5)")
    profile.set_defaults(func=cmd_profile)


def _add_migrate_parser(sub: Any) -> None:
    migrate = _add_kernel_command(sub, "migrate", "rewrite a legacy (neuronxcc.nki) kernel for NKI 0.8 and check "
                                  "both agree", "Writes KERNEL.migrated.py and runs both versions on the same 5 fresh "
                                  "seeds on the simulator. Exit codes: 0 migrated completely and both correct, 1 a "
                                  "version failed to run, 2 bad input, 3 a version is wrong or lines are left for a "
                                  "person.")
    migrate.add_argument("--hardware", choices=available_hardware(), default="trn2",
                         help="the Trainium to time both on (default: trn2, which NKI 0.8 targets)")
    migrate.add_argument("--out", help="where to write the migrated kernel (default: KERNEL.migrated.py)")
    migrate.set_defaults(func=cmd_migrate, grid=None, backend="simulator", seeds=None, rtol=None)


def _add_search_size_arguments(parser: argparse.ArgumentParser) -> None:
    """The preset and what may override it."""
    parser.add_argument("--preset", default="default", choices=tuple(PRESETS),
                        help="search size: beam width B, plans per candidate N, samples per plan K, iterations T; "
                        f"{describe_presets()} (default: default)")
    parser.add_argument("--iterations", type=int, help="override the preset's iterations (T)")
    parser.add_argument("--beam-width", type=int, help="override the preset's beam width (B)")
    parser.add_argument("--workers", type=int, help="parallel evaluations (default: one per core)")
    parser.add_argument("--replay-steps", type=int, help="how many remembered wins memory replay may chain "
                        "before the first iteration (default 8; 0 turns replay off)")
    parser.add_argument("--time-budget", type=float, help="wall-clock seconds the search may take: no "
                        "evaluation starts that would end later (default: the preset's, 540 for default, 300 "
                        "for quick, none for paper; 0 for no limit)")


def _add_optimize_parser(sub: Any) -> None:
    optimize = sub.add_parser("optimize", help="search for a faster kernel (AccelOpt's beam search)",
                              description="Exit codes: 0 done, 1 the kernel to optimize fails, 2 bad input.")
    _add_task_arguments(optimize)
    _add_launch_arguments(optimize)
    _add_limit_arguments(optimize)
    _add_search_size_arguments(optimize)
    optimize.add_argument("--planner", choices=PLANNERS,
                          help="who proposes rewrites: the rule-based optimizer, the LLM agents, or both in one "
                          "search (default: llm when an endpoint is configured, else rules)")
    optimize.add_argument("--llm", action="store_true",
                          help="use the LLM agents (endpoint from ACCELOPT_LLM_BASE_URL, ACCELOPT_LLM_MODEL, "
                          "ACCELOPT_LLM_API_KEY or the config file); with none configured the rule-based "
                          "optimizer runs")
    _add_backend_arguments(optimize, "where candidates are profiled: the built-in simulator or a profiling service")
    optimize.add_argument("--allow-fallback", action="store_true",
                          help="with --backend remote: use the simulator when the service is unreachable")
    optimize.add_argument("--out", help="where to write the best kernel (default: KERNEL.optimized.py)")
    optimize.add_argument("--resume", type=int, metavar="SEARCH_ID", help="continue a killed search")
    optimize.add_argument("--db", help="optimization memory database (default: ACCELOPT_MEMORY_DB or the "
                          "user data directory)")
    optimize.add_argument("--json", nargs="?", const="-", metavar="PATH",
                          help="print the search summary as one JSON object on stdout, as profile --json does (the "
                          "report then goes to stderr); --json PATH writes it to PATH instead")
    optimize.set_defaults(func=cmd_optimize)


def _add_serve_parser(sub: Any) -> None:
    serve = sub.add_parser("serve", help="serve profile jobs over HTTP (e.g. on a Trainium host)",
                           description="Exit codes: 0 stopped, 2 bad configuration.")
    add_serve_arguments(serve)
    serve.set_defaults(func=run_serve)


def _add_demo_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="optimize a bundled NKIBench kernel offline and show before/after")
    demo.add_argument("--task", default="silu", help="which NKIBench baseline (default: silu)")
    demo.add_argument("--hardware", choices=available_hardware(), default="trn1")
    demo.add_argument("--preset", default="quick", choices=tuple(PRESETS), help="search size (default: quick)")
    demo.add_argument("--out-dir", default="accelopt-demo", help="where the kernel copy and results go")
    demo.add_argument("--db", help="optimization memory database (default: the user data directory)")
    demo.set_defaults(func=cmd_demo)


def build_parser(front_ends: Sequence[FrontEnd] = ()) -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="accelopt", description="Check, profile and optimize NKI kernels "
                            "for AWS Trainium (on a built-in simulator by default).")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_profile_parser(sub)
    _add_optimize_parser(sub)
    add_memory_parser(sub)
    _add_serve_parser(sub)
    _add_demo_parser(sub)
    _add_migrate_parser(sub)
    for front in front_ends:  # main() hands everything after the name to the front end's own parser
        sub.add_parser(front.name, help=front.help, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None, front_ends: Sequence[FrontEnd] = ()) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    front = next((f for f in front_ends if argv[:1] == [f.name]), None)
    if front is not None:
        return run_command(lambda: front.run(argv[1:]))
    args = build_parser(front_ends).parse_args(argv)
    return run_command(lambda: args.func(args))


def run_command(command: Callable[[], int]) -> int:
    """Run one command the way every `accelopt` command runs: one BLAS thread, bad input as exit code 2,
    a kernel that fails to load as 1, each with a one-line message."""
    single_threaded_blas()
    try:
        return int(command())
    except (CliError, TaskError, KernelLoadError) as exc:
        print(f"accelopt: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NkiError as exc:  # raised while loading the kernel module (e.g. an unsupported import)
        print(f"accelopt: {exc}", file=sys.stderr)
        return EXIT_KERNEL_FAILED


if __name__ == "__main__":
    sys.exit(main())
