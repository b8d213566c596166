"""The listening socket of `serve`, with a deadline for each connection's first request head.

aiohttp's server waits for a request head as long as the client likes: 300 clients that
send half a head and stall hold 300 connections open for good. Each connection here must
finish its first head within `server.header_timeout` seconds, or it is closed. Later
requests on a kept connection fall under aiohttp's keep-alive timeout, which closes a
connection that waits on an unfinished head.

The deadline sits in front of aiohttp's protocol, watching bytes only (a head ends at its
first blank line): nothing of aiohttp's internals is touched, and once the head is in
each call is passed on with no work of its own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from aiohttp import web

log = logging.getLogger(__name__)

# A head ends at an empty line; a lenient client may end its lines with a bare LF.
_ENDS: Final = (b"\r\n\r\n", b"\n\n")


class HeadDeadline(asyncio.Protocol):
    """aiohttp's protocol for one connection, closed when its first head is late."""

    def __init__(self, inner: asyncio.Protocol, timeout: float) -> None:
        self.inner = inner
        self.timeout = timeout
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""  # the last bytes seen, for an end split across two reads
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.timeout, self._late)
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._timer is not None:
            seen = self._tail + data
            if any(end in seen for end in _ENDS):
                self._timer.cancel()
                self._timer = None
            else:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def _late(self) -> None:
        self._timer = None
        if self._transport is not None and not self._transport.is_closing():
            peer = self._transport.get_extra_info("peername")
            log.info("closed a connection from %s: no whole request head in %g s",
                     peer, self.timeout)  # fmt: skip
            self._transport.close()


async def listen(
    runner: web.AppRunner, host: str, port: int, header_timeout: float
) -> asyncio.Server:
    """Open the listening socket for `runner`'s app (set up already); the caller closes it
    before `runner.cleanup()`, which ends the connections still open."""
    server = runner.server
    if server is None:
        raise RuntimeError("listen() before runner.setup()")
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: HeadDeadline(server(), header_timeout), host, port)
