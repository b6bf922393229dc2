"""Suite-wide set-up."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from accelopt_core.blas import single_threaded_blas

single_threaded_blas()

REPO = Path(__file__).resolve().parent.parent


def ensure_debian_tool(command: str, package: str) -> str:
    """The path of `command`; its Debian package is installed first when it is missing (once, by
    scripts/ensure-debian-packages, as the editor test installs its browser). Skips only where this
    machine cannot install packages."""
    found = shutil.which(command)
    if found:
        return found
    run = subprocess.run([str(REPO / "scripts" / "ensure-debian-packages"), package], capture_output=True,
                         text=True, timeout=900)
    found = shutil.which(command)
    if found is None:
        pytest.skip(f"{command} is missing and {package} could not be installed here: "
                    f"{(run.stderr or run.stdout).strip()[-300:]}")
    return found


@pytest.fixture(scope="session")
def debian_tool() -> Callable[[str, str], str]:
    """`debian_tool(command, package)`: see `ensure_debian_tool`."""
    return ensure_debian_tool
