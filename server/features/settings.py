"""Settings from initializationOptions and `workspace/configuration` (section "accelopt"), and
`workspace/didChangeConfiguration`, translated into the session's Settings."""

from __future__ import annotations

import logging
import os
import uuid
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from accelopt_core.config import Secret

from ..config import merge

if TYPE_CHECKING:
    from ..server import AccelOptServer

log = logging.getLogger(__name__)
SECTION = "accelopt"
TOKEN_VARIABLE = "ACCELOPT_SERVICE_TOKEN"  # the profiling service's bearer token, for a remote backend


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


def read_secrets(options: Any, environ: dict[str, str] | None = None) -> dict[str, Secret]:
    """`secrets: {llmApiKey, serviceToken}` from initializationOptions (the VS Code extension keeps them
    in its secret storage), else the service token from ACCELOPT_SERVICE_TOKEN in the server's environment.
    Only non-empty strings are kept; their values are never logged."""
    raw = options.get("secrets") if isinstance(options, dict) else None
    raw = raw if isinstance(raw, dict) else {}
    names = {"llmApiKey": "llm_api_key", "serviceToken": "service_token"}
    secrets = {ours: Secret(raw[theirs]) for theirs, ours in names.items()
               if isinstance(raw.get(theirs), str) and raw[theirs]}
    token = (os.environ if environ is None else environ).get(TOKEN_VARIABLE)
    if "service_token" not in secrets and token:
        secrets["service_token"] = Secret(token)
    return secrets


def apply_initialization_options(ls: AccelOptServer, options: Any) -> None:
    """Options from whoever launched the server are trusted (they may name optimizer agents, and the hosts
    of their backend and LLM endpoint may receive the secrets). `workspaceTrusted: false` (VS Code's
    workspace trust) keeps every kernel of the workspace from running."""
    plain = as_plain(options) or {}
    ls.session.secrets.given = read_secrets(plain)
    if isinstance(plain, dict):
        client = plain.get("client")
        ls.client_name = client if isinstance(client, str) else None
        ls.report_panel = plain.get("reportPanel") is True
        ls.session.trusted = plain.get("workspaceTrusted") is not False
        plain = {k: v for k, v in plain.items() if k not in ("secrets", "workspaceTrusted")}
    settings, problems = merge(ls.session.settings, plain, trusted=True)
    ls.session.apply_settings(settings)
    ls.session.secrets.approve_current_destinations()
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
