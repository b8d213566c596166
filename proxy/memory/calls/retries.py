"""A chat's memory work tried again later, with no request needed: a failed job once its
cool-down is over, or what the store failed to do (a full disk). Event loop.

One timer per chat: a retry asked for while one waits joins it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from proxy.waits import SERVING

log = logging.getLogger(__name__)


class Retries:
    """The chats' retry timers, and which chats the store failed (said once each)."""

    def __init__(self, store_retry: float = SERVING.store_retry) -> None:
        self.store_retry = store_retry  # seconds before what the store failed is tried again
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._stalled: set[str] = set()  # chats whose start or plan the store failed

    def later(self, chat_id: str, delay: float, then: Callable[[], None]) -> None:
        """`then()` in `delay` seconds, unless a retry of the chat waits already."""
        if chat_id in self._timers:
            return

        def fire() -> None:
            self._timers.pop(chat_id, None)
            then()

        self._timers[chat_id] = asyncio.get_running_loop().call_later(delay, fire)

    def waits(self, chat_id: str) -> bool:
        """Whether a retry of the chat waits."""
        return chat_id in self._timers

    def store_failed(
        self, chat_id: str, doing: str, exc: Exception, again: Callable[[], None]
    ) -> None:
        """The store failed what was `doing` for the chat: `again` in a while; said once
        until it works (`worked`)."""
        if chat_id not in self._stalled:
            log.warning("%s the memory of %s failed (%s); trying again every %.0f s",
                        doing, chat_id, exc, self.store_retry)  # fmt: skip
        self._stalled.add(chat_id)
        self.later(chat_id, self.store_retry, again)

    def worked(self, chat_id: str) -> None:
        """The store did what the chat's memory asked of it."""
        self._stalled.discard(chat_id)

    def cancel(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
