"""What the proxy is doing, as numbered events for the dashboard's live stream.

One `EventBus` per running proxy, owned by the app. Anything may publish, from the event
loop or from the store's worker thread; each event gets the next number. The bus keeps
the recent events (`keep_seconds`, at most `keep_count`) so that a page that lost its
connection and comes back with `Last-Event-ID` gets what it missed, in order; a page
that was away longer is told to reload (`reset`).

Kinds: `job` (queued, running, done, dropped, failed, retrying), `scene` (a break found),
`recap` (a scene recap written), `running` (a running recap version written), `memory`
(a change made through the API), `chat` (a chat file saved), `request` (a chat request
identified), `call` (one of the proxy's own LLM calls, with its tokens), and `reset` (sent,
never kept). Listeners (the metrics) are told of each event as it is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from proxy.core.jsontypes import JSONObject

log = logging.getLogger(__name__)

KINDS = ("job", "scene", "recap", "running", "memory", "chat", "request", "call", "health")


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    kind: str
    data: JSONObject
    at: float


class EventBus:
    """Numbers, keeps and hands out events; subscribers are asyncio queues."""

    def __init__(
        self,
        *,
        keep_seconds: float = 120.0,
        keep_count: int = 5000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keep_seconds = keep_seconds
        self.clock = clock
        self._kept: deque[Event] = deque(maxlen=keep_count)
        self._next = 1
        self._lock = threading.Lock()  # numbering and keeping: any thread
        self._subscribers: set[asyncio.Queue[Event | None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        # Called at once, on the publishing thread (the metrics: counting is thread-safe).
        self.listeners: list[Callable[[Event], None]] = []

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop subscribers live on (the app's, at start-up, from its thread)."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    @property
    def last_id(self) -> int:
        return self._next - 1

    def publish(self, kind: str, **data: Any) -> Event:
        """Number and keep an event, and hand it to every subscriber (thread-safe)."""
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        with self._lock:
            event = Event(self._next, kind, data, self.clock())
            self._next += 1
            self._kept.append(event)
            self._expire(event.at)
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed for a %s event", kind)
        loop = self._loop
        if loop is None or loop.is_closed():
            return event
        # The thread, not `asyncio.get_running_loop()`: on 3.11 that asks the OS for the
        # process id on every call, and the chat path publishes on every request.
        if threading.get_ident() == self._loop_thread:
            self._deliver(event)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._deliver, event)
        return event

    def since(self, last_id: int) -> list[Event] | None:
        """The kept events after `last_id`, or None when some of them are gone already."""
        with self._lock:
            self._expire(self.clock())
            if last_id >= self._next - 1:
                return []
            first = self._kept[0].id if self._kept else self._next
            if last_id + 1 < first:
                return None
            return [e for e in self._kept if e.id > last_id]

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[Event | None]]:
        """A queue that receives every event published from now on (`None`: the end)."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    def close(self) -> None:
        """End every subscription (the server is stopping): each queue gets `None`."""
        for queue in self._subscribers:
            queue.put_nowait(None)

    def _deliver(self, event: Event) -> None:
        for queue in self._subscribers:
            queue.put_nowait(event)

    def _expire(self, now: float) -> None:
        while self._kept and now - self._kept[0].at > self.keep_seconds:
            self._kept.popleft()
