"""The relay's connection pool: connections reused while they may be, at most `limit`
open at once, a stale one retried only where that is safe, requests sent as given, and
HTTPS upstreams verified."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable

import pytest
import trustme
from aiohttp import web
from yarl import URL

from proxy.errors import UpstreamTimeout, UpstreamUnreachable
from proxy.http1 import kept_for
from proxy.pool import KEEP_IDLE, KEEP_IDLE_PLAIN, Pool, request_head
from tests.conftest import Handler
from tests.test_http1 import ServerFactory, body_of, echo_app, read_request


async def test_a_connection_is_reused_once_its_answer_was_read(
    aiohttp_server: ServerFactory,
) -> None:
    seen: list[object] = []
    server = await aiohttp_server(echo_app(seen))
    pool = Pool(10, 5, 5)
    for text in (b"one", b"two"):
        conn, exchange = await pool.request("POST", server.make_url("/x"), [], text)
        assert (conn.status, conn.length, conn.chunked) == (200, len(text), False)
        assert await body_of(conn) == text
        conn.release(exchange)
    assert len(seen) == 2 and seen[0] is seen[1]  # one connection carried both
    conn.idle_since -= KEEP_IDLE_PLAIN  # idle too long: the server may be closing it now
    again, exchange = await pool.request("POST", server.make_url("/x"), [], b"three")
    assert again is not conn and conn.closed and await body_of(again) == b"three"
    again.release(exchange)
    assert len(seen) == 3 and seen[2] is not seen[0]
    pool.close()


async def test_a_connection_is_not_reused_past_the_servers_own_keep_alive(
    raw_server: Callable[[Handler], Awaitable[URL]],
) -> None:
    """A server that says `Keep-Alive: timeout=N` (llama.cpp's: 5) closes an idle
    connection then: one idle about that long is not sent a POST as it closes (which could
    not be sent again)."""
    accepted: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                             b"Keep-Alive: timeout=3, max=100\r\n\r\nok")  # fmt: skip
                await writer.drain()
        writer.close()

    base = await raw_server(handler)
    pool = Pool(10, 5, 5)
    conn, exchange = await pool.request("POST", base, [], b"{}")
    assert await body_of(conn) == b"ok" and conn.keep_for == 2.0
    conn.release(exchange)
    conn.idle_since -= 1.5  # within the server's time: reused
    again, exchange = await pool.request("POST", base, [], b"{}")
    assert again is conn and await body_of(again) == b"ok"
    again.release(exchange)
    conn.idle_since -= 2.5  # nearly the server's 3 s: a new connection
    third, exchange = await pool.request("POST", base, [], b"{}")
    assert third is not conn and conn.closed and await body_of(third) == b"ok"
    third.release(exchange)
    assert len(accepted) == 2
    pool.close()


@pytest.mark.parametrize(
    ("header", "kept"),
    [("timeout=5, max=100", 4.0), ("max=5, Timeout = 60", 59.0), ("timeout=1", 0.5),
     ("max=3", None), ("timeouts=9", None), ("", None)],
)  # fmt: skip
def test_the_servers_keep_alive_timeout_is_read_with_a_margin(
    header: str, kept: float | None
) -> None:
    assert kept_for(header) == kept


async def test_the_request_goes_as_given(raw_server: Callable[[Handler], Awaitable[URL]]) -> None:
    got: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    base = await raw_server(handler)
    pool = Pool(10, 5, 5)
    headers = [("Authorization", "Bearer k"), ("x-Mixed-Case", "v")]
    url = URL(f"{base}/v1/a%20b?q=%2F", encoded=True)
    conn, exchange = await pool.request("POST", url, headers, b"{}")
    conn.release(exchange)
    request = got[0]
    assert request.startswith(b"POST /v1/a%20b?q=%2F HTTP/1.1\r\n")
    assert f"\r\nHost: 127.0.0.1:{base.port}\r\n".encode() in request
    assert b"\r\nAuthorization: Bearer k\r\nx-Mixed-Case: v\r\nContent-Length: 2\r\n" in request
    assert request.endswith(b"\r\n\r\n{}")
    assert b"User-Agent" not in request and b"Accept-Encoding" not in request
    pool.close()


@pytest.mark.parametrize("breaking", ["\r\n", "\n", "\r", "\x00"])
def test_a_header_with_a_line_break_is_not_sent(breaking: str) -> None:
    with pytest.raises(UpstreamUnreachable, match="line break"):
        request_head("GET", URL("http://h/"), [("X", f"a{breaking}Evil: 1")], None)
    with pytest.raises(UpstreamUnreachable, match="line break"):
        request_head("GET", URL("http://h/"), [(f"X{breaking}Evil", "1")], None)
    assert b"Content-Length" not in request_head("GET", URL("http://h/"), [], None)
    assert b"Content-Length: 0\r\n" in request_head("POST", URL("http://h/"), [], None)
    assert b"Host: [::1]:81\r\n" in request_head("GET", URL("http://[::1]:81/"), [], None)


async def test_a_stale_connection_is_retried_for_idempotent_methods_only(
    raw_server: Callable[[Handler], Awaitable[URL]],
) -> None:
    """The server takes a request on a kept connection and closes it unanswered (its
    keep-alive ran out as the request came): a GET goes again on a new connection, a POST
    may have reached the model and is not sent twice."""
    requests: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        with contextlib.suppress(asyncio.IncompleteReadError):
            requests.append(await read_request(reader))
        writer.close()  # the second request on this connection goes unanswered

    base = await raw_server(handler)
    for method, retried in (("GET", True), ("POST", False)):
        pool = Pool(10, 5, 5)
        conn, exchange = await pool.request(method, base, [], None)
        assert await body_of(conn) == b"ok"
        conn.release(exchange)
        if retried:
            again, exchange = await pool.request(method, base, [], None)
            assert again is not conn and await body_of(again) == b"ok"
            again.release(exchange)
        else:
            with pytest.raises(UpstreamUnreachable):
                await pool.request(method, base, [], b"{}")
        pool.close()
    assert len(requests) == 5  # GET, GET unanswered, GET again; POST, POST unanswered


async def test_at_most_limit_connections_are_open(aiohttp_server: ServerFactory) -> None:
    gate = asyncio.Event()
    opened: set[object] = set()

    async def held(request: web.Request) -> web.Response:
        opened.add(request.transport)
        await gate.wait()
        return web.Response(text="done")

    app = web.Application()
    app.router.add_get("/", held)
    server = await aiohttp_server(app)
    pool = Pool(1, 5, 5)

    async def one() -> bytes:
        conn, exchange = await pool.request("GET", server.make_url("/"), [], None)
        try:
            return await body_of(conn)
        finally:
            conn.release(exchange)

    tasks = [asyncio.create_task(one()) for _ in range(3)]
    await asyncio.sleep(0.1)
    assert len(opened) == 1  # the others wait for that connection
    gate.set()
    assert await asyncio.gather(*tasks) == [b"done"] * 3
    assert len(opened) == 1
    pool.close()


async def test_a_silent_upstream_times_out_and_a_cancelled_request_frees_its_place(
    raw_server: Callable[[Handler], Awaitable[URL]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    base = await raw_server(handler)
    pool = Pool(1, 5, 0.2)
    with pytest.raises(UpstreamTimeout, match="did not answer in time") as caught:
        await pool.request("POST", base, [], b"{}")
    assert caught.value.code == "upstream_timeout"
    pool.read_timeout = 30
    task = asyncio.create_task(pool.request("POST", base, [], b"{}"))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not pool._open and pool._opening == 0  # the one place is free again
    pool.close()


async def test_https_upstreams_are_verified(aiohttp_server: ServerFactory) -> None:
    authority = trustme.CA()
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(served)
    server = await aiohttp_server(echo_app([]), ssl=served)
    url = server.make_url("/secure").with_scheme("https")
    trusting = ssl.create_default_context()
    authority.configure_trust(trusting)
    pool = Pool(10, 5, 5, ssl_context=trusting)
    conn, exchange = await pool.request("POST", url, [], b"sealed")
    assert await body_of(conn) == b"sealed"
    conn.release(exchange)
    # A remote API's connection is kept longer than a local server's: a new one costs a
    # TLS handshake, and such APIs keep theirs for a minute or more.
    conn.idle_since -= KEEP_IDLE - 1
    again, exchange = await pool.request("POST", url, [], b"again")
    assert again is conn and await body_of(again) == b"again"
    again.release(exchange)
    pool.close()
    strict = Pool(10, 5, 5, ssl_context=ssl.create_default_context())  # the system's CAs
    with pytest.raises(UpstreamUnreachable, match="cannot reach upstream"):
        await strict.request("GET", url, [], None)
    strict.close()
    plain = Pool(10, 5, 5)  # no context: plain HTTP only
    with pytest.raises(UpstreamUnreachable, match="no TLS context"):
        await plain.request("GET", url, [], None)
    plain.close()
