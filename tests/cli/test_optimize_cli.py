"""`accelopt optimize` as a user runs it on their own kernel and reference file: progress, the best
kernel and its diff, and a second run that starts from what the first one learned."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

KERNEL = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(a, b):
        rows, cols = a.shape
        out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(rows // 128):
            for c in nl.affine_range(cols // 256):
                x = nl.load(a[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256])
                y = nl.load(b[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256])
                nl.store(out[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256], value=nl.exp(nl.add(x, y)))
        return out
''')

REFERENCE = textwrap.dedent('''
    import numpy as np

    FAMILY = "elementwise"


    def make_inputs(rng, rows=512, cols=2048):
        return [rng.standard_normal((rows, cols)).astype(np.float32) * 0.5 for _ in range(2)]


    def reference(a, b):
        return np.exp(a.astype(np.float64) + b)
''')


def optimize(tmp_path: Path, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    kernel = tmp_path / f"{name}.py"
    kernel.write_text(KERNEL)
    return subprocess.run([sys.executable, "-m", "accelopt_core", "optimize", str(kernel), "--reference",
                           str(tmp_path / "ref.py"), "--preset", "quick", "--workers", "1", "--db",
                           str(tmp_path / "m.db"), *extra], capture_output=True, text=True, timeout=600)


def test_optimize_a_reference_file_task_then_replay_what_it_learned(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(REFERENCE)
    first = optimize(tmp_path, "first")
    assert first.returncode == 0, first.stderr
    assert "simulated trn1" in first.stdout and "speedup" in first.stdout
    assert "the free-axis tile size 256 (a literal)" in first.stdout  # a literal tile size, retuned
    assert "[replayed]" not in first.stderr  # nothing remembered yet
    assert (tmp_path / "first.optimized.py").exists() and (tmp_path / "first.optimized.diff").read_text()
    second = optimize(tmp_path, "second")
    assert second.returncode == 0, second.stderr
    assert "[replayed] memory replay kept" in second.stderr
    off = optimize(tmp_path, "third", "--replay-steps", "0")
    assert off.returncode == 0 and "[replayed]" not in off.stderr


def test_optimize_the_named_kernel_of_a_file_with_several(tmp_path: Path) -> None:
    """The tutorials keep every version of a kernel in one file: the one named is searched, profiled and
    rewritten; the others are left as they were."""
    (tmp_path / "ref.py").write_text(REFERENCE)
    first, body = KERNEL.split("@nki.jit\n")
    versions = first + "".join(f"@nki.jit\n{body.replace('def kernel(', f'def kernel_{v}(')}\n" for v in ("v1", "v2"))
    kernel = tmp_path / "versions.py"
    kernel.write_text(versions)
    command = [sys.executable, "-m", "accelopt_core", "optimize", str(kernel), "--reference", str(tmp_path / "ref.py"),
               "--preset", "quick", "--iterations", "1", "--workers", "1", "--db", str(tmp_path / "m.db")]

    unnamed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert unnamed.returncode == 2 and "pass --kernel-name" in unnamed.stderr

    named = subprocess.run([*command, "--kernel-name", "kernel_v2"], capture_output=True, text=True, timeout=600)
    assert named.returncode == 0, named.stderr
    assert "speedup" in named.stdout
    best = (tmp_path / "versions.optimized.py").read_text()
    v1, v2 = best.split("def kernel_v2(")
    original_v1, original_v2 = versions.split("def kernel_v2(")
    assert v1 == original_v1  # the other version, untouched
    assert v2 != original_v2  # the named one, rewritten


COPY_KERNEL = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out
''')

COPY_REFERENCE = textwrap.dedent('''
    import numpy as np


    def make_inputs(rng):
        return [rng.standard_normal((128, 512), dtype=np.float32)]


    def reference(x):
        return x
''')


def test_a_search_that_finds_nothing_writes_nothing_and_json_goes_to_stdout(tmp_path: Path) -> None:
    """No identical .optimized.py and empty .diff; `--json` is a flag as on profile (stdout holds
    only the JSON), and `--json PATH` still writes the file."""
    import json

    (tmp_path / "copy.py").write_text(COPY_KERNEL)
    (tmp_path / "copy_ref.py").write_text(COPY_REFERENCE)
    command = [sys.executable, "-m", "accelopt_core", "optimize", str(tmp_path / "copy.py"), "--reference",
               str(tmp_path / "copy_ref.py"), "--preset", "quick", "--workers", "1", "--db", str(tmp_path / "m.db")]
    run = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["speedup"] == 1.0 and summary["written"] is None
    assert "no faster correct kernel found: nothing written" in run.stderr
    assert "rewrites in the best kernel" not in run.stderr
    assert "bound by:  dma-bound" in run.stderr and "could help: " in run.stderr  # what bounds it, in words
    assert summary["why_not_faster"][0].startswith("bound by:  dma-bound")
    assert sorted(p.name for p in tmp_path.glob("copy*")) == ["copy.py", "copy_ref.py"]
    to_file = subprocess.run([*command, "--json", str(tmp_path / "summary.json")], capture_output=True, text=True,
                             timeout=600)
    assert to_file.returncode == 0 and json.loads((tmp_path / "summary.json").read_text())["written"] is None
    assert "nothing written" in to_file.stdout


def test_a_kernel_our_check_cannot_finish_is_optimized_not_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    """A check budget too small for any kernel (a full-size kernel on a busy machine): the search still runs
    from the timed baseline, says it is unchecked and how to raise the limit, and keeps no unchecked rewrite."""
    from accelopt_core import cli
    from accelopt_core.profiling.profiler import CheckBudget

    monkeypatch.setattr(CheckBudget, "of", staticmethod(lambda limits, specs, seeds: CheckBudget(300.0, 1024)))
    (tmp_path / "ref.py").write_text(REFERENCE)
    kernel = tmp_path / "k.py"
    kernel.write_text(KERNEL)
    code = cli.main(["optimize", str(kernel), "--reference", str(tmp_path / "ref.py"), "--preset", "quick",
                     "--iterations", "1", "--workers", "1", "--db", str(tmp_path / "m.db")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "baseline timed but unchecked (the check needs more than 0 MB here)" in err
    assert "before: unchecked: the check needs more than 0 MB here (raise it with --memory-mb)" in out
    assert "speedup 1.00x" in out and not (tmp_path / "k.optimized.py").exists()


def test_the_optimize_flags_become_search_settings_and_say_who_plans(tmp_path: Path) -> None:
    from accelopt_core.cli import build_parser
    from accelopt_core.config import LLMSettings
    from accelopt_core.engine import SearchAgents
    from accelopt_core.optimize import search_settings, who_plans
    from accelopt_core.profiling import TaskRef

    (tmp_path / "config.toml").write_text("")
    offline = LLMSettings.load(environ={}, config_path=tmp_path / "config.toml")
    online = LLMSettings.load(environ={}, config_path=tmp_path / "config.toml", base_url="http://llm:8000/v1",
                              model="m", api_key="k")
    args = build_parser().parse_args(["optimize", "k.py", "--task", "silu", "--preset", "quick", "--iterations",
                                      "2", "--time-budget", "0", "--seconds", "30"])
    settings = search_settings(args, TaskRef("silu"), offline)
    assert (settings.preset, settings.iterations, settings.time_budget_s, settings.planner) == ("quick", 2, 0, "rules")
    assert settings.config().time_budget_s is None and settings.profiler.limits.seconds == 30
    assert settings.profiler.check_variant == "small"  # silu is checked on its small size
    assert search_settings(args, TaskRef("silu"), online).planner == "llm"  # an endpoint configured: the LLM plans
    llm_flag = build_parser().parse_args(["optimize", "k.py", "--task", "silu", "--llm"])
    assert search_settings(llm_flag, TaskRef("silu"), offline).planner == "llm"  # asked for: tried, with why not
    assert who_plans(SearchAgents([], planner="rules"), online) == "the rule-based optimizer"
    assert who_plans(SearchAgents([], planner="both"), online) == \
        "the rule-based optimizer and the LLM agents (m at http://llm:8000/v1)"


def test_a_kernel_importing_a_helper_of_its_package_is_optimized(tmp_path: Path) -> None:
    """The nki-library's kernels import their package's helpers (`from ..utils.kernel_helpers import div_ceil`):
    `profile` ran such a kernel, but `optimize` profiled its candidates as a bare "candidate.py", so the relative
    import failed and the kernel 'failed'. Every candidate is now run as the user's file."""
    package = tmp_path / "lib"
    (package / "utils").mkdir(parents=True)
    for folder in (package, package / "utils"):
        (folder / "__init__.py").write_text("")
    (package / "utils" / "sizes.py").write_text("ROW_TILE = 128\n")
    (package / "scale.py").write_text(KERNEL.replace("import neuronxcc.nki.language as nl\n",
                                                     "import neuronxcc.nki.language as nl\n\n"
                                                     "from .utils.sizes import ROW_TILE\n").replace(
        "for r in nl.affine_range(rows // 128):", "for r in nl.affine_range(rows // ROW_TILE):"))
    (tmp_path / "ref.py").write_text(REFERENCE)
    run = subprocess.run([sys.executable, "-m", "accelopt_core", "optimize", str(package / "scale.py"), "--reference",
                          str(tmp_path / "ref.py"), "--preset", "quick", "--iterations", "1", "--workers", "1",
                          "--db", str(tmp_path / "m.db")], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "speedup" in run.stdout


def test_the_progress_line_writes_to_the_stderr_of_its_search(monkeypatch) -> None:
    """The progress line's stream was bound when optimize.py was first imported: a later search (a test under
    capsys, a host that swaps sys.stderr) wrote its progress to an old stream."""
    import io

    from accelopt_core.optimize import ProgressLine

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    assert ProgressLine().stream is stream
