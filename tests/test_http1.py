"""The relay's HTTP/1.1 client: answers as they arrive, connections reused only when an
answer was read whole, and every way an upstream can misbehave ends as the proxy's own
error, never as a hang or a connection counted forever."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from proxy.errors import UpstreamTimeout, UpstreamUnreachable
from proxy.http1 import HIGH_WATER, Connection
from proxy.pool import Pool
from tests.conftest import Handler

ServerFactory = Callable[..., Awaitable[TestServer]]


async def body_of(conn: Connection) -> bytes:
    return b"".join([chunk async for chunk in conn.chunks()])


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + (await reader.readexactly(length) if length else b"")


def replies(*answers: bytes) -> Handler:
    """A connection's handler: each request in turn gets the next answer's bytes, then
    the connection is closed."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            await read_request(reader)
            writer.write(answer)
            await writer.drain()
        writer.close()

    return handler


def streamed_app(pieces: list[bytes], gap: float = 0.0) -> web.Application:
    """`GET /` answers `pieces` as a chunked stream, `gap` seconds before each."""

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for piece in pieces:
            await asyncio.sleep(gap)
            await response.write(piece)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/", stream)
    return app


def echo_app(connections: list[object]) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        connections.append(request.transport)
        return web.Response(body=await request.read(), headers={"X-Method": request.method})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    return app


async def test_an_answer_left_unread_closes_its_connection(aiohttp_server: ServerFactory) -> None:
    seen: list[object] = []
    server = await aiohttp_server(echo_app(seen))
    pool = Pool(10, 5, 5)
    conn, exchange = await pool.request("POST", server.make_url("/x"), [], b"x" * 100_000)
    conn.release(exchange)  # before reading the body
    assert conn.closed
    conn2, exchange2 = await pool.request("GET", server.make_url("/y"), [], None)
    assert conn2 is not conn and await body_of(conn2) == b""
    conn2.release(exchange2)
    pool.close()


async def test_a_late_release_of_an_old_exchange_leaves_the_new_one_alone(
    aiohttp_server: ServerFactory,
) -> None:
    server = await aiohttp_server(echo_app([]))
    pool = Pool(10, 5, 5)
    conn, first = await pool.request("GET", server.make_url("/a"), [], None)
    await body_of(conn)
    conn.release(first)
    again, second = await pool.request("GET", server.make_url("/b"), [], None)
    assert again is conn and second == first + 1
    conn.drop(first)  # the old exchange's owner, too late
    conn.release(first)
    assert not conn.closed
    assert await body_of(conn) == b""
    conn.release(second)
    pool.close()


async def test_an_answer_without_a_length_ends_with_its_connection(
    raw_server: Callable[[Handler], Awaitable[URL]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello, ")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"world")
        writer.close()

    pool = Pool(10, 5, 5)
    conn, exchange = await pool.request("GET", await raw_server(handler), [], None)
    assert conn.length is None and not conn.chunked
    assert await body_of(conn) == b"hello, world"
    conn.release(exchange)
    assert conn.closed  # nothing marks where a next answer would start
    pool.close()


async def test_an_answer_cut_short_is_a_broken_upstream(
    raw_server: Callable[[Handler], Awaitable[URL]],
) -> None:
    handler = replies(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
    pool = Pool(10, 5, 5)
    conn, exchange = await pool.request("GET", await raw_server(handler), [], None)
    received = []
    with pytest.raises(UpstreamUnreachable, match="connection broke") as caught:
        async for chunk in conn.chunks():
            received.append(chunk)
    assert received == [b"partial"] and caught.value.code == "upstream_broken"
    conn.drop(exchange)
    pool.close()


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", "malformed answer"),
        (b"", "cannot reach upstream"),  # closed without a word
    ],
)
async def test_no_answer_or_a_malformed_one_is_an_error(
    raw_server: Callable[[Handler], Awaitable[URL]], answer: bytes, match: str
) -> None:
    pool = Pool(10, 5, 5)
    with pytest.raises(UpstreamUnreachable, match=match):
        await pool.request("POST", await raw_server(replies(answer)), [], b"{}")
    assert not pool._open  # the failed connection is not counted any more
    pool.close()


async def test_informational_answers_are_skipped_and_bodiless_ones_end_at_once(
    raw_server: Callable[[Handler], Awaitable[URL]],
) -> None:
    handler = replies(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: caf\xc3\xa9\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",  # the answer to a HEAD
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext",
    )
    base = await raw_server(handler)
    pool = Pool(10, 5, 5)
    conn, exchange = await pool.request("GET", base, [], None)
    assert conn.status == 200 and conn.headers == [("Content-Length", "2"), ("X-Final", "café")]
    assert await body_of(conn) == b"ok"
    conn.release(exchange)
    conn, exchange = await pool.request("DELETE", base, [], None)
    assert conn.status == 204 and await body_of(conn) == b""
    conn.release(exchange)
    conn, exchange = await pool.request("HEAD", base, [], None)
    assert conn.length == 1000 and await asyncio.wait_for(body_of(conn), 2) == b""
    conn.release(exchange)
    assert conn.closed  # a HEAD answer's connection is not reused
    pool.close()


async def test_a_slow_reader_pauses_the_upstream_and_gets_every_byte(
    aiohttp_server: ServerFactory,
) -> None:
    payload = bytes(range(256)) * 8 * 1024  # 2 MiB
    pieces = [payload[i : i + 64 * 1024] for i in range(0, len(payload), 64 * 1024)]
    server = await aiohttp_server(streamed_app(pieces))
    pool = Pool(10, 5, 5)
    conn, exchange = await pool.request("GET", server.make_url("/"), [], None)
    assert conn.chunked and conn.length is None
    assert conn.transport is not None
    await asyncio.sleep(0.2)  # the upstream writes ahead while nobody reads
    assert not conn.transport.is_reading()  # paused: at most a little past the mark held
    assert HIGH_WATER < conn.buffered < len(payload)
    got = []
    async for chunk in conn.chunks():
        got.append(chunk)
        await asyncio.sleep(0.01)
    assert b"".join(got) == payload
    conn.release(exchange)
    assert not conn.closed
    pool.close()


async def test_the_read_timeout_counts_from_each_wait_on_a_kept_connection(
    aiohttp_server: ServerFactory,
) -> None:
    async def answer(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query["after"]))
        return web.Response(text="late" if request.query["after"] != "0" else "now")

    app = web.Application()
    app.router.add_get("/", answer)
    server = await aiohttp_server(app)
    pool = Pool(1, 5, 0.5)

    async def ask(after: float) -> bytes:
        conn, exchange = await pool.request("GET", server.make_url(f"/?after={after}"), [], None)
        try:
            return await body_of(conn)
        finally:
            conn.release(exchange)

    assert await ask(0) == b"now"
    await asyncio.sleep(0.6)  # the first wait's deadline passes while nobody waits
    assert await ask(0.25) == b"late"  # within its own 0.5 s
    assert await ask(0.1) == b"late"
    started = asyncio.get_running_loop().time()
    with pytest.raises(UpstreamTimeout, match="did not answer in time"):
        await ask(2)
    assert asyncio.get_running_loop().time() - started < 1.5
    pool.close()


async def test_a_slow_steady_stream_never_times_out(aiohttp_server: ServerFactory) -> None:
    """Each gap is within the read timeout, the whole answer is not: no timeout."""

    server = await aiohttp_server(streamed_app([b"%d" % i for i in range(5)], gap=0.1))
    pool = Pool(1, 5, 0.4)
    conn, exchange = await pool.request("GET", server.make_url("/"), [], None)
    assert await body_of(conn) == b"01234"
    conn.release(exchange)
    pool.close()
