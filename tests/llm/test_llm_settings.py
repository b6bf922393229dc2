"""LLM settings: defaults < config file < environment < passed values; the key stays masked and out of
config files; per-agent models and prices."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path

import pytest

from accelopt_core.config import AgentOverride, BudgetLimits, ConfigError, LLMSettings, Price, Secret

FILE = """
[llm]
base_url = "http://file.example/v1"
model = "file-model"
temperature = 0.2
max_tokens = 2000
api_key_env = "MY_GATEWAY_KEY"

[llm.budget]
max_usd = 5.0
max_tokens = 1_000_000

[llm.prices."file-model"]
input = 0.15
output = 0.60

[llm.agents.executor]
model = "file-executor"
max_tokens = 8000

[llm.agents.summarizer]
temperature = 0.0
"""


def write(tmp_path: Path, text: str = FILE) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_nothing_configured_means_the_offline_optimizer(tmp_path: Path) -> None:
    settings = LLMSettings.load(environ={"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)})
    assert not settings.configured() and settings.config_file is None
    assert settings.missing() == ["a base URL (ACCELOPT_LLM_BASE_URL)", "a model (ACCELOPT_LLM_MODEL)",
                                  "an API key (ACCELOPT_LLM_API_KEY or OPENAI_API_KEY)"]
    assert not LLMSettings.load(environ={"XDG_CONFIG_HOME": str(tmp_path), "ACCELOPT_LLM_BASE_URL": "http://x/v1",
                                         "ACCELOPT_LLM_MODEL": "m"}).configured()


def test_environment_alone_configures_and_openai_api_key_is_the_fallback(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path), "ACCELOPT_LLM_BASE_URL": "http://env/v1", "ACCELOPT_LLM_MODEL": "env-m",
           "OPENAI_API_KEY": "sk-openai", "ACCELOPT_LLM_TEMPERATURE": "0.3", "ACCELOPT_LLM_BUDGET_USD": "1.5",
           "ACCELOPT_LLM_EXECUTOR_MODEL": "env-exec"}
    settings = LLMSettings.load(environ=env)
    assert settings.configured() and settings.api_key is not None and settings.api_key.reveal() == "sk-openai"
    assert settings.temperature == 0.3 and settings.budget.max_usd == 1.5
    assert settings.for_role("executor").model == "env-exec" and settings.for_role("planner").model == "env-m"
    env["ACCELOPT_LLM_API_KEY"] = "sk-accelopt"
    assert LLMSettings.load(environ=env).api_key.reveal() == "sk-accelopt"  # type: ignore[union-attr]


def test_file_then_environment_then_passed_values_win(tmp_path: Path) -> None:
    path = write(tmp_path)
    env = {"ACCELOPT_CONFIG": str(path), "MY_GATEWAY_KEY": "sk-from-named-var", "OPENAI_API_KEY": "sk-openai"}
    from_file = LLMSettings.load(environ=env)
    assert from_file.base_url == "http://file.example/v1" and from_file.model == "file-model"
    assert from_file.api_key.reveal() == "sk-from-named-var"  # type: ignore[union-attr]
    assert from_file.config_file == str(path)
    assert from_file.budget == BudgetLimits(max_tokens=1_000_000, max_usd=5.0)
    assert from_file.for_role("executor") == from_file.for_role("executor").__class__(
        "executor", "file-executor", 0.2, 8000)
    assert from_file.for_role("summarizer").temperature == 0.0 and from_file.for_role("fixer").model == "file-model"
    assert from_file.price_for("file-model") == Price(0.15, 0.60)

    env.update({"ACCELOPT_LLM_MODEL": "env-model", "ACCELOPT_LLM_BUDGET_TOKENS": "500",
                "ACCELOPT_LLM_EXECUTOR_MODEL": "env-executor"})
    from_env = LLMSettings.load(environ=env)
    assert from_env.model == "env-model" and from_env.base_url == "http://file.example/v1"
    assert from_env.budget == BudgetLimits(max_tokens=500, max_usd=5.0)  # merged field by field
    assert from_env.for_role("executor").model == "env-executor"
    assert from_env.for_role("executor").max_tokens == 8000  # the file's override of another field stays

    passed = LLMSettings.load(environ=env, model="passed-model", api_key="sk-from-secret-store", temperature=None,
                              budget={"max_seconds": 60}, agents={"planner": {"model": "passed-planner"}})
    assert passed.model == "passed-model" and passed.temperature == 0.2  # None means "not given"
    assert passed.api_key.reveal() == "sk-from-secret-store"  # type: ignore[union-attr]
    assert passed.budget == BudgetLimits(max_tokens=500, max_usd=5.0, max_seconds=60)
    assert passed.for_role("planner").model == "passed-planner"
    assert passed.for_role("executor").model == "env-executor"


def test_an_explicit_config_path_and_the_default_location(tmp_path: Path) -> None:
    path = write(tmp_path)
    assert LLMSettings.load(path, environ={"XDG_CONFIG_HOME": str(tmp_path)}).model == "file-model"
    default = tmp_path / "xdg" / "accelopt" / "config.toml"
    default.parent.mkdir(parents=True)
    default.write_text('[llm]\nmodel = "default-file"\n')
    assert LLMSettings.load(environ={"XDG_CONFIG_HOME": str(tmp_path / "xdg")}).model == "default-file"
    with pytest.raises(ConfigError, match="does not exist"):
        LLMSettings.load(environ={"ACCELOPT_CONFIG": str(tmp_path / "missing.toml")})


@pytest.mark.parametrize(("text", "message"), [
    ('[llm]\napi_key = "sk-on-disk"\n', "must not hold an API key"),
    ('[llm]\nmodle = "typo"\n', "unknown setting 'modle'"),
    ("[llm]\ntemperature = 'hot'\n", "temperature: expected a number"),
    ("[llm]\nmax_concurrency = 0\n", "max_concurrency: must be positive"),
    ("[llm.agents.critic]\nmodel = 'x'\n", "unknown agent 'critic'"),
    ("[llm.prices.m]\ninput = 1\n", "needs exactly `input` and `output`"),
    ("[llm.budget]\nmax_dollars = 3\n", "unknown key"),
    ("[llm\n", "cannot read config file"),
])
def test_bad_config_files_are_refused_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LLMSettings.load(write(tmp_path, text), environ={"XDG_CONFIG_HOME": str(tmp_path)})


def test_bad_environment_values_name_the_variable_family(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"max_tokens: expected an integer.*ACCELOPT_LLM_"):
        LLMSettings.load(environ={"XDG_CONFIG_HOME": str(tmp_path), "ACCELOPT_LLM_MAX_TOKENS": "lots"})


def test_the_key_is_masked_everywhere_it_could_leak() -> None:
    key = "sk-live-abcdef0123456789"
    settings = LLMSettings(base_url="http://x/v1", model="m", api_key=key)
    assert isinstance(settings.api_key, Secret) and settings.api_key.reveal() == key
    for text in (repr(settings), str(settings), f"{settings}", f"{settings.api_key}", str(settings.api_key),
                 repr(dataclasses.asdict(settings)), str(settings.describe()),
                 repr(settings.with_overrides(model="n")), repr(copy.deepcopy(settings))):
        assert key not in text
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(settings)
    assert settings.api_key == Secret(key) and LLMSettings(api_key="").api_key is None


def test_prices_by_exact_name_prefix_or_wildcard() -> None:
    settings = LLMSettings(prices={"gpt-x": Price(1, 2), "gpt-x-mini": Price(0.1, 0.2), "*": Price(9, 9)})
    assert settings.price_for("gpt-x") == Price(1, 2)
    assert settings.price_for("gpt-x-mini-2025-01-01") == Price(0.1, 0.2)  # the longest prefix
    assert settings.price_for("other") == Price(9, 9)
    assert LLMSettings().price_for("anything") is None
    assert Price(3, 15).cost(1_000_000, 100_000) == pytest.approx(4.5)


def test_overrides_and_roles() -> None:
    settings = LLMSettings(model="base", agents={"fixer": AgentOverride(model="fixer-m")})
    changed = settings.with_overrides(agents={"executor": {"model": "exec-m"}}, budget={"max_usd": 1})
    assert changed.for_role("fixer").model == "fixer-m" and changed.for_role("executor").model == "exec-m"
    assert changed.budget.max_usd == 1.0
    with pytest.raises(ValueError, match="unknown agent"):
        settings.for_role("critic")
