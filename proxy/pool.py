"""The relay's upstream connections (`proxy.http1.Connection`), pooled: one `Pool` per
`proxy.upstream.Upstream`.

At most `limit` connections are open at once; idle ones are reused newest first and
dropped after `KEEP_IDLE` seconds (`KEEP_IDLE_PLAIN` without TLS), or sooner when the
server says its own keep-alive timeout (`Keep-Alive: timeout=N`), before it closes them
under a request. A reused connection that breaks before any byte of the answer is retried
once on a new one, for idempotent methods only (RFC 9112 §9.3.1): a POST may have reached
the model.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Iterable
from typing import Final

from yarl import URL

from proxy.errors import UpstreamTimeout, UpstreamUnreachable
from proxy.http1 import Connection, Key

# Seconds an idle connection is kept for reuse: aiohttp's 15 over TLS (a new connection
# to a remote API costs a handshake); over plain HTTP, a server on this machine or the LAN,
# less than the 5 s that uvicorn (vLLM, text-generation-webui) and llama.cpp keep it, for
# a new connection there costs next to nothing.
KEEP_IDLE: Final = 15.0
KEEP_IDLE_PLAIN: Final = 4.0
IDEMPOTENT: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


class Pool:
    """The connections to every upstream of one `Upstream`, at most `limit` open at once."""

    def __init__(
        self,
        limit: int,
        connect_timeout: float,
        read_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`ssl_context`: how HTTPS upstreams are verified; without one, only plain HTTP
        is spoken (building one reads the system's CA files, some 20 ms: its owner does
        that once, off the event loop)."""
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: dict[Key, list[Connection]] = {}
        self._open: set[Connection] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ssl = ssl_context

    async def request(
        self, method: str, url: URL, headers: Iterable[tuple[str, str]], body: bytes | None
    ) -> tuple[Connection, int]:
        """Send a request; answers the connection and the exchange's number once its
        answer's head is in (the caller reads `chunks`, then `release`s or `drop`s it)."""
        head = request_head(method, url, headers, body)
        head_only = method == "HEAD"
        retried = False
        while True:
            conn = await self._acquire(url)
            try:
                exchange = conn.send(head, body, head_only)
                await conn.answer()
                return conn, exchange
            except UpstreamUnreachable:
                conn.close()
                stale = conn.reused and not conn.received and method in IDEMPOTENT
                if retried or not stale:
                    raise
                retried = True
            except BaseException:
                conn.close()  # cancelled (the client left) or timed out: it stops here
                raise

    async def _acquire(self, url: URL) -> Connection:
        scheme = url.scheme
        host = url.raw_host or ""
        port = url.port or (443 if scheme == "https" else 80)
        key = (scheme, host, port)
        loop = asyncio.get_running_loop()
        while True:
            idle = self._idle.get(key)
            while idle:
                conn = idle.pop()
                keep = KEEP_IDLE if scheme == "https" else KEEP_IDLE_PLAIN
                if conn.keep_for is not None:
                    keep = min(keep, conn.keep_for)
                if not conn.closed and loop.time() - conn.idle_since < keep:
                    conn.reused = True
                    return conn
                conn.close()
            if len(self._open) + self._opening < self.limit:
                return await self._connect(key, str(url.origin()))
            if not self._close_an_idle():  # another upstream's: this one has none idle
                waiter = loop.create_future()
                self._waiters.append(waiter)
                try:
                    await waiter
                finally:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)

    async def _connect(self, key: Key, origin: str) -> Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        context = None
        if scheme == "https":
            if self._ssl is None:
                raise UpstreamUnreachable(
                    f"cannot reach upstream {origin}: no TLS context", code="upstream_unreachable"
                )
            context = self._ssl
        self._opening += 1
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: Connection(self, key, origin),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                    # A name with IPv6 and IPv4 addresses (`localhost`): the next address
                    # is tried after a quarter second, not after a whole connect timeout.
                    happy_eyeballs_delay=0.25,
                )
        except TimeoutError:
            raise UpstreamTimeout(
                f"upstream {origin} did not answer in time (no connection in "
                f"{self.connect_timeout:g} s)",
                code="upstream_timeout",
            ) from None
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise UpstreamUnreachable(
                f"cannot reach upstream {origin}: {why}", code="upstream_unreachable"
            ) from exc
        finally:
            self._opening -= 1
            self._wake_one()
        self._open.add(conn)
        return conn

    def put(self, conn: Connection) -> None:
        """A connection whose answer was read whole: kept for the next request."""
        conn.idle_since = conn.loop.time()
        self._idle.setdefault(conn.key, []).append(conn)
        self._wake_one()

    def lost(self, conn: Connection) -> None:
        """A connection closed (by either side): it no longer counts, nor waits idle."""
        if conn in self._open:
            self._open.discard(conn)
            idle = self._idle.get(conn.key)
            if idle and conn in idle:
                idle.remove(conn)
            self._wake_one()

    def _close_an_idle(self) -> bool:
        for idle in self._idle.values():
            if idle:
                idle.pop(0).close()
                return True
        return False

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._idle.clear()


def request_head(
    method: str, url: URL, headers: Iterable[tuple[str, str]], body: bytes | None
) -> bytes:
    """The request line and headers: `Host` and `Content-Length` set here (the caller's
    framing headers are dropped before: `proxy.core.headers.request_headers`)."""
    host = url.raw_host or ""
    if ":" in host:
        host = f"[{host}]"  # IPv6
    if not url.is_default_port():
        host = f"{host}:{url.port}"
    lines = [f"{method} {url.raw_path_qs} HTTP/1.1", f"Host: {host}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body) if body else 0}")
    probe = "\x01".join(lines)
    if "\r" in probe or "\n" in probe or "\x00" in probe:  # it would split the request
        raise UpstreamUnreachable(
            "a header to send upstream holds a line break; not sent", code="bad_header"
        )
    lines.append("\r\n")
    # surrogateescape: the bytes a client sent (which aiohttp's server decoded so) go on
    # as they came.
    return "\r\n".join(lines).encode("utf-8", "surrogateescape")
