"""Errors become answers in one place: the middleware, with the error tree's status and
the one JSON body, on every route."""

from __future__ import annotations

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
