"""Errors become answers in one place: the middleware, with the error tree's status and
the one JSON body, on every route."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from aiohttp import web

from proxy.errors import Conflict, NotFound, RecapProxyError, RequestError
from proxy.web.errors import error_middleware
from tests.conftest import ProxyFactory


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (NotFound("no chat 'x'"), 404, "not_found"),
        (Conflict("not now"), 409, "conflict"),
        (RequestError("`recap` must be a str"), 400, "bad_request"),
        (RecapProxyError("a bug of ours"), 500, "internal_error"),
    ],
)
async def test_raised_errors_become_their_answer(
    aiohttp_client: Any, error: RecapProxyError, status: int, kind: str
) -> None:
    async def handler(request: web.Request) -> web.Response:
        raise error

    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/boom", handler)
    client = await aiohttp_client(app)
    response = await client.get("/boom")
    assert response.status == status
    assert await response.json() == {"error": {"message": str(error), "type": kind, "code": kind}}


async def test_the_proxys_own_routes_answer_through_it(proxy: ProxyFactory) -> None:
    client = await proxy()
    missing = await client.get("/recap/nowhere")
    assert missing.status == 404
    assert (await missing.json())["error"]["code"] == "not_found"
    no_folder = await client.get("/recap/api/chats")
    assert no_folder.status == 503
    assert (await no_folder.json())["error"]["code"] == "no_data_folder"
    no_engine = await client.get("/recap/api/queue")
    assert no_engine.status == 503
    assert (await no_engine.json())["error"]["code"] == "no_memory_engine"


async def test_a_failing_store_is_a_503_that_says_so_without_a_traceback(
    aiohttp_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def full(request: web.Request) -> web.Response:
        error = sqlite3.OperationalError("database or disk is full")
        error.sqlite_errorname = "SQLITE_FULL"
        raise error

    async def bug(request: web.Request) -> web.Response:
        raise sqlite3.OperationalError("no such column: x")  # ours, not the disk's

    app = web.Application(middlewares=[error_middleware])
    app.router.add_put("/full", full)
    app.router.add_put("/bug", bug)
    client = await aiohttp_client(app)
    response = await client.put("/full")
    assert response.status == 503
    error = (await response.json())["error"]
    assert error["code"] == "store_failing" and "database or disk is full" in error["message"]
    assert [r.exc_info for r in caplog.records] == [None]
    assert (await client.put("/bug")).status == 500
    assert caplog.records[-1].exc_info is not None
