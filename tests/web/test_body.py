"""A chat request's body: taken from the server's buffer when it came whole, read as
aiohttp reads it otherwise; the same bytes either way, and the same 413."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from proxy.web.body import read_body
from proxy.web.errors import error_middleware

LIMIT = 64 * 1024


async def echo(request: web.Request) -> web.Response:
    buffered = request.content.is_eof()  # the whole body was in when the handler began
    body = await read_body(request, LIMIT)
    again = await read_body(request, LIMIT)  # a second read gives the same bytes
    return web.json_response(
        {
            "size": len(body),
            "sha": hashlib.sha256(body).hexdigest(),
            "same_again": again == body,
            "buffered": buffered,
        }
    )


@pytest.fixture
async def client(aiohttp_client: AiohttpClient) -> TestClient[web.Request, web.Application]:
    app = web.Application(client_max_size=LIMIT, middlewares=[error_middleware])
    app.router.add_post("/echo", echo)
    return await aiohttp_client(app)


async def test_a_body_that_came_whole_is_taken_as_it_lies(
    client: TestClient[web.Request, web.Application],
) -> None:
    body = b'{"messages":[{"role":"user","content":"' + b"x" * 3000 + b'"}]}'
    async with client.post("/echo", data=body) as r:
        got = await r.json()
    assert got == {
        "size": len(body),
        "sha": hashlib.sha256(body).hexdigest(),
        "same_again": True,
        "buffered": True,
    }


async def test_a_body_still_arriving_is_read_whole(
    client: TestClient[web.Request, web.Application],
) -> None:
    pieces = [bytes([65 + i]) * 1000 for i in range(5)]

    async def slowly() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece
            await asyncio.sleep(0.02)

    async with client.post("/echo", data=slowly()) as r:
        got = await r.json()
    whole = b"".join(pieces)
    assert got["buffered"] is False
    assert got["size"] == len(whole) and got["sha"] == hashlib.sha256(whole).hexdigest()
    assert got["same_again"] is True


async def test_a_body_past_the_limit_is_refused_with_413(
    client: TestClient[web.Request, web.Application],
) -> None:
    async with client.post("/echo", data=b"x" * (LIMIT + 1)) as r:
        assert r.status == 413
        assert "error" in await r.json()


async def test_an_empty_body_is_empty(client: TestClient[web.Request, web.Application]) -> None:
    async with client.post("/echo") as r:
        got = await r.json()
    assert got["size"] == 0 and got["same_again"] is True
