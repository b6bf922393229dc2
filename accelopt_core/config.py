"""Settings for the LLM agents: one endpoint (any OpenAI-compatible server), per-agent models, prices
and a budget.

Values come from four places; a later one wins: built-in defaults, the TOML config file
(`ACCELOPT_CONFIG`, else `$XDG_CONFIG_HOME/accelopt/config.toml` or `~/.config/accelopt/config.toml`),
environment variables (`ACCELOPT_LLM_*`), and values passed in by the caller (the editor, with the key
from its secret store). The API key is held in a `Secret` that never prints, and the config file may
not hold a key at all: it may only name the environment variable that does (`api_key_env`).

Example config file::

    [llm]
    base_url = "http://127.0.0.1:8000/v1"
    model = "qwen3-coder"
    api_key_env = "MY_GATEWAY_KEY"
    temperature = 0.7

    [llm.budget]
    max_usd = 5.0

    [llm.prices."qwen3-coder"]
    input = 0.15    # USD per million input tokens
    output = 0.60   # USD per million output tokens

    [llm.agents.executor]
    model = "a-stronger-coder"   # the paper found the executor's model matters most
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

ROLES = ("planner", "executor", "summarizer", "fixer")
ENV_PREFIX = "ACCELOPT_LLM_"


class ConfigError(ValueError):
    """A setting that cannot be used as given (bad type, unknown key, a key in the config file)."""


class Secret:
    """A string that shows as *** in repr, str, f-strings and logs; `reveal()` is the only way out."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __reduce__(self) -> Any:
        raise TypeError("a Secret is not pickled: it would end up on disk or in another process")

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self


@dataclass(frozen=True)
class Price:
    """USD per million input and output tokens for one model."""

    input: float
    output: float

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input + tokens_out * self.output) / 1e6


@dataclass(frozen=True)
class BudgetLimits:
    """When to stop spending: total tokens (in + out), USD, wall seconds. None means no limit."""

    max_tokens: int | None = None
    max_usd: float | None = None
    max_seconds: float | None = None


@dataclass(frozen=True)
class AgentOverride:
    """What one agent does differently from the defaults (None: use the default)."""

    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class RoleSettings:
    """What one call of one agent uses, overrides applied."""

    role: str
    model: str
    temperature: float | None
    max_tokens: int


@dataclass(frozen=True)
class LLMSettings:
    """Everything the LLM client and agents need. Build it with `LLMSettings.load()`."""

    base_url: str | None = None
    model: str | None = None
    api_key: Secret | None = field(default=None, repr=False)
    temperature: float | None = 0.7  # None: not sent (some reasoning models refuse it)
    max_tokens: int = 4096
    token_limit_param: str = "max_tokens"  # or "max_completion_tokens" for endpoints that want it
    timeout: float = 120.0  # seconds for one HTTP request
    max_retries: int = 4  # retries of one call on 429 / 5xx / timeouts / connection errors
    max_retry_wait: float = 60.0  # longest single wait between retries (Retry-After above it fails the call)
    max_concurrency: int = 8
    prices: Mapping[str, Price] = field(default_factory=dict)
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    agents: Mapping[str, AgentOverride] = field(default_factory=dict)
    fixer_tries: int = 2
    summaries_per_iteration: int = 8  # the paper's bound on new experiences per iteration
    config_file: str | None = None  # the file the settings were read from, if any

    def __post_init__(self) -> None:
        if isinstance(self.api_key, str):
            object.__setattr__(self, "api_key", Secret(self.api_key) if self.api_key else None)
        unknown = set(self.agents) - set(ROLES)
        if unknown:
            raise ConfigError(f"unknown agent(s) {', '.join(sorted(unknown))}; agents: {', '.join(ROLES)}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name != "api_key")
        key = "'***'" if self.api_key is not None else "None"
        return f"LLMSettings({shown}, api_key={key})"

    # --- what callers ask ------------------------------------------------------------------------
    def configured(self) -> bool:
        """True when an endpoint, a model and a key are all known; otherwise the offline optimizer runs."""
        return not self.missing()

    def missing(self) -> list[str]:
        """What is missing to reach an endpoint, in words a user can act on."""
        out = []
        if not self.base_url:
            out.append("a base URL (ACCELOPT_LLM_BASE_URL)")
        if not self.model:
            out.append("a model (ACCELOPT_LLM_MODEL)")
        if self.api_key is None:
            out.append("an API key (ACCELOPT_LLM_API_KEY or OPENAI_API_KEY)")
        return out

    def for_role(self, role: str) -> RoleSettings:
        """The model, temperature and token limit one agent uses."""
        if role not in ROLES:
            raise ValueError(f"unknown agent {role!r}; agents: {', '.join(ROLES)}")
        override = self.agents.get(role, AgentOverride())
        model = override.model or self.model or ""
        temperature = override.temperature if override.temperature is not None else self.temperature
        return RoleSettings(role, model, temperature, override.max_tokens or self.max_tokens)

    def price_for(self, model: str) -> Price | None:
        """A model's price: exact name, else the longest configured prefix (dated snapshots share the
        base model's price), else the "*" entry, else None (cost unknown)."""
        if model in self.prices:
            return self.prices[model]
        prefixes = [name for name in self.prices if name != "*" and model.startswith(name)]
        if prefixes:
            return self.prices[max(prefixes, key=len)]
        return self.prices.get("*")

    def describe(self) -> dict[str, Any]:
        """A JSON-safe view for logs and `--json` output, without the key (only whether one is set)."""
        return {
            "base_url": self.base_url, "model": self.model, "api_key_set": self.api_key is not None,
            "temperature": self.temperature, "max_tokens": self.max_tokens, "timeout": self.timeout,
            "max_retries": self.max_retries, "max_concurrency": self.max_concurrency,
            "models": {role: self.for_role(role).model for role in ROLES},
            "prices": {name: [p.input, p.output] for name, p in self.prices.items()},
            "budget": {"max_tokens": self.budget.max_tokens, "max_usd": self.budget.max_usd,
                       "max_seconds": self.budget.max_seconds},
            "config_file": self.config_file,
        }

    # --- loading ---------------------------------------------------------------------------------
    @staticmethod
    def load(config_path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None,
             **passed: Any) -> LLMSettings:
        """Defaults, then the config file, then the environment, then `passed` (None values are ignored).

        `passed` takes any field (`api_key` as a plain string is fine: it is wrapped in a Secret at once);
        `budget`, `agents` and `prices` may be given as dicts in the config file's shape."""
        env = os.environ if environ is None else environ
        path = _config_path(config_path, env)
        values: dict[str, Any] = {}
        key_env: str | None = None
        if path is not None:
            values, key_env = _read_file(path)
            values["config_file"] = str(path)
        _merge(values, _from_env(env))
        _merge(values, _coerce({k: v for k, v in passed.items() if v is not None}, "passed settings"))
        if values.get("api_key") is None:
            for name in ("ACCELOPT_LLM_API_KEY", key_env, "OPENAI_API_KEY"):
                if name and env.get(name):
                    values["api_key"] = Secret(env[name])
                    break
        return LLMSettings(**values)

    def with_overrides(self, **changes: Any) -> LLMSettings:
        """A copy with some values replaced (same coercion as `load`)."""
        merged: dict[str, Any] = {}
        _merge(merged, _coerce({k: v for k, v in changes.items() if v is not None}, "overrides"))
        if "budget" in merged:
            merged["budget"] = replace(self.budget, **{k: v for k, v in vars(merged["budget"]).items()
                                                       if v is not None})
        if "agents" in merged:
            merged["agents"] = {**self.agents, **merged["agents"]}
        if "prices" in merged:
            merged["prices"] = {**self.prices, **merged["prices"]}
        return replace(self, **merged)


# --- helpers ---------------------------------------------------------------------------------------
_SCALARS: dict[str, type] = {
    "base_url": str, "model": str, "temperature": float, "max_tokens": int, "token_limit_param": str,
    "timeout": float, "max_retries": int, "max_retry_wait": float, "max_concurrency": int, "fixer_tries": int,
    "summaries_per_iteration": int,
}
_BUDGET_KEYS = {"max_tokens": int, "max_usd": float, "max_seconds": float}
_AGENT_KEYS = {"model": str, "temperature": float, "max_tokens": int}
_POSITIVE = {"max_tokens", "timeout", "max_concurrency", "max_seconds", "max_usd"}


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "accelopt" / "config.toml"


def _config_path(given: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Path | None:
    """The file to read: given, else $ACCELOPT_CONFIG (must exist), else the default (if it exists)."""
    if given is not None or env.get("ACCELOPT_CONFIG"):
        path = Path(given if given is not None else env["ACCELOPT_CONFIG"]).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return path
    path = default_config_path(env)
    return path if path.is_file() else None


def _convert(value: Any, kind: type, where: str, positive: bool = False) -> Any:
    """`value` as `kind` (numbers from strings too, as env vars are), never negative; `positive`: above 0."""
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    try:
        if isinstance(value, bool):
            raise ValueError
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected {'an integer' if kind is int else 'a number'}, got {value!r}") from None
    if kind is float and not math.isfinite(number):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if number < 0 or (positive and number == 0):
        raise ConfigError(f"{where}: must be positive, got {value!r}")
    return number


def _coerce(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Validate and convert a dict in the config file's shape into LLMSettings keyword arguments."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "api_key":
            out["api_key"] = value if isinstance(value, Secret) else Secret(_convert(value, str, f"{where}: api_key"))
        elif key in _SCALARS:
            out[key] = _convert(value, _SCALARS[key], f"{where}: {key}", key in _POSITIVE)
        elif key == "budget":
            items = vars(value) if isinstance(value, BudgetLimits) else _table(value, f"{where}: budget")
            out["budget"] = BudgetLimits(**_keys(items, _BUDGET_KEYS, f"{where}: budget"))
        elif key == "agents":
            agents = {}
            for role, spec in _table(value, f"{where}: agents").items():
                if role not in ROLES:
                    raise ConfigError(f"{where}: unknown agent {role!r}; agents: {', '.join(ROLES)}")
                items = vars(spec) if isinstance(spec, AgentOverride) else _table(spec, f"{where}: agents.{role}")
                agents[role] = AgentOverride(**_keys(items, _AGENT_KEYS, f"{where}: agents.{role}"))
            out["agents"] = agents
        elif key == "prices":
            prices = {}
            for model, spec in _table(value, f"{where}: prices").items():
                if isinstance(spec, Price):
                    prices[model] = spec
                    continue
                table = _table(spec, f"{where}: prices.{model}")
                if set(table) != {"input", "output"}:
                    raise ConfigError(f"{where}: prices.{model} needs exactly `input` and `output` (USD per "
                                      "million tokens)")
                prices[model] = Price(_convert(table["input"], float, f"{where}: prices.{model}.input"),
                                      _convert(table["output"], float, f"{where}: prices.{model}.output"))
            out["prices"] = prices
        elif key == "config_file":
            out[key] = str(value)
        else:
            raise ConfigError(f"{where}: unknown setting {key!r}")
    return out


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a table, got {value!r}")
    return dict(value)


def _keys(items: Mapping[str, Any], allowed: dict[str, type], where: str) -> dict[str, Any]:
    unknown = set(items) - set(allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(allowed)}")
    return {k: (None if v is None else _convert(v, allowed[k], f"{where}.{k}", k in _POSITIVE))
            for k, v in items.items()}


def _read_file(path: Path) -> tuple[dict[str, Any], str | None]:
    """The [llm] table of a config file as settings, and the name of the env var holding the key."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    table = dict(_table(data.get("llm", {}), f"{path}: [llm]"))
    if "api_key" in table:
        raise ConfigError(f"{path}: the config file must not hold an API key; set ACCELOPT_LLM_API_KEY, or name "
                          "the environment variable that holds it with api_key_env")
    key_env = table.pop("api_key_env", None)
    if key_env is not None and not isinstance(key_env, str):
        raise ConfigError(f"{path}: api_key_env must be the name of an environment variable")
    return _coerce(table, str(path)), key_env


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """ACCELOPT_LLM_BASE_URL, _MODEL, _TEMPERATURE, _MAX_TOKENS, _TIMEOUT, _MAX_RETRIES, _MAX_CONCURRENCY,
    _BUDGET_TOKENS, _BUDGET_USD, _BUDGET_SECONDS, and _<AGENT>_MODEL (e.g. ACCELOPT_LLM_EXECUTOR_MODEL)."""
    raw: dict[str, Any] = {}

    def get(name: str) -> str | None:
        value = env.get(ENV_PREFIX + name, "").strip()
        return value or None

    for key in ("base_url", "model", "temperature", "max_tokens", "timeout", "max_retries", "max_concurrency"):
        value = get(key.upper())
        if value is not None:
            raw[key] = value
    budget = {key: get(name) for key, name in (("max_tokens", "BUDGET_TOKENS"), ("max_usd", "BUDGET_USD"),
                                                ("max_seconds", "BUDGET_SECONDS"))}
    if any(v is not None for v in budget.values()):
        raw["budget"] = {k: v for k, v in budget.items() if v is not None}
    agents = {role: {"model": get(f"{role.upper()}_MODEL")} for role in ROLES if get(f"{role.upper()}_MODEL")}
    if agents:
        raw["agents"] = agents
    try:
        return _coerce(raw, "environment")
    except ConfigError as exc:
        raise ConfigError(f"{exc} (from an {ENV_PREFIX}* variable)") from None


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    """Later sources win field by field, also inside budget, agents and prices."""
    for key, value in new.items():
        if key == "budget" and "budget" in into:
            old: BudgetLimits = into["budget"]
            into["budget"] = replace(old, **{k: v for k, v in vars(value).items() if v is not None})
        elif key == "agents" and "agents" in into:
            merged = dict(into["agents"])
            for role, spec in value.items():
                base = merged.get(role, AgentOverride())
                merged[role] = replace(base, **{k: v for k, v in vars(spec).items() if v is not None})
            into["agents"] = merged
        elif key == "prices" and "prices" in into:
            into["prices"] = {**into["prices"], **value}
        else:
            into[key] = value
