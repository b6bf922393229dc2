"""`accelopt migrate KERNEL` as a user runs it: a real subprocess, the migrated file next to the kernel, both
versions on the same 5 fresh seeds, and the exit code saying which of the four outcomes it was."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LEGACY_ADD = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 128):
            a = nl.load(x[i * 128:(i + 1) * 128, :])
            b = nl.load(y[i * 128:(i + 1) * 128, :])
            s = nl.add(a, b)
            nl.store(out[i * 128:(i + 1) * 128, :], value=s)
        return out
''')

ADD_REFERENCE = textwrap.dedent('''
    import numpy as np


    def make_inputs(rng):
        return [rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)]


    def reference(x, y):
        return x + y
''')


def migrate(tmp_path: Path, kernel: str, *options: str, reference: str = ADD_REFERENCE
            ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "kernel.py").write_text(kernel)
    (tmp_path / "ref.py").write_text(reference)
    return subprocess.run([sys.executable, "-m", "accelopt", "migrate", str(tmp_path / "kernel.py"),
                           "--reference", str(tmp_path / "ref.py"), *options],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_a_complete_migration_that_agrees_exits_0_and_shows_both_latencies(tmp_path: Path):
    run = migrate(tmp_path, LEGACY_ADD)
    assert run.returncode == 0, run.stdout + run.stderr
    migrated = (tmp_path / "kernel.migrated.py").read_text()
    assert "neuronxcc" not in migrated and "nisa.tensor_tensor(dst=s, data1=a, data2=b, op=nl.add)" in migrated
    assert "original  " in run.stdout and "migrated  " in run.stdout
    assert run.stdout.count("(simulated trn2), correct") == 2
    assert "(the same fresh seeds for both)" in run.stdout and "migration complete" in run.stdout


def test_json_gives_both_profiles_on_the_same_five_seeds_and_out_names_the_file(tmp_path: Path):
    run = migrate(tmp_path, LEGACY_ADD, "--json", "--out", str(tmp_path / "new.py"))
    report = json.loads(run.stdout)
    assert run.returncode == report["exit_code"] == 0
    assert report["out"] == str(tmp_path / "new.py") and (tmp_path / "new.py").exists()
    assert report["complete"] and report["agree"] and report["needs_person"] == []
    assert len(report["original"]["seeds"]) == 5 and report["original"]["seeds"] == report["migrated"]["seeds"]
    assert report["original"]["hardware"] == report["migrated"]["hardware"] == "trn2"


def test_lines_left_for_a_person_are_listed_as_file_line_reason_and_exit_3(tmp_path: Path):
    kernel = LEGACY_ADD.replace("s = nl.add(a, b)", "s = nl.softmax(nl.add(a, b) * 0.0, axis=1) * 0.0 + nl.add(a, b)")
    run = migrate(tmp_path, kernel)
    assert run.returncode == 3, run.stdout + run.stderr
    out = tmp_path / "kernel.migrated.py"
    line = next(n for n, text in enumerate(out.read_text().splitlines(), 1) if "nl.softmax" in text)
    assert f"{out}:{line}: nl.softmax has no mechanical nki-package form here" in run.stdout


def test_versions_that_do_not_pass_exit_3(tmp_path: Path):
    run = migrate(tmp_path, LEGACY_ADD, reference=ADD_REFERENCE.replace("return x + y", "return x - y"))
    assert run.returncode == 3, run.stdout + run.stderr
    assert "WRONG RESULTS" in run.stdout and "the versions do not both pass" in run.stdout


def test_a_kernel_that_cannot_run_exits_1(tmp_path: Path):
    run = migrate(tmp_path, LEGACY_ADD.replace("x.shape[0] // 128", "x.shape[0] // 64"))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "failed to run" in run.stdout


def test_a_kernel_already_on_the_nki_package_is_bad_input(tmp_path: Path):
    modern = LEGACY_ADD.replace("neuronxcc.nki", "nki").replace("import nki as nki", "import nki")
    run = migrate(tmp_path, modern)
    assert run.returncode == 2 and "imports nothing from neuronxcc.nki" in run.stderr
    assert not (tmp_path / "kernel.migrated.py").exists()
