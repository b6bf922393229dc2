"""Where the optimization memory lives when nobody says otherwise."""

from __future__ import annotations

import os
import sys

ENV_VAR = "ACCELOPT_MEMORY_DB"


def user_data_dir() -> str:
    """The platform's per-user data directory, so lessons survive reinstalls and are shared by every
    checkout on the machine (the language server and the CLI then read the same memory)."""
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Application Support")
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return os.environ["LOCALAPPDATA"]
    xdg = os.environ.get("XDG_DATA_HOME", "")
    # The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return xdg
    return os.path.expanduser("~/.local/share")


def default_path() -> str:
    """`ACCELOPT_MEMORY_DB` wins so tests, CI and teams can point at a file of their choosing."""
    override = os.environ.get(ENV_VAR)
    if override:
        return override
    return os.path.join(user_data_dir(), "accelopt", "memory.db")
