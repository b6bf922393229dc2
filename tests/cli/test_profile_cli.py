"""`accelopt profile` and `accelopt demo` as a user runs them: a real subprocess each time."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONTRACT_FIELDS = ["latency_ms", "correct", "peak_percent", "bottleneck", "hardware", "backend",
                   "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes",
                   "psum_read_bytes", "psum_write_bytes", "hardware_flops", "transpose_flops",
                   "hfu_estimated_percent", "scalar_engine_active_time_percent",
                   "vector_engine_active_time_percent", "gpsimd_engine_active_time_percent", "lines"]

ADD_KERNEL = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 128):
            a = nl.load(x[i * 128:(i + 1) * 128, :])
            b = nl.load(y[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(a, b))
        return out
''')

ADD_REFERENCE = textwrap.dedent('''
    import numpy as np


    def make_inputs(rng):
        return [rng.standard_normal((256, 512), dtype=np.float32), rng.standard_normal((256, 512), dtype=np.float32)]


    def reference(x, y):
        return x + y
''')


def accelopt(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelopt_core", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "add.py").write_text(ADD_KERNEL)
    (tmp_path / "add_ref.py").write_text(ADD_REFERENCE)
    return tmp_path


def test_demo_optimizes_a_bundled_kernel_offline(tmp_path: Path) -> None:
    run = accelopt("demo", "--out-dir", str(tmp_path / "demo"), "--db", str(tmp_path / "m.db"))
    assert run.returncode == 0, run.stderr
    assert "rule-based optimizer" in run.stderr and "before" in run.stdout and "after" in run.stdout
    speedup = float(run.stdout.split("speedup ")[1].split("x")[0])
    # faster and verified; its size is the model's word (tests/calibration): the baseline's 2 KiB DMAs
    # already run at 0.97 of the DMA ceiling (calibration set), so retiling and fusing win a few percent
    assert speedup > 1.0
    assert (tmp_path / "demo" / "silu.optimized.py").exists() and (tmp_path / "demo" / "silu.optimized.diff").exists()


def test_profile_json_of_the_bundled_example_follows_the_contract() -> None:
    root = Path(__file__).resolve().parents[2]
    run = accelopt("profile", "accelopt_core/examples/matmul.py", "--reference", "accelopt_core/examples/matmul_ref.py",
                   "--json", cwd=root)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    for name in CONTRACT_FIELDS:
        assert name in data, name
    assert data["correct"] is True and data["backend"] == "simulator" and data["hardware"] == "trn1"
    assert data["latency_ms"] > 0 and 0 < data["peak_percent"] <= 100
    assert all({"line", "time_ms", "engine", "instructions"} <= set(line) for line in data["lines"])
    # neuron-profile's scale: every `*_percent` summary field is a fraction; peak_percent (ours) is percent
    fractions = {name: value for name, value in data.items() if name.endswith("_percent") and name != "peak_percent"}
    assert data["result_format"] == 2 and "vector_engine_active_time_percent" in fractions
    assert all(0 <= v <= 1 for value in fractions.values() for v in (value.values() if isinstance(value, dict)
                                                                      else [value])), fractions


def test_profile_json_follows_the_contract(files: Path) -> None:
    run = accelopt("profile", str(files / "add.py"), "--reference", str(files / "add_ref.py"), "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["correct"] is True and len(data["seeds"]) == 5
    assert data["hbm_read_bytes"] == 2 * 256 * 512 * 4 and data["hbm_write_bytes"] == 256 * 512 * 4
    # no peak_work in the reference: its own NumPy work is counted (one add per element; 2 inputs, 1 output)
    assert data["peak_work"] == {"mm_flops": 0, "vec_flops": 256 * 512, "hbm_bytes": 3 * 4 * 256 * 512,
                                 "counted": True, "mm_dtype": "float32"}
    assert data["bound"] == "memory" and 0 < data["peak_percent"] <= 100
    assert {line["line"] for line in data["lines"]} == {10, 11, 12}


def test_profile_no_check_is_trace_only(files: Path) -> None:
    run = accelopt("profile", str(files / "add.py"), "--reference", str(files / "add_ref.py"), "--json",
                   "--no-check", "--hardware", "trn2")
    data = json.loads(run.stdout)
    assert run.returncode == 0 and data["correct"] is None and data["hardware"] == "trn2"
    assert data["latency_ms"] > 0


def test_readable_report_names_lines(files: Path) -> None:
    run = accelopt("profile", str(files / "add.py"), "--reference", str(files / "add_ref.py"), "--seed", "7")
    assert run.returncode == 0, run.stderr
    assert "correct on 1 seed (" in run.stdout and "nl.load(x[i * 128" in run.stdout


def test_profile_with_named_task() -> None:
    run = accelopt("profile", "accelopt_core/examples/matmul.py", "--task", "matmul", "--no-check", "--json",
                   cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["peak_percent"] > 0


def _one_line(run: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_not_python_is_bad_input(files: Path) -> None:
    (files / "notes.py").write_text("this is not python {\n")
    run = accelopt("profile", str(files / "notes.py"), "--reference", str(files / "add_ref.py"))
    assert run.returncode == 2
    assert "syntax error" in _one_line(run)


DEEP = {"parentheses": "    y = " + "(" * 2000 + "x" + ")" * 2000 + "\n",
        "blocks": "".join("    " * (depth + 1) + "if x:\n" for depth in range(2000)) + "    " * 2001 + "pass\n",
        "operators": "    y = " + "-" * 100000 + "x\n",
        "operands": "    y = " + "x + " * 50000 + "x\n"}


@pytest.mark.parametrize("nesting", sorted(DEEP))
def test_a_deeply_nested_kernel_is_bad_input(files: Path, nesting: str) -> None:
    """Python's parser gives up on these with RecursionError or MemoryError (was a traceback)."""
    (files / "deep.py").write_text("import neuronxcc.nki as nki\n\n\n@nki.jit\ndef kernel(x):\n" + DEEP[nesting]
                                   + "    return x\n")
    run = accelopt("profile", str(files / "deep.py"), "--reference", str(files / "add_ref.py"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "syntax error" in _one_line(run)


def test_file_without_kernel_is_bad_input(files: Path) -> None:
    (files / "helpers.py").write_text("def helper():\n    return 1\n\ndef other():\n    return 2\n")
    run = accelopt("profile", str(files / "helpers.py"), "--reference", str(files / "add_ref.py"))
    assert run.returncode == 2
    assert "cannot tell which function is the kernel" in _one_line(run)


def test_reference_missing_function_is_bad_input(files: Path) -> None:
    (files / "bad_ref.py").write_text("def get_inputs():\n    return []\n")
    run = accelopt("profile", str(files / "add.py"), "--reference", str(files / "bad_ref.py"))
    assert run.returncode == 2
    assert "missing forward" in _one_line(run)


def test_missing_task_is_bad_input(files: Path) -> None:
    run = accelopt("profile", str(files / "add.py"))
    assert run.returncode == 2
    assert "--reference" in _one_line(run)


def test_mismatched_input_shapes_fail_with_one_line(files: Path) -> None:
    (files / "fixed.py").write_text(ADD_KERNEL.replace(", :]", ", 0:512]"))
    (files / "small_ref.py").write_text(ADD_REFERENCE.replace("(256, 512)", "(256, 300)"))
    run = accelopt("profile", str(files / "fixed.py"), "--reference", str(files / "small_ref.py"))
    assert run.returncode == 1
    assert "out of bounds" in _one_line(run)


def test_hardware_rule_error_names_the_kernel_line(files: Path) -> None:
    (files / "wide.py").write_text(ADD_KERNEL.replace("x[i * 128:(i + 1) * 128, :]", "x[0:256, :]"))
    run = accelopt("profile", str(files / "wide.py"), "--reference", str(files / "add_ref.py"))
    assert run.returncode == 1
    line = _one_line(run)
    assert "wide.py:10" in line and "256" in line and "128" in line


def test_unwritten_output_is_not_correct(files: Path) -> None:
    (files / "lazy.py").write_text(ADD_KERNEL.replace("x.shape[0] // 128", "x.shape[0] // 256"))
    run = accelopt("profile", str(files / "lazy.py"), "--reference", str(files / "add_ref.py"))
    assert run.returncode == 3
    assert "NaN" in _one_line(run)


def test_wrong_results_exit_3(files: Path) -> None:
    (files / "sub.py").write_text(ADD_KERNEL.replace("nl.add(a, b)", "nl.subtract(a, b)"))
    run = accelopt("profile", str(files / "sub.py"), "--reference", str(files / "add_ref.py"), "--json")
    assert run.returncode == 3
    assert json.loads(run.stdout)["correct"] is False
    assert "relative L2 error" in _one_line(run)


def test_nkibench_reference_form(files: Path) -> None:
    (files / "bench_ref.py").write_text(textwrap.dedent('''
        import numpy as np

        def get_inputs():
            return [np.random.randn(256, 512).astype(np.float32), np.random.randn(256, 512).astype(np.float32)]

        def forward(x, y):
            return (x + y).T

        def transform_to_nki_inputs(inputs):
            return inputs

        def transform_nki_outputs(out, ref):
            return out.T
    '''))
    run = accelopt("profile", str(files / "add.py"), "--reference", str(files / "bench_ref.py"), "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["correct"] is True


def test_grid_option_launches_every_program(files: Path) -> None:
    (files / "rows.py").write_text(textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def kernel(x, y):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            rows = nl.ds(nl.program_id(0) * 128, 128)
            nl.store(out[rows, :], value=nl.add(nl.load(x[rows, :]), nl.load(y[rows, :])))
            return out
    '''))
    run = accelopt("profile", str(files / "rows.py"), "--reference", str(files / "add_ref.py"), "--grid", "2")
    assert run.returncode == 0, run.stderr
    assert "spmd      grid 2: 2 SPMD programs run one after another on one NeuronCore" in run.stdout
    without = accelopt("profile", str(files / "rows.py"), "--reference", str(files / "add_ref.py"))
    assert without.returncode == 3
    bad = accelopt("profile", str(files / "rows.py"), "--reference", str(files / "add_ref.py"), "--grid", "2x0")
    assert bad.returncode == 2 and "--grid must be positive integers" in bad.stderr


def test_the_kernel_s_platform_target_picks_the_hardware(files: Path) -> None:
    (files / "trn2.py").write_text(ADD_KERNEL.replace("@nki.jit", '@nki.jit(platform_target="trn2")'))
    declared = accelopt("profile", str(files / "trn2.py"), "--reference", str(files / "add_ref.py"), "--json")
    assert declared.returncode == 0, declared.stderr
    assert json.loads(declared.stdout)["hardware"] == "trn2"
    chosen = accelopt("profile", str(files / "trn2.py"), "--reference", str(files / "add_ref.py"), "--json",
                      "--hardware", "trn1")
    assert json.loads(chosen.stdout)["hardware"] == "trn1"


def test_a_failure_is_said_once_at_a_terminal_and_again_on_stderr_for_scripts(files: Path) -> None:
    (files / "bad.py").write_text(ADD_KERNEL.replace("value=nl.add(a, b)", "value=nl.add(a, b[:, 0:7])"))
    command = [sys.executable, "-m", "accelopt_core", "profile", str(files / "bad.py"),
               "--reference", str(files / "add_ref.py")]
    leader, follower = pty.openpty()
    at_terminal = subprocess.run(command, stdout=follower, stderr=subprocess.PIPE, text=True, timeout=300)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert at_terminal.returncode == 1 and at_terminal.stderr == ""
    assert b"error " in shown
    piped = accelopt(*command[3:])
    assert piped.returncode == 1 and _one_line(piped).startswith("accelopt: ")


def test_a_kernel_our_check_cannot_finish_is_unchecked_not_failed(files: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Exit code 4, its timing shown, the limit that ran out and the flag that raises it named (a tiny check
    budget stands in for a full-size kernel on a busy machine)."""
    from accelopt_core import cli
    from accelopt_core.profiling.profiler import CheckBudget

    monkeypatch.setattr(CheckBudget, "of", staticmethod(lambda limits, specs, seeds: CheckBudget(300.0, 1024)))
    code = cli.main(["profile", str(files / "add.py"), "--reference", str(files / "add_ref.py"), "--json"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == cli.EXIT_UNCHECKED == 4
    assert data["error"] is None and data["correct"] is None and data["latency_ms"] > 0
    assert data["unchecked"] == "the check needs more than 0 MB here" and data["unchecked_limit"] == "memory"
    assert err.strip() == "accelopt: unchecked: the check needs more than 0 MB here (raise it with --memory-mb)"


def test_seconds_and_memory_flags_set_the_kernel_s_limits_and_the_check_s() -> None:
    from accelopt_core import cli

    args = cli.build_parser().parse_args(["profile", "k.py", "--task", "silu", "--seconds", "42", "--memory-mb", "900"])
    limits = cli._profiler_settings(args).limits
    assert (limits.seconds, limits.check_seconds, limits.memory_mb, limits.check_memory_mb) == (42, 42, 900, 900)
    defaults = cli._profiler_settings(cli.build_parser().parse_args(["profile", "k.py", "--task", "silu"])).limits
    assert defaults.check_seconds is None and defaults.check_memory_mb is None  # the check's time grows with the task
    assert cli.build_parser().parse_args(["optimize", "k.py", "--task", "silu", "--seconds", "9"]).seconds == 9
