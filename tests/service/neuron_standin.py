"""Stand-ins for the Neuron SDK pieces the Neuron backend calls, written into a temporary folder by the
tests: a `neuronxcc` package (nki.baremetal / nki.benchmark / nki.profile) and a `neuron-profile`
executable. They accept exactly the documented calls (unknown keyword arguments are errors, inputs
must be NumPy arrays, percentiles must be one of the published ones, `working_directory` must be
absolute) and produce the documented formats (`benchmark_result.nc_latency`, NEFF + NTFF files, the
`{"summary": [{...}]}` JSON of `neuron-profile view`). Numbers come from AccelOpt's simulator and
performance model, so correctness is checked end to end. Each call is appended to the JSON-lines
file named by STANDIN_CALL_LOG, when set.
"""

from __future__ import annotations

import os
import stat
import sys
import textwrap
from pathlib import Path

NKI_INIT = textwrap.dedent('''
    """Stand-in for neuronxcc.nki (tests only): runs kernels on the AccelOpt simulator."""
    import json
    import os

    import numpy as np

    from accelopt_core.hardware import load_hardware
    from accelopt_core.nki.runner import Kernel, jit_decorator, run_kernel
    from accelopt_core.perfmodel import estimate

    from . import isa, language, typing  # noqa: F401

    PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)
    _BAREMETAL = {"save_neff_name", "save_trace_name", "additional_compile_opt", "artifacts_dir"}
    _BENCHMARK = {"warmup", "iters", "save_neff_name", "save_trace_name", "additional_compile_opt"}
    _PROFILE = {"working_directory", "save_neff_name", "save_trace_name", "additional_compile_opt", "overwrite",
                "profile_nth"}
    _benchmark_calls = [0]
    jit = jit_decorator("legacy")


    def _log(call, **details):
        path = os.environ.get("STANDIN_CALL_LOG")
        if path:
            details.update(call=call, visible_cores=os.environ.get("NEURON_RT_VISIBLE_CORES"))
            with open(path, "a") as handle:
                handle.write(json.dumps(details, default=str) + "\\n")


    def _hardware():
        return os.environ.get("STANDIN_HARDWARE", "trn1")


    def _check_inputs(kind, args):
        for value in args:
            if not isinstance(value, np.ndarray):
                raise TypeError(f"nki.{kind} expects numpy.ndarray inputs, got {type(value).__name__}")


    def _report(func, args):
        run = run_kernel(Kernel(func, "legacy"), list(args), numeric=False, hardware=_hardware())
        return estimate(run.trace, load_hardware(_hardware())).to_dict(), run


    def _entry_point(kind, allowed, make):
        def api(kernel=None, **options):
            unknown = sorted(set(options) - allowed)
            if unknown:
                raise TypeError(f"nki.{kind}() got unexpected keyword arguments: {', '.join(unknown)}")
            if kernel is None:
                return lambda func: make(func, options)
            return make(kernel, options)
        api.__name__ = kind
        return api


    class _Baremetal:
        def __init__(self, func, options):
            self.func, self.options = func, options

        def __call__(self, *args):
            _check_inputs("baremetal", args)
            _log("baremetal", options=self.options, shapes=[list(a.shape) for a in args])
            outputs = run_kernel(Kernel(self.func, "legacy"), list(args), numeric=True, hardware=_hardware()).outputs
            return outputs[0] if len(outputs) == 1 else tuple(outputs)


    class _Latency:
        def __init__(self, p50):
            spread = {0: 0.97, 1: 0.98, 10: 0.99, 25: 0.995, 50: 1.0, 90: 1.01, 99: 1.03, 100: 1.05}
            self._values = {p: p50 * spread[p] for p in PERCENTILES}

        def get_latency_percentile(self, percentile):
            if percentile not in PERCENTILES:
                raise ValueError(f"percentile {percentile} is not one of {PERCENTILES}")
            return self._values[percentile]


    class _BenchmarkResult:
        def __init__(self, p50):
            self.nc_latency = _Latency(p50)


    class _Benchmark:
        def __init__(self, func, options):
            self.func, self.options = func, options
            self.benchmark_result = None

        def __call__(self, *args):
            _check_inputs("benchmark", args)
            jitter = [float(v) for v in os.environ.get("STANDIN_BENCH_JITTER", "").split(",") if v]
            index = _benchmark_calls[0]
            _benchmark_calls[0] += 1
            factor = jitter[index] if index < len(jitter) else 1.0
            report, _ = _report(self.func, args)
            _log("benchmark", options=self.options, shapes=[list(a.shape) for a in args])
            self.benchmark_result = _BenchmarkResult(report["latency"] * 1e6 * factor)
            return None


    _LABELS = {"tensor": "TensorMatrix", "vector": "Vector", "scalar": "Activation", "gpsimd": "Pool",
               "dma": "qSyncIO"}


    def _make_profile(func, options):
        def run(*args):
            _check_inputs("profile", args)
            folder = options.get("working_directory")
            if not folder or not os.path.isabs(str(folder)):
                raise ValueError("nki.profile needs an absolute working_directory")
            neff = os.path.join(folder, options.get("save_neff_name", "file.neff"))
            ntff = os.path.join(folder, options.get("save_trace_name", "profile.ntff"))
            if not options.get("overwrite", False) and (os.path.exists(neff) or os.path.exists(ntff)):
                raise FileExistsError(f"{ntff} exists; pass overwrite=True")
            _log("profile", options=options, shapes=[list(a.shape) for a in args])
            report, run_result = _report(func, args)
            names = ("total_time", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes",
                     "psum_read_bytes", "psum_write_bytes", "spill_save_bytes", "spill_reload_bytes",
                     "hardware_flops", "transpose_flops", "hfu_estimated_percent", "mbu_estimated_percent",
                     "mfu_inst_estimated_percent", "mm_arithmetic_intensity", "dma_active_time",
                     "dma_active_time_percent", "dma_transfer_count", "matmul_instruction_count")
            summary = {name: report[name] for name in names}
            for engine in ("tensor", "vector", "scalar", "gpsimd"):
                for suffix in ("active_time", "active_time_percent", "instruction_count"):
                    summary[f"{engine}_engine_{suffix}"] = report[f"{engine}_engine_{suffix}"]
            summary.update(nc_idx=int(os.environ.get("NEURON_RT_VISIBLE_CORES", "0").split(",")[0].split("-")[0]),
                           nd_idx=0, event_count=report["instruction_count"])
            source = os.path.basename(run_result.trace.kernel_file or "kernel.py")
            records, clock = [], 0
            for entry in report["lines"]:
                for engine, ms in sorted(entry.get("engines", {}).items()):
                    duration = int(ms * 1e6)
                    records.append({"timestamp": clock, "duration": duration, "label": _LABELS.get(engine, engine),
                                    "opcode": "STANDIN", "nki_source_location": f"{source}:{entry['line']}"})
                    clock += duration
            with open(neff, "wb") as handle:
                handle.write(b"STANDIN-NEFF\\n")
            with open(ntff, "w") as handle:
                json.dump({"format": "standin-ntff", "summary": summary, "instruction": records}, handle)
            with open(os.path.join(folder, "ntff.json"), "w") as handle:
                json.dump({"summary": [summary]}, handle)
            return None
        return run


    baremetal = _entry_point("baremetal", _BAREMETAL, _Baremetal)
    benchmark = _entry_point("benchmark", _BENCHMARK, _Benchmark)
    profile = _entry_point("profile", _PROFILE, _make_profile)
''')

SUBMODULE = textwrap.dedent('''
    """Stand-in for neuronxcc.nki.{name}: the AccelOpt simulator's module of the same name."""
    import importlib

    _real = importlib.import_module("accelopt_core.nki.{name}")


    def __getattr__(attribute):
        return getattr(_real, attribute)
''')

NEURON_PROFILE = textwrap.dedent('''
    """Stand-in for neuron-profile (tests only): `view` of a stand-in NEFF/NTFF pair."""
    import argparse
    import json
    import os
    import sys

    parser = argparse.ArgumentParser(prog="neuron-profile")
    commands = parser.add_subparsers(dest="command", required=True)
    view = commands.add_parser("view")
    view.add_argument("-n", "--neff-path")
    view.add_argument("-s", "--session-file")
    view.add_argument("-d", "--session-dir")
    view.add_argument("--output-format", choices=("summary-text", "summary-json", "json"))
    view.add_argument("--output-file")
    view.add_argument("--db-bucket")
    view.add_argument("--nki-source-root")
    view.add_argument("--ingest-only", action="store_true")
    args = parser.parse_args()
    log = os.environ.get("STANDIN_CALL_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"call": "neuron-profile", "argv": sys.argv[1:]}) + "\\n")
    if not args.neff_path or not os.path.isfile(args.neff_path):
        sys.exit(f"ERROR: cannot open NEFF {args.neff_path}")
    with open(args.neff_path, "rb") as handle:
        if handle.read(12) != b"STANDIN-NEFF":
            sys.exit("ERROR: not a NEFF file")
    try:
        with open(args.session_file) as handle:
            trace = json.load(handle)
    except (OSError, TypeError, ValueError):
        sys.exit(f"ERROR: cannot read NTFF {args.session_file}")
    print("level=info msg=\\"processing profile\\"", file=sys.stderr)
    if args.output_format is None:
        print("View profile at http://localhost:3001/profile/standin")
        sys.exit(0)
    if args.output_format == "summary-text":
        text = "\\n".join(f"{key}  {value}" for key, value in trace["summary"].items()) + "\\n"
    elif args.output_format == "summary-json":
        text = json.dumps({"summary": [trace["summary"]]}, indent=2)
    else:
        text = json.dumps({"summary": [trace["summary"]], "instruction": trace["instruction"]})
    if args.output_file:
        with open(args.output_file, "w") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
''')


def install_standins(folder: Path) -> tuple[Path, Path]:
    """Write the stand-ins; returns (folder for PYTHONPATH, folder for PATH)."""
    python, bin_dir = folder / "python", folder / "bin"
    package = python / "neuronxcc" / "nki"
    package.mkdir(parents=True)
    (python / "neuronxcc" / "__init__.py").write_text('"""Stand-in for the Neuron compiler package (tests only)."""\n')
    (package / "__init__.py").write_text(NKI_INIT)
    for name in ("language", "isa", "typing"):
        (package / f"{name}.py").write_text(SUBMODULE.replace("{name}", name))
    bin_dir.mkdir()
    tool = bin_dir / "neuron-profile"
    tool.write_text(f"#!{sys.executable}\n{NEURON_PROFILE}")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return python, bin_dir


def standin_environment(python: Path, bin_dir: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(python), os.environ.get("PYTHONPATH", "")])),
            "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])}
