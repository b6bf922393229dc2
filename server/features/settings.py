"""Settings from initializationOptions and `workspace/configuration` (section "accelopt"), and
`workspace/didChangeConfiguration`, translated into the session's Settings."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from accelopt_core.config import Secret

from ..config import merge

if TYPE_CHECKING:
    from ..server import AccelOptServer

log = logging.getLogger(__name__)
SECTION = "accelopt"


def as_plain(value: Any) -> Any:
    """Settings may arrive as pygls' generic namedtuples (the structure of LSPAny); make them dicts."""
    if hasattr(value, "_asdict"):
        return {k: as_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: as_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    return value


def _report(ls: AccelOptServer, problems: list[str]) -> None:
    for problem in problems:
        ls.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=problem))


def read_secrets(options: Any) -> dict[str, Secret]:
    """`secrets: {llmApiKey, serviceToken}` from initializationOptions (the VS Code extension keeps them
    in its secret storage). Only non-empty strings are kept; their values are never logged."""
    raw = options.get("secrets") if isinstance(options, dict) else None
    if not isinstance(raw, dict):
        return {}
    names = {"llmApiKey": "llm_api_key", "serviceToken": "service_token"}
    return {ours: Secret(raw[theirs]) for theirs, ours in names.items()
            if isinstance(raw.get(theirs), str) and raw[theirs]}


def apply_initialization_options(ls: AccelOptServer, options: Any) -> None:
    """Options from whoever launched the server are trusted (they may name optimizer agents)."""
    plain = as_plain(options) or {}
    if isinstance(plain, dict):
        ls.session.secrets = read_secrets(plain)
        client = plain.get("client")
        ls.client_name = client if isinstance(client, str) else None
        ls.report_panel = plain.get("reportPanel") is True
        plain = {k: v for k, v in plain.items() if k != "secrets"}
    settings, problems = merge(ls.session.settings, plain, trusted=True)
    ls.session.apply_settings(settings)
    _report(ls, problems)


def apply(ls: AccelOptServer, raw: Any) -> None:
    settings, problems = merge(ls.session.settings, as_plain(raw) or {}, trusted=False)
    _report(ls, problems)
    if settings != ls.session.settings:
        ls.session.apply_settings(settings)
        from . import watcher

        watcher.restart_if_needed(ls)


async def pull(ls: AccelOptServer) -> None:
    """Ask the client for our section; a client without workspace/configuration keeps the defaults."""
    if not ls.client.configuration:
        return
    try:
        values = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)]))
    except Exception as exc:
        log.warning("workspace/configuration failed: %s", exc)
        return
    first = as_plain(values[0]) if values else None
    if isinstance(first, dict):
        apply(ls, {SECTION: first})


async def register_for_changes(ls: AccelOptServer) -> None:
    """With the pull model a client only says "something changed" if we register for it."""
    if not ls.client.config_registration:
        return
    registration = types.Registration(id=str(uuid.uuid4()), method=types.WORKSPACE_DID_CHANGE_CONFIGURATION,
                                      register_options=types.DidChangeConfigurationRegistrationOptions(
                                          section=SECTION))
    try:
        await ls.client_register_capability_async(types.RegistrationParams(registrations=[registration]))
    except Exception as exc:
        log.info("client refused configuration change registration: %s", exc)


def register(server: AccelOptServer) -> None:
    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: AccelOptServer, params: types.DidChangeConfigurationParams) -> None:
        pushed = as_plain(params.settings)
        if isinstance(pushed, dict) and isinstance(pushed.get(SECTION), dict):
            apply(ls, pushed)
        else:
            await pull(ls)
