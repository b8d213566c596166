"""The client side of the relay: HTTP/1.1 over pooled keep-alive connections, each answer
parsed by httptools (llhttp, the parser Node.js uses) and handed on as it arrives.

Why not aiohttp's client, which the proxy used before: measured on a relayed chat
request, it ran some 350 Python calls per request (request and response objects, a
multidict per side, cookie, redirect, trace and timer machinery that a relay never uses),
about 40 % of what a bare aiohttp hop spends, and the largest part of what a request costs
the proxy. Here a request is one write of its head and body, and its answer a few parser
callbacks: the body's chunks go to the reader as they were read from the socket. Only the
chunked transfer coding is undone, as aiohttp did; a `Content-Encoding` stays as it came.
Header bytes are read as UTF-8 with `surrogateescape`, as aiohttp read them, so that they
go back to the client as they came.

This module is one connection (`Connection`); `proxy.pool` keeps them, at most so many
open at once, and sends requests over them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Final, Protocol

import httptools

from proxy.core.headers import Headers
from proxy.errors import UpstreamError, UpstreamTimeout, UpstreamUnreachable

HIGH_WATER: Final = 256 * 1024  # bytes read ahead of the reader before reading pauses
_TIMEOUT = re.compile(r"(?i)(?:^|[,;\s])timeout\s*=\s*(\d+)")


def kept_for(keep_alive: str) -> float | None:
    """How long a connection may sit idle before its reuse, from the server's own
    `Keep-Alive: timeout=N` (llama.cpp's server says 5 s): a second less, or half of it,
    so that a request is not sent just as the server closes it (a POST that fails so is
    not sent again). None when the header names no timeout."""
    found = _TIMEOUT.search(keep_alive)
    if found is None:
        return None
    timeout = float(found.group(1))
    return max(timeout - 1.0, timeout / 2)


Key = tuple[str, str, int]  # scheme, host, port


class Keeper(Protocol):
    """Who keeps a connection (`proxy.pool.Pool`): told when it can be reused and when it
    closed."""

    read_timeout: float

    def put(self, conn: Connection) -> None: ...

    def lost(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One connection to an upstream, carrying one exchange at a time."""

    def __init__(self, pool: Keeper, key: Key, origin: str) -> None:
        self.pool, self.key, self.origin = pool, key, origin
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False  # it carried an exchange before this one
        self.idle_since = 0.0
        self.exchange = 0  # numbers the exchanges: a late release of an old one is no-op
        self.busy = False
        self._waiter: asyncio.Future[None] | None = None
        # One timer per connection, armed at most once per read timeout: a reader that
        # waits sets `_deadline`, and the timer, when it fires, looks whether that passed
        # (a timer per wait cost a heap push and a cancelled entry per request).
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._paused = False
        self._begin(head_only=False)

    def _begin(self, *, head_only: bool) -> None:
        """Fresh state for the next exchange (and a fresh parser: one never carries a
        HEAD answer's state, whose length it would wait for, into the next)."""
        self.parser = httptools.HttpResponseParser(self)
        self.head_only = head_only
        self.status = 0
        self.reason = ""
        self.headers: Headers = []
        self.length: int | None = None
        self.chunked = False
        self.informational = False
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.keep_for: float | None = None  # idle seconds the server allows (`kept_for`)
        self.received = False  # any byte of this exchange's answer
        self.error: UpstreamError | None = None
        self.buffer: list[bytes] = []
        self.buffered = 0

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.busy or self.complete:
            # Bytes on an idle connection, or after the whole answer: it is in no state
            # to carry another exchange.
            self.keep_alive = False
            if not self.busy:
                self.close()
            return
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            message = f"upstream sent a malformed answer ({exc})"
            self._fail(UpstreamUnreachable(message, code="upstream_broken"))
            self.close()
            return
        if self.buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_done and not self.complete and self.error is None:
            if self.length is None and not self.chunked and exc is None:
                self.complete = True  # an answer without a length ends with its connection
            else:
                self._fail(_broken(self.origin, exc, started=True))
        elif not self.head_done and self.error is None:
            self._fail(_broken(self.origin, exc, started=False))
        self.pool.lost(self)
        self._wake()

    # -- httptools callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.reason, self.headers = "", []

    def on_status(self, status: bytes) -> None:
        self.reason += status.decode("utf-8", "surrogateescape")

    def on_header(self, name: bytes, value: bytes) -> None:
        key, text = (
            name.decode("utf-8", "surrogateescape"),
            value.decode("utf-8", "surrogateescape"),
        )
        self.headers.append((key, text))
        lowered = key.lower()
        if lowered == "content-length" and text.strip().isdigit():
            self.length = int(text)
        elif lowered == "transfer-encoding" and "chunked" in text.lower():
            self.chunked = True
        elif lowered == "keep-alive":
            self.keep_for = kept_for(text)

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.informational = True  # 100 Continue, 103 Early Hints: the answer follows
            self.length, self.chunked = None, False
            return
        self.status, self.head_done = status, True
        if status in (204, 304):
            self.length = 0
        if self.head_only:
            # llhttp would wait for the body a HEAD answer's length announces: this
            # exchange ends here, and the connection with it.
            self.complete = True

    def on_body(self, body: bytes) -> None:
        if not self.head_only:
            self.buffer.append(body)
            self.buffered += len(body)

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive() and not self.head_only

    # -- the exchange ----------------------------------------------------------------------

    def send(self, head: bytes, body: bytes | None, head_only: bool) -> int:
        """Start an exchange; answers its number (for `release` and `close`)."""
        self._begin(head_only=head_only)
        self.exchange += 1
        self.busy = True
        assert self.transport is not None
        self.transport.write(head + body if body else head)
        return self.exchange

    async def answer(self) -> None:
        """Wait for the answer's status line and headers."""
        while not self.head_done:
            if self.error is not None:
                raise self.error
            await self._wait()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; raises `UpstreamError` when it breaks off."""
        while True:
            if self.buffer:
                data = self.buffer[0] if len(self.buffer) == 1 else b"".join(self.buffer)
                self.buffer.clear()
                self.buffered = 0
                if self._paused and self.transport is not None and not self.closed:
                    self._paused = False
                    self.transport.resume_reading()
                yield data
            elif self.complete:
                return
            elif self.error is not None:
                raise self.error
            else:
                await self._wait()

    def at_hand(self, exchange: int) -> bool:
        """Whether `exchange`'s body has bytes, or its end, here already (no wait)."""
        return exchange == self.exchange and bool(self.buffer or self.complete)

    def release(self, exchange: int) -> None:
        """The reader is done with `exchange`: a whole answer's connection goes back to
        the pool, any other is closed."""
        if exchange != self.exchange or not self.busy:
            return
        self.busy = False
        if self.complete and self.keep_alive and not self.closed and not self.buffer:
            self.pool.put(self)
        else:
            self.close()

    def drop(self, exchange: int) -> None:
        """Close the connection under `exchange` (the upstream stops generating)."""
        if exchange == self.exchange and self.busy:
            self.close()

    def close(self) -> None:
        self.busy = False
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.pool.lost(self)

    async def _wait(self) -> None:
        waiter = self._waiter = self.loop.create_future()
        self._deadline = deadline = self.loop.time() + self.pool.read_timeout
        timer = self._timer
        if (timer is None or deadline < timer.when()) and not self.closed:
            if timer is not None:
                timer.cancel()
            self._timer = self.loop.call_at(deadline, self._check_deadline)
        try:
            await waiter
        finally:
            self._waiter = None
            self._deadline = None

    def _check_deadline(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None or self.closed:
            return  # nobody waits now: the next wait arms it again
        if self.loop.time() < deadline:
            self._timer = self.loop.call_at(deadline, self._check_deadline)
        else:
            self._timed_out()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _timed_out(self) -> None:
        seconds = f"{self.pool.read_timeout:g} s"
        if self.head_done:
            message = f"upstream stopped sending (no data for {seconds})"
        else:
            message = f"upstream {self.origin} did not answer in time ({seconds})"
        self._fail(UpstreamTimeout(message, code="upstream_timeout"))
        self.close()
        self._wake()

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error


def _broken(origin: str, exc: Exception | None, *, started: bool) -> UpstreamError:
    why = repr(exc) if exc is not None else "the server closed the connection"
    if started:
        return UpstreamUnreachable(f"upstream connection broke ({why})", code="upstream_broken")
    message = f"cannot reach upstream {origin}: {why}"
    return UpstreamUnreachable(message, code="upstream_unreachable")
