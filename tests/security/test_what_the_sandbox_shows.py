"""Attacks on what the sandbox shows: the kernel's source, a client's label or a kernel file
in the temporary folder must not choose a folder of the disk for the kernel to read."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from attack_kit import DISABLE_AUDIT_HOOK, attack_kernel, run_attack, write_reference

from accelopt_core.profiling import SandboxLimits, SimulatorProfiler, TaskRef
from accelopt_core.profiling.confine import private_folder
from accelopt_core.profiling.profiler import kernel_folder
from accelopt_core.profiling.result import ProfileResult

pytestmark = pytest.mark.usefixtures("confined")

READ_FILES = DISABLE_AUDIT_HOOK + '''
found = []
for path in PATHS:
    try:
        with open(path) as handle:
            found.append(handle.read())
    except OSError as exc:
        found.append(exc.strerror)
raise RuntimeError(f"GOT {found}")
'''


def read_attack(*paths: Path | str) -> str:
    """An attack that reads each path and reports what it got (its text, or why not)."""
    return READ_FILES.replace("PATHS", repr([str(p) for p in paths]))


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> TaskRef:
    return write_reference(tmp_path_factory.mktemp("reference"))


def test_a_relative_import_that_never_runs_does_not_widen_the_view(task: TaskRef, tmp_path: Path) -> None:
    """`from .. import x` in an uncalled function once moved the bound folder up to the import's depth:
    from two folders below, the kernel read another job's reference and a planted secret."""
    (tmp_path / "secret.txt").write_text("planted-secret-41")
    (tmp_path / "other-job").mkdir()
    (tmp_path / "other-job" / "reference.py").write_text("other-job-reference-17")
    kernel_file = tmp_path / "jobs" / "mine" / "kernel.py"
    kernel_file.parent.mkdir(parents=True)
    attack = "def _never():\n    from ... import anything\n" + read_attack(
        tmp_path / "secret.txt", tmp_path / "other-job" / "reference.py")
    result = run_attack(attack, task, kernel_file=kernel_file)
    assert "GOT" in result.error, result.error
    assert "planted-secret-41" not in result.error and "other-job-reference-17" not in result.error


def test_a_package_shows_its_top_folder_and_nothing_beside_it(task: TaskRef, tmp_path: Path) -> None:
    """A kernel in a package (folders with __init__.py) sees the whole package, its helpers, and not the
    folder the package sits in."""
    package = tmp_path / "lib"
    (package / "ops").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ops" / "__init__.py").write_text("")
    (package / "notes.txt").write_text("inside-the-package-3")
    (tmp_path / "beside.txt").write_text("beside-the-package-9")
    result = run_attack(read_attack(package / "notes.txt", tmp_path / "beside.txt"), task,
                        kernel_file=package / "ops" / "kernel.py")
    assert "inside-the-package-3" in result.error and "beside-the-package-9" not in result.error, result.error


def test_a_client_s_label_naming_a_file_in_the_working_folder_shows_nothing(
        task: TaskRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's kernel_label equal to a file in its working folder once bound that folder in: a client
    read a key file and the service log."""
    (tmp_path / "service.key").write_text("service-key-2718")
    monkeypatch.chdir(tmp_path)
    assert kernel_folder("service.key") is None
    profiler_result = _run_labelled(task, "service.key", tmp_path / "service.key")
    assert "GOT" in profiler_result.error and "service-key-2718" not in profiler_result.error


def _run_labelled(task: TaskRef, label: str, target: Path) -> ProfileResult:
    """The reading attack profiled under `label`, as the service profiles a client's kernel."""
    profiler = SimulatorProfiler(seeds=1, limits=SandboxLimits(seconds=30.0, memory_mb=2048), cache={})
    return profiler.profile(attack_kernel(read_attack(target)), task, kernel_label=label)


def test_a_kernel_file_in_the_temporary_folder_sees_no_other_job(task: TaskRef) -> None:
    """Its own folder is the temporary folder, which holds every evaluation's job folder: it gets none."""
    planted = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)  # noqa: SIM115 (removed below)
    kernel = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)  # noqa: SIM115
    try:
        planted.write("temporary-secret-5")
        planted.close()
        kernel.close()
        result = run_attack(read_attack(planted.name), task, kernel_file=Path(kernel.name))
    finally:
        os.remove(planted.name)
        os.remove(kernel.name)
    assert "GOT" in result.error and "temporary-secret-5" not in result.error, result.error


def test_the_temporary_folder_the_home_and_the_root_are_private() -> None:
    assert private_folder(tempfile.gettempdir()) and private_folder("/tmp") and private_folder("/")
    assert private_folder(os.path.expanduser("~")) and private_folder(os.path.dirname(tempfile.gettempdir()))
    assert not private_folder(os.path.join(tempfile.gettempdir(), "some-job"))
