"""The user's secrets (the LLM API key, the profiling service's token) and the hosts they may go to.

A secret comes from the client's initializationOptions and never enters Settings (which is logged and compared).
It goes into a worker's request only when the settings send it to a host the user chose: one of the settings the
server was launched with, or one the user confirmed when workspace settings named a new host.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from accelopt_core.config import Secret

from .config import SECRET_LABELS, Settings, secret_destinations

log = logging.getLogger(__name__)

SEND, WITHHOLD = "Send", "Don't send"
Ask = Callable[[str, list[str]], Awaitable[str | None]]  # (question, answers) -> the answer chosen


class Secrets:
    """The secrets the client gave and the origins (scheme://host:port) they may be sent to."""

    def __init__(self, settings: Callable[[], Settings], notice: Callable[..., None],
                 on_approved: Callable[[], None]):
        self._settings = settings
        self._notice = notice
        self._on_approved = on_approved  # a host was approved: what waited for the secret may run now
        self.given: dict[str, Secret] = {}  # llm_api_key, service_token
        self.approved_origins: set[str] = set()
        self.ask: Ask | None = None  # how to ask the user; None: never asked, nothing sent to a new host
        self._asked: set[tuple[str, str]] = set()
        self._questions: set[asyncio.Future[None]] = set()

    def approve_current_destinations(self) -> None:
        """Whoever launched the server chose the current settings: their hosts may receive the secrets."""
        self.approved_origins.update(secret_destinations(self._settings()).values())

    def destination_approved(self, name: str) -> bool:
        """Whether secret `name` may go where the settings send it (True when it goes nowhere); asks the user
        once per host when workspace settings named a host not approved yet."""
        where = secret_destinations(self._settings()).get(name)
        if where is None or where in self.approved_origins:
            return True
        if (name, where) not in self._asked:
            self._asked.add((name, where))
            question = asyncio.ensure_future(self._ask_approval(name, where))
            self._questions.add(question)
            question.add_done_callback(self._questions.discard)
        return False

    def reveal(self, name: str) -> str | None:
        """A secret's value for a worker's request (a Secret refuses to be pickled; the worker never logs
        it): only when the settings send it somewhere approved."""
        value = self.given.get(name)
        if value is None or name not in secret_destinations(self._settings()) or not self.destination_approved(name):
            return None
        return value.reveal()

    async def _ask_approval(self, name: str, where: str) -> None:
        question = (f"The workspace settings send your {SECRET_LABELS[name]} to {where}, which AccelOpt has not "
                    "sent it to before. Send it there?")
        answer = None
        if self.ask is not None:
            try:
                answer = await self.ask(question, [SEND, WITHHOLD])
            except Exception as exc:  # a client that cannot ask: the secret stays here
                log.info("could not ask about %s: %s", where, exc)
        if answer != SEND:
            self._notice("warning", f"AccelOpt: your {SECRET_LABELS[name]} is not sent to {where} "
                         "(named by workspace settings, not approved)", once=True)
            return
        self.approved_origins.add(where)
        self._on_approved()
