"""The server's settings: one dataclass, filled from defaults, then initializationOptions, then the
client's `workspace/configuration` (section "accelopt"), so an editor can change them at run time."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from accelopt_core.hardware import available_hardware
from accelopt_core.nki.api_versions import FIRST, NEWEST, parse_version

log = logging.getLogger(__name__)

PRESETS = ("quick", "default", "paper")
PROFILE_ON = ("save", "change")


@dataclass(frozen=True)
class Settings:
    """Everything a user can set. Names are the camelCase keys editors send, in snake_case here."""

    hardware: str = "trn1"
    backend: str = "simulator"  # or the URL of a remote profiling service
    llm_endpoint: str | None = None
    llm_model: str | None = None
    search_preset: str = "quick"  # an editor wants answers in minutes, not the paper's hours
    # The search's spend limit in US dollars (the VS Code extension's `search.budget`): the LLM planner's
    # `max_usd`, meaning nothing for the rule-based optimizer. Its wall-clock budget is the preset's `time_budget_s`.
    search_budget: float | None = None
    search_workers: int | None = None
    memory_db: str | None = None  # None: ACCELOPT_MEMORY_DB or the user's data directory
    profile_on: str = "save"  # "change" also profiles while typing (debounced)
    debounce_ms: int = 400
    check_seeds: int = 5
    sandbox_seconds: float = 300.0
    sandbox_memory_mb: int = 8192
    max_quick_fixes: int = 5
    nki_version: str = "0.8"  # the NKI release kernels written for the `nki` package target: its deprecations
    watch: bool = True  # re-profile when kernel and reference files change on disk
    # Agent factories ("module:callable" or "path/to/file.py:callable") for Optimize. Only honoured from
    # initializationOptions (set by whoever launches the server), never from workspace configuration,
    # so opening someone else's repository cannot make the server import code.
    optimizer_agents: tuple[str, ...] = field(default_factory=tuple)
    quick_fix_rules: tuple[str, ...] = field(default_factory=tuple)  # same form; default: the engine's rules

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


_ALIASES = {
    "hardware": "hardware",
    "backend": "backend",
    "searchPreset": "search_preset",
    "searchBudget": "search_budget",
    "searchWorkers": "search_workers",
    "memoryDb": "memory_db",
    "memoryDatabase": "memory_db",
    "profileOn": "profile_on",
    "debounceMs": "debounce_ms",
    "checkSeeds": "check_seeds",
    "sandboxSeconds": "sandbox_seconds",
    "sandboxMemoryMb": "sandbox_memory_mb",
    "maxQuickFixes": "max_quick_fixes",
    "nkiVersion": "nki_version",
    "watch": "watch",
    "optimizerAgents": "optimizer_agents",
    "quickFixRules": "quick_fix_rules",
}
_TRUSTED_ONLY = {"optimizer_agents", "quick_fix_rules"}


# Nested groups as the VS Code extension sends them (`llm.baseUrl`, `search.preset`, `memory.dbPath`):
# group -> {key inside the group: the flat key it stands for}. `llm.endpoint` is the older spelling.
_NESTED = {
    "llm": {"baseUrl": "llmEndpoint", "endpoint": "llmEndpoint", "model": "llmModel"},
    "search": {"preset": "searchPreset", "budget": "searchBudget", "workers": "searchWorkers"},
    "memory": {"dbPath": "memoryDb", "db": "memoryDb"},
}


def _flatten(raw: dict[str, Any]) -> dict[str, Any]:
    """Accept both `{"accelopt": {...}}` and the bare section, flat keys (`searchPreset`) and the
    nested groups of _NESTED; a flat key given next to its nested form wins."""
    section = raw.get("accelopt", raw) if isinstance(raw, dict) else {}
    if not isinstance(section, dict):
        return {}
    flat = dict(section)
    for group, keys in _NESTED.items():
        nested = flat.pop(group, None)
        if not isinstance(nested, dict):
            continue
        for inner, key in keys.items():
            if inner in nested:
                flat.setdefault(key, nested[inner])
    return flat


def _valid(name: str, value: Any) -> Any:
    """The value converted to the field's type, or ValueError saying what is wrong."""
    if name == "hardware" and value not in available_hardware():
        raise ValueError(f"hardware must be one of {', '.join(available_hardware())}")
    if name == "nki_version":
        version = parse_version(str(value))
        if not FIRST <= version <= NEWEST:
            raise ValueError(f"nkiVersion must be an NKI release from {FIRST[0]}.{FIRST[1]} to {NEWEST[0]}.{NEWEST[1]}")
        return f"{version[0]}.{version[1]}"
    if name == "search_preset" and value not in PRESETS:
        raise ValueError(f"searchPreset must be one of {', '.join(PRESETS)}")
    if name == "profile_on" and value not in PROFILE_ON:
        raise ValueError(f"profileOn must be one of {', '.join(PROFILE_ON)}")
    if name == "backend" and not (value == "simulator" or str(value).startswith(("http://", "https://"))):
        raise ValueError("backend must be 'simulator' or an http(s) URL")
    if name in ("debounce_ms", "check_seeds", "sandbox_memory_mb", "max_quick_fixes", "search_workers"):
        number = int(value)
        if number < (0 if name == "debounce_ms" else 1):
            raise ValueError(f"{name} must be positive")
        return number
    if name == "search_budget":
        budget = float(value)
        if budget < 0:
            raise ValueError("search.budget must be a number of US dollars (0: no limit)")
        return budget or None
    if name == "sandbox_seconds":
        seconds = float(value)
        if seconds <= 0:
            raise ValueError("sandboxSeconds must be positive")
        return seconds
    if name in ("optimizer_agents", "quick_fix_rules"):
        items = [value] if isinstance(value, str) else list(value)
        return tuple(str(v) for v in items)
    if name == "watch":
        if not isinstance(value, bool):
            raise ValueError("watch must be true or false")
        return value
    if name == "memory_db":
        return str(value) if value else None
    return value if value is None else str(value)


def merge(base: Settings, raw: Any, trusted: bool = False) -> tuple[Settings, list[str]]:
    """`base` updated from a client's settings object; unknown keys are ignored and bad values kept
    at their previous value, each reported as one problem line (for a window/logMessage)."""
    if not isinstance(raw, dict):
        return base, []
    names = {f.name for f in fields(Settings)}
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in _flatten(raw).items():
        name = _ALIASES.get(key) or ({"llmEndpoint": "llm_endpoint", "llmModel": "llm_model"}.get(key)) or key
        if name == "llm_endpoint" and value == "":
            value = None  # an empty setting in an editor means "not set"
        if name == "llm_model" and value == "":
            value = None
        nullable = name in ("memory_db", "llm_endpoint", "llm_model", "search_workers", "search_budget")
        if name not in names or (value is None and not nullable):
            continue
        if name in _TRUSTED_ONLY and not trusted:
            problems.append(f"accelopt.{key} is only read from initializationOptions; ignored")
            continue
        try:
            changes[name] = None if value is None else _valid(name, value)
        except (TypeError, ValueError) as exc:
            problems.append(f"accelopt.{key}: {exc}")
    return base.replace(**changes), problems


def profiling_changed(old: Settings, new: Settings) -> bool:
    """Whether open kernels must be profiled again after a settings change."""
    keys = ("hardware", "backend", "memory_db", "check_seeds", "sandbox_seconds", "sandbox_memory_mb")
    return any(getattr(old, k) != getattr(new, k) for k in keys)


SECRET_LABELS = {"service_token": "profiling service token", "llm_api_key": "LLM API key"}


def origin(url: str) -> str | None:
    """`scheme://host:port` of a URL (lower case, the default port filled in), or None if it has no host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port}"


def secret_destinations(settings: Settings) -> dict[str, str]:
    """Where each secret goes under these settings: the service token to the backend's origin, the LLM key
    to the endpoint's. A secret without a destination is not sent at all."""
    places = {"service_token": settings.backend if settings.backend != "simulator" else None,
              "llm_api_key": settings.llm_endpoint}
    return {name: where for name, url in places.items() if url and (where := origin(url)) is not None}
