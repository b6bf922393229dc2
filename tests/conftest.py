"""Suite-wide set-up."""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from accelopt_core.blas import single_threaded_blas
from accelopt_core.profiling.confine import OPT_IN_VARIABLE, isolation_problem

single_threaded_blas()

REPO = Path(__file__).resolve().parent.parent


def install_debian_tool(command: str, package: str) -> tuple[str | None, str]:
    """The path of `command` (None when missing) and what went wrong; its Debian package is installed first
    when it is missing (once, by scripts/ensure-debian-packages, as the editor test installs its browser)."""
    found = shutil.which(command)
    if found:
        return found, ""
    run = subprocess.run([str(REPO / "scripts" / "ensure-debian-packages"), package], capture_output=True,
                         text=True, timeout=900)
    return shutil.which(command), (run.stderr or run.stdout).strip()[-300:]


def ensure_debian_tool(command: str, package: str) -> str:
    """The path of `command`, installed when missing. Skips only where this machine cannot install packages."""
    found, problem = install_debian_tool(command, package)
    if found is None:
        pytest.skip(f"{command} is missing and {package} could not be installed here: {problem}")
    return found


def _isolation() -> str | None:
    """Kernels run under bubblewrap in every test that profiles (installed here when missing). Where it
    cannot run, the suite still tests everything else unconfined (the opt-in a user would set) and the
    tests of the isolation itself skip with this reason."""
    _, install_problem = install_debian_tool("bwrap", "bubblewrap")
    problem = isolation_problem()
    if problem is not None:
        os.environ[OPT_IN_VARIABLE] = "1"
        warnings.warn(f"kernels run unconfined in this test run: {problem} {install_problem}".strip(), stacklevel=1)
    return problem


ISOLATION_PROBLEM = _isolation()


@pytest.fixture
def confined() -> None:
    """For tests of the OS isolation: skips, with the reason, where bubblewrap cannot run."""
    if ISOLATION_PROBLEM is not None:
        pytest.skip(f"kernel isolation unavailable here: {ISOLATION_PROBLEM}")


@pytest.fixture(scope="session")
def debian_tool() -> Callable[[str, str], str]:
    """`debian_tool(command, package)`: see `ensure_debian_tool`."""
    return ensure_debian_tool
