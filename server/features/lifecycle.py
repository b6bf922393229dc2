"""initialize, initialized and shutdown: read what the client supports and its settings, start the
watcher and warm the workers, and stop everything the server started."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lsprotocol import types

from ..server import ClientSupport
from . import settings, watcher

if TYPE_CHECKING:
    from ..server import AccelOptServer

log = logging.getLogger(__name__)
_LEVELS = {"error": types.MessageType.Error, "warning": types.MessageType.Warning, "info": types.MessageType.Info}
SETTINGS_WAIT_S = 3.0


def register(server: AccelOptServer) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls: AccelOptServer, params: types.InitializeParams) -> None:
        ls.loop = asyncio.get_running_loop()
        ls.client = ClientSupport.of(params.capabilities)
        ls.session.notices.append(lambda level, text: ls.window_show_message(
            types.ShowMessageParams(type=_LEVELS.get(level, types.MessageType.Info), message=text)))
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
        await ls.session.profile_lane.warm()

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: AccelOptServer, params: None) -> None:
        watcher.stop(ls)
        await ls.session.shutdown()
