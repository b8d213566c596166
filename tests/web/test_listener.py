"""`serve`'s listening socket: a client that never finishes its request head is shut out,
and every other client is served as aiohttp serves it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from proxy.web.listener import listen


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"hello {await request.text()}")

    app = web.Application()
    app.router.add_route("*", "/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    server = await listen(runner, "127.0.0.1", 0, header_timeout=0.3)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await runner.cleanup()


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (rather than leaving it waiting)."""
    try:
        return await asyncio.wait_for(reader.read(), 10) == b""
    except TimeoutError:
        return False


async def test_a_stalled_half_head_is_disconnected(port: int) -> None:
    clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
    for _, writer in clients:
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        await writer.drain()
    assert all(await asyncio.gather(*(closed(reader) for reader, _ in clients)))
    # A silent connection too.
    reader, _ = await asyncio.open_connection("127.0.0.1", port)
    assert await closed(reader)


async def test_a_head_that_arrives_in_pieces_in_time_is_served(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for piece in (b"POST / HTTP/1.1\r\nHost: x\r", b"\nContent-Length: 5\r\n", b"\r\n"):
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.4)  # past the deadline: the head was whole before it, the body
    writer.write(b"there")  # may take its time
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 5)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello there")
    # The kept connection takes another request after the deadline.
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    assert (await asyncio.wait_for(reader.read(4096), 5)).endswith(b"hello ")
    writer.close()
