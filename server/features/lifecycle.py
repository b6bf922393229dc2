"""initialize, initialized and shutdown: read what the client supports and its settings, start the
watcher and warm the workers, and stop everything the server started."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lsprotocol import types

from accelopt_core.editor_api import INSTALL_HINT, isolation_problem, unconfined_allowed

from ..server import ClientSupport
from . import settings, watcher

if TYPE_CHECKING:
    from ..server import AccelOptServer

log = logging.getLogger(__name__)
_LEVELS = {"error": types.MessageType.Error, "warning": types.MessageType.Warning, "info": types.MessageType.Info}
SETTINGS_WAIT_S = 3.0


async def warn_if_kernels_cannot_be_isolated(ls: AccelOptServer) -> None:
    """Say once, at start, why no kernel will run when bubblewrap cannot (each profile says it again)."""
    problem = await asyncio.to_thread(isolation_problem)
    if problem is not None and not unconfined_allowed():
        ls.session.notice("warning", f"AccelOpt: kernels cannot be isolated here ({problem}), so none is run; "
                          f"{INSTALL_HINT}")


def register(server: AccelOptServer) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls: AccelOptServer, params: types.InitializeParams) -> None:
        ls.loop = asyncio.get_running_loop()
        ls.client = ClientSupport.of(params.capabilities)
        ls.session.notices.append(lambda level, text: ls.window_show_message(
            types.ShowMessageParams(type=_LEVELS.get(level, types.MessageType.Info), message=text)))

        async def ask(question: str, choices: list[str]) -> str | None:
            answer = await ls.window_show_message_request_async(types.ShowMessageRequestParams(
                type=types.MessageType.Warning, message=question,
                actions=[types.MessageActionItem(title=choice) for choice in choices]))
            return answer.title if answer is not None else None

        ls.session.secrets.ask = ask
        settings.apply_initialization_options(ls, params.initialization_options)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: AccelOptServer, params: types.InitializedParams) -> None:
        try:
            await asyncio.wait_for(settings.pull(ls), timeout=SETTINGS_WAIT_S)
        except TimeoutError:
            log.warning("the client did not answer workspace/configuration in time; using defaults")
        finally:
            ls.session.ready.set()
        await settings.register_for_changes(ls)
        watcher.start(ls)
        await warn_if_kernels_cannot_be_isolated(ls)
        await ls.session.profile_lane.warm()

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: AccelOptServer, params: None) -> None:
        watcher.stop(ls)
        await ls.session.shutdown()
