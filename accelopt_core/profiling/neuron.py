"""The Neuron backend: check and profile a kernel on this host's NeuronCore with the Neuron SDK.

The kernel runs in a child process with the real `neuronxcc.nki` (never the simulator's import hook):
- `nki.baremetal` runs it on each check case's inputs; the outputs come back to this (trusted)
  process, which compares them with the reference exactly as the simulator backend does;
- `nki.benchmark(warmup=2, iters=10)` times it; the median (p50) latency in microseconds is read from
  `benchmark_result.nc_latency`. Runs are repeated until two in a row agree within 1% (bounded), as
  AccelOpt's paper did, because a single device measurement can be disturbed;
- `nki.profile` writes a NEFF and an NTFF; this process then runs
  `neuron-profile view --output-format summary-json -n file.neff -s profile.ntff` and reads the
  summary (`{"summary": [{...}]}`) into the same `ProfileResult` fields the simulator fills, and
  `--output-format json` for per-line time (`nki_source_location`).

The child runs under bubblewrap like a simulated kernel (confine.py), with what the SDK needs on top:
the NeuronCore devices (/dev/neuron*), /sys and the SDK's /opt/aws/neuron read-only, the programs on
PATH, and the right to start processes (its compiler and tools). It gets the sandbox's limits, an
environment from the allow-list plus `NEURON_RT_VISIBLE_CORES` for the core it owns, and an audit hook
that refuses reading the reference and other forbidden files, writing outside its folder and /dev, inet
sockets, and programs other than the Neuron tools. That device profile is exercised here with stand-ins
of the SDK, not on a Trainium host.
"""

from __future__ import annotations

import ast
import glob
import importlib
import importlib.util
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..nki import TensorSpec
from ..nki.loader import parse_source
from ..nki.runner import Launch, bind_arguments
from ..tasks import PeakWork
from .confine import Confinement, sandbox_environment
from .errors import describe_kernel_exception
from .guards import guard_violation
from .handback import (
    MAX_RESULT_BYTES,
    OPTIONAL_INT,
    OPTIONAL_NUMBER,
    OPTIONAL_TEXT,
    MalformedResultError,
    read_job_file,
    typed,
    write_result,
)
from .measure import spill
from .profiler import (
    CheckingProfiler,
    TaskRef,
    counted_work,
    fill_peak,
    input_shapes,
    reference_thread,
    specs_of,
)
from .result import ProfileResult
from .sandbox import SandboxLimits, apply_limits, open_guard, plain_result, run_worker, worker_arguments

# programs the SDK may start from inside the child (compiler, benchmark and profiler tools)
NEURON_TOOLS = ("neuronx-cc", "neuron-bench", "neuron-profile", "neuron-explorer", "neuron-ls")
KERNEL_NAMES = ("kernel", "optimized_kernel")
_DECORATORS = ("jit", "baremetal", "benchmark", "profile", "trace", "simulate")
# the neuron-profile summary fields of the result contract (docs/architecture.md), present even when missing
SUMMARY_FIELDS = ("total_time", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes",
                  "psum_read_bytes", "psum_write_bytes", "hardware_flops", "transpose_flops",
                  "hfu_estimated_percent", "tensor_engine_active_time_percent", "scalar_engine_active_time_percent",
                  "vector_engine_active_time_percent", "gpsimd_engine_active_time_percent", "dma_active_time_percent")
_ALIASES = {"sb_read_bytes": "sbuf_read_bytes", "sb_write_bytes": "sbuf_write_bytes"}  # older tool versions
_ENGINES = {"tensor": "tensor_engine_active_time_percent", "vector": "vector_engine_active_time_percent",
            "scalar": "scalar_engine_active_time_percent", "gpsimd": "gpsimd_engine_active_time_percent",
            "dma": "dma_active_time_percent"}
PROFILE_DIR = "profile"
NEURON_SDK = "/opt/aws/neuron"  # the runtime's libraries and tools (neuron-profile, neuron-ls)
NEURON_PROCESSES = 256  # the compiler and the runtime start processes and threads of their own


@dataclass
class NeuronJob:
    """What the child needs: kernel source, check inputs, timing shapes, and the measuring recipe."""

    kernel_source: str
    check_inputs: list[list[np.ndarray]]
    timing_specs: list[TensorSpec]
    kernel_name: str | None = None
    kernel_filename: str = "candidate.py"
    forbidden_paths: list[str] = field(default_factory=list)
    writable_paths: list[str] = field(default_factory=list)
    allowed_programs: list[str] = field(default_factory=lambda: list(NEURON_TOOLS))
    warmup: int = 2
    iters: int = 10
    max_timing_runs: int = 5
    agreement: float = 0.01
    profile: bool = True
    check_launch: Launch = field(default_factory=Launch)  # Python arguments and grid of the checked size
    timing_launch: Launch = field(default_factory=Launch)  # and of the timed size


@dataclass
class DeviceMeasurement:
    """What the child measured: outputs per case, p50 latencies per benchmark run, profile folder."""

    outputs: list[list[np.ndarray]] = field(default_factory=list)
    latencies_us: list[float] = field(default_factory=list)
    latency_us: float | None = None
    stable: bool = False
    profile_dir: str | None = None
    profile_error: str | None = None
    error: str | None = None
    error_line: int | None = None

    def plain(self, folder: str) -> dict[str, Any]:
        """The fields as JSON for the trusted side, the outputs spilled into `folder`."""
        outputs = [spill(case, folder, index) for index, case in enumerate(self.outputs)]
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "outputs": outputs}

    @staticmethod
    def from_plain(data: dict[str, Any]) -> DeviceMeasurement:
        """A child's result (handback.read_result) with every field of the type it must have."""
        values = typed(data, {"outputs": (list,), "latencies_us": (list,), "latency_us": OPTIONAL_NUMBER,
                              "stable": (bool,), "profile_dir": OPTIONAL_TEXT, "profile_error": OPTIONAL_TEXT,
                              "error": OPTIONAL_TEXT, "error_line": OPTIONAL_INT})
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.get("latencies_us", [])):
            raise MalformedResultError("a benchmark latency is not a number")
        if values.get("profile_dir") not in (None, PROFILE_DIR):
            raise MalformedResultError("the profile folder is not the one the worker writes")
        return DeviceMeasurement(**values)


# -- parsing neuron-profile output ------------------------------------------------------------------


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() and "." not in value and "e" not in value.lower() else number
    return value


def parse_summary(text: str) -> dict[str, Any]:
    """The summary object from `neuron-profile view --output-format summary-json` (or `json`) output.

    The documented shape is `{"summary": [{...}]}`; objects keyed by a profile name
    (`{"<name>": {...}}`) and log lines before the JSON are accepted too. Values are kept as written:
    its `*_percent` fields are fractions, the scale of every ProfileResult (result.RESULT_FORMAT)."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in neuron-profile's output")
    data, _ = json.JSONDecoder().raw_decode(text[start:])
    if not isinstance(data, dict):
        raise ValueError("neuron-profile's summary is not a JSON object")
    summary: Any = data.get("summary", data)
    if isinstance(summary, list):
        summary = summary[0] if summary else {}
    elif summary is data and len(data) == 1 and isinstance(next(iter(data.values())), (dict, list)):
        summary = next(iter(data.values()))
        summary = summary[0] if isinstance(summary, list) and summary else summary
    if not isinstance(summary, dict):
        raise ValueError("neuron-profile's summary has an unexpected shape")
    return {_ALIASES.get(k, k): _number(v) for k, v in summary.items()}


def _engine_of(label: str) -> str:
    name = label.lower()
    for engine, markers in (("tensor", ("tensor", "pe")), ("vector", ("vector", "dve")),
                            ("scalar", ("scalar", "act")), ("gpsimd", ("gpsimd", "pool")), ("dma", ("dma", "q"))):
        if any(name.startswith(m) for m in markers):
            return engine
    return name or "unknown"


def lines_from_instructions(records: Sequence[dict[str, Any]], kernel_file: str) -> list[dict[str, Any]]:
    """Per source line of the kernel: time (ms, durations summed), main engine, instruction count."""
    wanted = os.path.basename(kernel_file)
    per_line: dict[int, dict[str, Any]] = {}
    for record in records:
        location = str(record.get("nki_source_location") or "")
        file_name, _, line_text = location.rpartition(":")
        if not line_text.isdigit() or os.path.basename(file_name) != wanted:
            continue
        entry = per_line.setdefault(int(line_text), {"line": int(line_text), "time_ms": 0.0, "instructions": 0,
                                                      "engines": {}})
        ms = float(_number(record.get("duration", 0)) or 0) / 1e6  # durations are in nanoseconds
        engine = _engine_of(str(record.get("label") or record.get("engine") or ""))
        entry["time_ms"] += ms
        entry["instructions"] += 1
        entry["engines"][engine] = entry["engines"].get(engine, 0.0) + ms
    lines = []
    for line in sorted(per_line):
        entry = per_line[line]
        entry["engine"] = max(entry["engines"], key=lambda e: entry["engines"][e]) if entry["engines"] else None
        lines.append(entry)
    return lines


# -- the profiler (trusted parent side) -------------------------------------------------------------


class NeuronProfiler(CheckingProfiler):
    """Profiles on this host's NeuronCore through the Neuron SDK (backend "neuron").

    `visible_cores` is the NeuronCore the child may use (NEURON_RT_VISIBLE_CORES); `hardware`, when
    given, is this host's generation, and jobs for another one are refused."""

    backend = "neuron"

    def __init__(self, seeds: int = 5, check_variant: str | None = None, limits: SandboxLimits | None = None,
                 forbidden_paths: Sequence[str] = (), cache: Any = None, rtol: float | None = None, *,
                 visible_cores: str | None = None, hardware: str | None = None, warmup: int = 2, iters: int = 10,
                 max_timing_runs: int = 5, agreement: float = 0.01, neuron_profile: str | None = None,
                 per_line: bool = True, writable_paths: Sequence[str] = (),
                 allowed_programs: Sequence[str] = NEURON_TOOLS, view_timeout: float = 600.0,
                 extra_env: dict[str, str] | None = None):
        super().__init__(seeds, check_variant, limits or SandboxLimits(seconds=900.0, memory_mb=0), forbidden_paths,
                         cache, rtol)
        self.visible_cores = visible_cores
        self.hardware = hardware
        self.warmup, self.iters = warmup, iters
        self.max_timing_runs = max(2, max_timing_runs)
        self.agreement = agreement
        self.neuron_profile = neuron_profile
        self.per_line = per_line
        self.writable_paths = list(writable_paths)
        self.allowed_programs = list(allowed_programs)
        self.view_timeout = view_timeout
        self.extra_env = dict(extra_env or {})

    def _tool(self) -> str:
        if self.neuron_profile:
            return self.neuron_profile
        return shutil.which("neuron-profile") or "/opt/aws/neuron/bin/neuron-profile"

    def _environment(self, workdir: str) -> dict[str, str]:
        extra = {**self.extra_env, "TMPDIR": workdir, "HOME": workdir}  # the SDK's scratch stays in the job folder
        if self.visible_cores is not None:
            extra["NEURON_RT_VISIBLE_CORES"] = str(self.visible_cores)
        return sandbox_environment(dict(os.environ), extra)

    def profile(self, kernel_source: str, task: TaskRef, hardware: str = "trn1", check: bool = True,
                seeds: Sequence[int] | None = None, kernel_label: str = "candidate.py",
                kernel_name: str | None = None, cancel: threading.Event | None = None) -> ProfileResult:
        cache_key, cached = self._lookup(kernel_source, task, hardware, check, seeds, kernel_name)
        if cached is not None:
            return cached
        timing_task = task.load()
        result = self._new_result(kernel_source, kernel_label, timing_task, hardware, kernel_name)
        if self.hardware is not None and hardware != self.hardware:
            result.error = f"this host profiles on {self.hardware}; the job asked for {hardware}"
            return result
        specs, drawn = self._timing_specs(timing_task, task)
        check_task, cases = self._check_cases(result, task, timing_task, check, seeds)
        result.input_shapes = input_shapes(specs, specs_of(cases[0]) if cases else None)
        job = NeuronJob(kernel_source, [c.result().inputs for c in cases], specs, kernel_name, _file_name(kernel_label),
                        self._forbidden(timing_task), self.writable_paths, self.allowed_programs, self.warmup,
                        self.iters, self.max_timing_runs, self.agreement, check_launch=check_task.launch,
                        timing_launch=timing_task.launch)
        workdir = os.path.realpath(tempfile.mkdtemp(prefix="accelopt-neuron-"))
        with reference_thread() as references:
            counted = references.submit(counted_work, timing_task, specs, cases, drawn)
            try:
                measured = run_device_child(job, workdir, self.limits, self._environment(workdir), cancel)
                if measured.error:
                    return self._failed(result, measured.error, measured.error_line, cache_key)
                summary, lines, problem = self._read_profile(workdir, measured, job.kernel_filename)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            if check:
                self._judge(result, cases, measured.outputs, check_task.rtol if self.rtol is None else self.rtol,
                            references)
                if result.error:
                    return result
            work = counted.result()
        if summary:
            violation = guard_violation({k: summary.get(k) or 0 for k in ("hardware_flops", "transpose_flops",
                                                                          "hbm_read_bytes", "hbm_write_bytes")}, work)
            if violation:
                result.correct, result.check_message = False, violation
        self._fill(result, measured, summary, lines, problem, work, hardware)
        if cache_key is not None:
            self.cache[cache_key] = result
        return result

    def _read_profile(self, workdir: str, measured: DeviceMeasurement, kernel_file: str
                      ) -> tuple[dict[str, Any], list[dict[str, Any]], str | None]:
        """Summary and per-line time from the NEFF/NTFF the child left, via neuron-profile."""
        if measured.profile_error:
            return {}, [], measured.profile_error
        folder = os.path.realpath(os.path.join(workdir, PROFILE_DIR))
        if not folder.startswith(os.path.realpath(workdir) + os.sep) or not os.path.isdir(folder):
            return {}, [], "nki.profile left no profile folder"
        neff, ntff = _artifact(folder, "file.neff", "*.neff"), _artifact(folder, "profile.ntff", "*.ntff")
        if neff is None or ntff is None:
            saved = _saved_summary(folder)
            return (saved, [], None) if saved else ({}, [], "nki.profile wrote no NEFF/NTFF pair")
        base = [self._tool(), "view", "-n", neff, "-s", ntff]
        try:
            view = subprocess.run([*base[:2], "--output-format", "summary-json", *base[2:]], capture_output=True,
                                  text=True, timeout=self.view_timeout, cwd=folder, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            saved = _saved_summary(folder)
            return (saved, [], None) if saved else ({}, [], f"neuron-profile could not run: {exc}")
        if view.returncode != 0:
            detail = (view.stderr or view.stdout).strip().splitlines()[-1:] or [""]
            return {}, [], f"neuron-profile view exited with status {view.returncode}: {detail[0]}"
        try:
            summary = parse_summary(view.stdout)
        except ValueError as exc:
            return {}, [], f"cannot read neuron-profile's summary: {exc}"
        lines: list[dict[str, Any]] = []
        if self.per_line:
            lines = self._instruction_lines(base, folder, kernel_file)
        return summary, lines, None

    def _instruction_lines(self, base: list[str], folder: str, kernel_file: str) -> list[dict[str, Any]]:
        out = os.path.join(folder, "profile.json")
        try:
            subprocess.run([*base[:2], "--output-format", "json", "--output-file", out, *base[2:]], check=True,
                           capture_output=True, timeout=self.view_timeout, cwd=folder, stdin=subprocess.DEVNULL)
            data = json.loads(read_job_file(out, MAX_RESULT_BYTES))
        except (OSError, subprocess.SubprocessError, ValueError):  # MalformedResultError is a ValueError
            return []  # per-line time is a bonus; the summary already answered
        records = data.get("instruction", []) if isinstance(data, dict) else []
        return lines_from_instructions([r for r in records if isinstance(r, dict)], kernel_file)

    def _fill(self, result: ProfileResult, measured: DeviceMeasurement, summary: dict[str, Any],
              lines: list[dict[str, Any]], problem: str | None, work: PeakWork | None, hardware: str) -> None:
        result.latency_ms = measured.latency_us / 1000.0 if measured.latency_us is not None else None
        runs = measured.latencies_us
        # a fraction like every `*_percent` field of the summary it sits beside (0.01 is a 1 % spread)
        spread = (max(runs) - min(runs)) / min(runs) if len(runs) > 1 and min(runs) > 0 else 0.0
        result.profile = {**{name: None for name in SUMMARY_FIELDS}, **summary,
                          "benchmark_p50_us_runs": runs, "benchmark_spread_percent": spread,
                          "timing_stable": measured.stable, "neuron_core": self.visible_cores}
        if problem:
            result.profile["profile_error"] = problem
        result.lines = lines
        active = {engine: summary.get(name) for engine, name in _ENGINES.items()
                  if isinstance(summary.get(name), (int, float))}
        result.bottleneck = max(active, key=lambda e: active[e]) if active and max(active.values()) > 0 else None
        fill_peak(result, work, hardware)


def _file_name(label: str) -> str:
    """The kernel's file name inside the child's folder: the label's base name when it is a plain one."""
    base = os.path.basename(label)
    return base if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,120}\.py", base) else "candidate.py"


def _artifact(folder: str, name: str, pattern: str) -> str | None:
    """A regular file the child wrote (never a link it planted to make us read something else)."""
    candidates = [os.path.join(folder, name), *sorted(glob.glob(os.path.join(folder, pattern)))]
    for path in candidates:
        if os.path.isfile(path) and not os.path.islink(path):
            return path
    return None


def _saved_summary(folder: str) -> dict[str, Any]:
    """nki.profile also leaves summary JSON files; used when the neuron-profile tool is missing."""
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        if os.path.basename(path) == "profile.json":
            continue
        try:
            summary = parse_summary(read_job_file(path, MAX_RESULT_BYTES).decode("utf-8"))
        except (OSError, ValueError):  # a link, a FIFO, too large (MalformedResultError), not UTF-8 or JSON
            continue
        if any(name in summary for name in SUMMARY_FIELDS):
            return summary
    return {}


# -- the child process ------------------------------------------------------------------------------


def run_device_child(job: NeuronJob, workdir: str, limits: SandboxLimits, env: dict[str, str],
                     cancel: threading.Event | None = None) -> DeviceMeasurement:
    """Run `job` in a fresh confined child (killed on timeout or cancel) inside `workdir`."""
    run = run_worker("accelopt_core.profiling.neuron", job, workdir, env, limits, device_confinement(job, workdir),
                     cancel)
    return plain_result(run, DeviceMeasurement.from_plain, DeviceMeasurement)


def device_confinement(job: NeuronJob, workdir: str) -> Confinement:
    """What the SDK needs beyond a simulated kernel's sandbox: the NeuronCores, /sys to find them, the
    SDK's folder, its tools, the configured writable paths (a missing one is created as an empty file, so
    that it can be bound), and processes of its own."""
    for path in job.writable_paths:
        if not os.path.exists(path):
            open(path, "a").close()
    return Confinement(workdir=workdir, writable=tuple(job.writable_paths), hidden=tuple(job.forbidden_paths),
                       devices=tuple(sorted(glob.glob("/dev/neuron*"))), processes=True,
                       extra_system=tuple(p for p in (NEURON_SDK, "/sys") if os.path.isdir(p)))


def _install_device_guard(workdir: str, forbidden: Sequence[str], writable: Sequence[str],
                          programs: Sequence[str]) -> None:
    """Refuse, from now on, what neither the kernel nor the SDK needs (audit hooks cannot be removed)."""
    import socket

    check_open = open_guard([workdir, "/dev", *writable], forbidden)
    allowed = set(programs)

    def program(value: Any) -> str:
        return os.path.basename(os.fsdecode(value)) if isinstance(value, (str, bytes, os.PathLike)) else ""

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            check_open(args)
        elif event == "subprocess.Popen":
            name = program(args[0]) or (program(args[1][0]) if args[1] else "")
            if name not in allowed:
                raise PermissionError(f"sandbox: starting {name or 'a program'} is not allowed")
        elif event == "os.posix_spawn":
            if program(args[0]) not in allowed:
                raise PermissionError(f"sandbox: starting {program(args[0])} is not allowed")
        elif event in ("os.system", "os.fork", "os.forkpty") or event.startswith(("os.exec", "os.spawn")):
            raise PermissionError(f"sandbox: {event} is not allowed")
        elif event in ("socket.connect", "socket.bind"):
            if getattr(args[0], "family", None) in (socket.AF_INET, socket.AF_INET6):
                raise PermissionError(f"sandbox: {event} is not allowed")
        elif event == "sqlite3.connect":
            raise PermissionError("sandbox: sqlite3.connect is not allowed")

    sys.addaudithook(hook)


def _sdk_module_name(source: str) -> str:
    """`nki` for kernels written against the newer top-level package, else `neuronxcc.nki`."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return "neuronxcc.nki"
    modern = legacy = False
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        for name in names:
            modern |= name == "nki" or name.startswith("nki.")
            legacy |= name.startswith("neuronxcc")
    return "nki" if modern and not legacy else "neuronxcc.nki"


def _load_sdk_kernel(job: NeuronJob, workdir: str) -> tuple[Any, Any]:
    """Import the kernel module against the real SDK and return (sdk module, plain kernel function).

    While the module executes, the SDK's decorators only record the functions they decorate, so we
    hold the undecorated kernel and can hand it to baremetal, benchmark and profile in turn."""
    sdk = importlib.import_module(_sdk_module_name(job.kernel_source))
    sdk_file = os.path.realpath(getattr(sdk, "__file__", "") or "")
    if os.sep + "accelopt_core" + os.sep in sdk_file:
        raise RuntimeError("the Neuron backend found the AccelOpt simulator instead of the Neuron SDK")
    path = os.path.join(workdir, job.kernel_filename)  # the SDK reads the kernel's source from its file
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(job.kernel_source)
    decorated: list[Any] = []

    def record(func: Any = None, **options: Any) -> Any:
        if func is None:
            return record
        decorated.append(func)
        return func

    originals = {name: getattr(sdk, name) for name in _DECORATORS if hasattr(sdk, name)}
    spec = importlib.util.spec_from_file_location("accelopt_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["accelopt_kernel"] = module
    for name in originals:
        setattr(sdk, name, record)
    try:
        spec.loader.exec_module(module)
    finally:
        for name, original in originals.items():
            setattr(sdk, name, original)
    if job.kernel_name:
        if not hasattr(module, job.kernel_name):
            raise LookupError(f"no function named {job.kernel_name!r} in {job.kernel_filename}")
        func = getattr(module, job.kernel_name)
    else:
        named = [getattr(module, n) for n in KERNEL_NAMES if callable(getattr(module, n, None))]
        candidates = named[:1] or list(dict.fromkeys(decorated))
        if len(candidates) != 1:
            raise LookupError(f"{job.kernel_filename}: cannot tell which function is the kernel; name it `kernel` "
                              "or decorate exactly one function with @nki.jit")
        func = candidates[0]
    return sdk, getattr(func, "func", func)


def _outputs(value: Any) -> list[np.ndarray]:
    items = value if isinstance(value, (tuple, list)) else [value]
    return [np.asarray(item) for item in items if item is not None]


def _launched(entry: Any, func: Any, arrays: list[np.ndarray], launch: Launch) -> Any:
    """Call an SDK entry point (`baremetal(func)`, a benchmark) as the task launches the kernel: its
    grid, and Python values for the parameters the reference names."""
    positional, keywords = bind_arguments(func, arrays, launch.kernel_args)
    target = entry[launch.grid] if launch.grid is not None else entry
    return target(*[value for _, value in positional], **keywords)


def measure_on_device(job: NeuronJob, workdir: str) -> DeviceMeasurement:
    """Correctness outputs (baremetal), p50 latency (benchmark, repeated until stable), NEFF/NTFF (profile)."""
    measured = DeviceMeasurement()
    func: Any = None
    try:
        sdk, func = _load_sdk_kernel(job, workdir)
        for inputs in job.check_inputs:
            arrays = [np.array(a, copy=True) for a in inputs]
            measured.outputs.append(_outputs(_launched(sdk.baremetal(func), func, arrays, job.check_launch)))
        shapes = [np.zeros(spec.shape, dtype=spec.dtype) for spec in job.timing_specs]
        for _ in range(job.max_timing_runs):
            bench = sdk.benchmark(warmup=job.warmup, iters=job.iters)(func)
            _launched(bench, func, shapes, job.timing_launch)
            measured.latencies_us.append(float(bench.benchmark_result.nc_latency.get_latency_percentile(50)))
            if len(measured.latencies_us) >= 2:
                previous, last = measured.latencies_us[-2:]
                if abs(last - previous) <= job.agreement * min(last, previous):
                    measured.stable = True
                    break
        runs = measured.latencies_us
        measured.latency_us = (sum(runs[-2:]) / 2 if measured.stable else float(np.median(runs)))
    except MemoryError:
        return DeviceMeasurement(error="the kernel ran out of memory (sandbox limit)")
    except Exception as exc:
        if func is None:
            return DeviceMeasurement(error=f"loading the kernel failed: {type(exc).__name__}: {exc}")
        message, line = describe_kernel_exception(exc, func)
        return DeviceMeasurement(error=message, error_line=line)
    if job.profile:
        folder = os.path.join(workdir, PROFILE_DIR)
        os.makedirs(folder, exist_ok=True)
        try:
            _launched(sdk.profile(working_directory=folder, save_neff_name="file.neff",
                                  save_trace_name="profile.ntff", overwrite=True, profile_nth=2)(func),
                      func, shapes, job.timing_launch)
            measured.profile_dir = PROFILE_DIR
        except Exception as exc:  # the timing stands; only the engine and traffic details are missing
            measured.profile_error = f"nki.profile failed: {type(exc).__name__}: {exc}"
    return measured


def device_main() -> None:
    """Body of `python -m accelopt_core.profiling.neuron WORKDIR LIMITS_JSON` (memory 0: no memory limit)."""
    workdir, limits, confined = worker_arguments()
    apply_limits(limits, NEURON_PROCESSES if confined else None)
    os.chdir(workdir)
    with open(os.path.join(workdir, "job.pkl"), "rb") as handle:
        job: NeuronJob = pickle.load(handle)
    os.remove(os.path.join(workdir, "job.pkl"))
    _install_device_guard(workdir, job.forbidden_paths, job.writable_paths, job.allowed_programs)
    measured = measure_on_device(job, workdir)
    try:
        plain = measured.plain(workdir)
    except TypeError as exc:  # an output of a dtype the check cannot read
        plain = DeviceMeasurement(error=str(exc)).plain(workdir)
    write_result(workdir, plain)


if __name__ == "__main__":
    from accelopt_core.profiling.neuron import device_main as _main  # the job's classes under their real module

    _main()
