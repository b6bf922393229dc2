"""Each bad input answers in at most three lines on stderr, exit code 2, no traceback, and names
the file (and the line, where there is one) to look at."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_profile_cli import ADD_KERNEL, ADD_REFERENCE, accelopt


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A kernel, add.py, and its reference, add_ref.py."""
    (tmp_path / "add.py").write_text(ADD_KERNEL)
    (tmp_path / "add_ref.py").write_text(ADD_REFERENCE)
    return tmp_path


def _refused(run: subprocess.CompletedProcess[str]) -> str:
    """The answer to bad input: exit 2, nothing on stdout, at most three lines on stderr, no traceback."""
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and 1 <= len(lines) <= 3 and run.stdout == "", run.stderr
    return run.stderr


def test_a_reference_whose_reference_raises_names_its_line(files: Path) -> None:
    (files / "raising_ref.py").write_text(ADD_REFERENCE.replace("return x + y", "return x.nosuch(y)"))
    said = _refused(accelopt("profile", str(files / "add.py"), "--reference", str(files / "raising_ref.py")))
    line = ADD_REFERENCE.splitlines().index("    return x + y") + 1
    assert f"raising_ref.py:{line}: reference() raised AttributeError" in said


def test_a_reference_whose_make_inputs_raises_names_its_line(files: Path) -> None:
    (files / "raising_ref.py").write_text(ADD_REFERENCE.replace("(256, 512), dtype", "(256, -7), dtype"))
    said = _refused(accelopt("profile", str(files / "add.py"), "--reference", str(files / "raising_ref.py")))
    assert "raising_ref.py:6: make_inputs() raised ValueError" in said


def test_an_unknown_preset_is_one_line(files: Path) -> None:
    said = _refused(accelopt("optimize", str(files / "add.py"), "--reference", str(files / "add_ref.py"),
                             "--preset", "fast"))
    assert "invalid choice: 'fast'" in said and "quick" in said and "optimize --help" in said


def test_zero_seeds_are_refused(files: Path) -> None:
    said = _refused(accelopt("profile", str(files / "add.py"), "--reference", str(files / "add_ref.py"),
                             "--seeds", "0"))
    assert "--seeds: must be 1 or more, got 0" in said


def test_a_numpy_function_named_kernel_is_not_an_nki_kernel(files: Path) -> None:
    (files / "numpy_sum.py").write_text("import numpy as np\n\n\ndef kernel(x):\n    return np.sum(x, axis=0)\n")
    said = _refused(accelopt("profile", str(files / "numpy_sum.py"), "--reference", str(files / "add_ref.py")))
    assert "numpy_sum.py:4: `kernel` is not an NKI kernel" in said and "imports no NKI module" in said


@pytest.mark.parametrize(("text", "words"), [("", "the file is empty"),
                                             ("# just a comment\n", "the file defines no function")])
def test_a_file_with_nothing_in_it_says_so(files: Path, text: str, words: str) -> None:
    (files / "blank.py").write_text(text)
    said = _refused(accelopt("profile", str(files / "blank.py"), "--reference", str(files / "add_ref.py")))
    assert f"blank.py: {words}" in said


def test_a_failure_is_said_once_when_stderr_goes_where_stdout_goes(files: Path) -> None:
    """`accelopt profile ... 2>&1 | less`: the report and the stderr line would say the same thing twice."""
    (files / "bad.py").write_text(ADD_KERNEL.replace("value=nl.add(a, b)", "value=nl.add(a, b[:, 0:7])"))
    run = subprocess.run([sys.executable, "-m", "accelopt_core", "profile", str(files / "bad.py"), "--reference",
                          str(files / "add_ref.py")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=300)
    assert run.returncode == 1 and run.stdout.count("error ") == 1 and "accelopt: " not in run.stdout
