"""`Upstream`: the one client of LLM APIs. Its answers arrive as they are sent, and the
client library's failures come out as the proxy's own errors, before and mid-answer."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import TestServer
from pydantic import ValidationError
from yarl import URL

from proxy.errors import UpstreamTimeout, UpstreamUnreachable
from proxy.settings import UpstreamRoute, UpstreamSettings
from proxy.upstream.upstreams import Target, Upstream

ServerFactory = Callable[..., Awaitable[TestServer]]


async def test_the_answer_arrives_as_it_is_sent(aiohttp_server: ServerFactory) -> None:
    second = asyncio.Event()

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"X-Up": "1"})
        await response.prepare(request)
        await response.write(b"data: one\n\n")
        await second.wait()
        await response.write(b"data: two\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    server = await aiohttp_server(app)
    settings = UpstreamSettings(base_url=str(server.make_url("/v1")))
    async with Upstream(settings) as upstream:
        answer = await upstream.send_to("POST", upstream.url_for("chat/completions"), [], b"{}")
        assert answer.status == 200 and answer.header("x-up") == "1"
        assert answer.content_length is None  # chunked: no length to pass on
        first = await answer.chunks.__anext__()
        assert first == b"data: one\n\n"  # before the upstream sent the rest
        second.set()
        assert b"".join([c async for c in answer.chunks]) == b"data: two\n\n"
        answer.release()


async def test_no_answer_is_unreachable() -> None:
    settings = UpstreamSettings(base_url="http://127.0.0.1:9/v1", connect_timeout=2)
    async with Upstream(settings) as upstream:
        with pytest.raises(UpstreamUnreachable, match="cannot reach upstream") as caught:
            await upstream.send_to("GET", upstream.url_for("models"), [], None)
    assert caught.value.code == "upstream_unreachable"


async def test_a_stalled_answer_times_out_mid_stream(aiohttp_server: ServerFactory) -> None:
    async def stall(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"partial")
        await asyncio.sleep(5)
        return response

    app = web.Application()
    app.router.add_get("/v1/slow", stall)
    server = await aiohttp_server(app)
    settings = UpstreamSettings(base_url=str(server.make_url("/v1")), read_timeout=0.2)
    async with Upstream(settings) as upstream:
        answer = await upstream.send_to("GET", upstream.url_for("slow"), [], None)
        received = []
        with pytest.raises(UpstreamTimeout, match="stopped sending"):
            async for chunk in answer.chunks:
                received.append(chunk)
        answer.close()
    assert received == [b"partial"]


def test_urls_keep_the_query_as_it_came() -> None:
    upstream = Upstream(UpstreamSettings(base_url="http://api.example/v1/"))
    assert str(upstream.url_for("chat/completions")) == "http://api.example/v1/chat/completions"
    assert str(upstream.url_for("/models", "a=1&b=%2F")) == "http://api.example/v1/models?a=1&b=%2F"


def test_every_path_has_its_place_on_the_upstream() -> None:
    kobold = Target(URL("http://127.0.0.1:5001/v1"))
    assert (
        str(kobold.url_for("/v1/chat/completions")) == "http://127.0.0.1:5001/v1/chat/completions"
    )
    assert (
        str(kobold.url_for("/api/extra/tokencount")) == "http://127.0.0.1:5001/api/extra/tokencount"
    )
    assert str(kobold.url_for("/v1")) == "http://127.0.0.1:5001/v1"
    llama = Target(URL("http://127.0.0.1:8080"))
    assert str(llama.url_for("/completion", "x=1")) == "http://127.0.0.1:8080/completion?x=1"
    assert str(llama.url_for("/v1/models")) == "http://127.0.0.1:8080/models"
    ollama = Target(URL("http://127.0.0.1:11434"))
    assert str(ollama.url_for("/api/generate")) == "http://127.0.0.1:11434/api/generate"
    router = Target(URL("https://openrouter.ai/api/v1"))
    assert (
        str(router.url_for("/v1/chat/completions"))
        == "https://openrouter.ai/api/v1/chat/completions"
    )


def test_named_routes_take_their_prefix() -> None:
    upstream = Upstream(
        UpstreamSettings(
            base_url="http://127.0.0.1:5001/v1",
            routes=[
                UpstreamRoute(prefix="claude/", base_url="https://api.anthropic.com/v1/"),
                UpstreamRoute(prefix="/claude/test", base_url="http://127.0.0.1:9/v1"),
            ],
        )
    )
    target, path = upstream.resolve("/claude/v1/messages")
    assert (target.prefix, path) == ("/claude", "/v1/messages")
    assert str(target.url_for(path)) == "https://api.anthropic.com/v1/messages"
    assert upstream.resolve("/claude/test/v1/x")[0].prefix == "/claude/test"
    assert upstream.resolve("/claude")[1] == "/"
    assert upstream.resolve("/claudeish/v1/x") == (upstream.default, "/claudeish/v1/x")


@pytest.mark.parametrize("prefix", ["/", "/v1", "v1/x", "/recap", "/a/../b"])
def test_a_route_prefix_may_not_shadow_the_proxys_own_paths(prefix: str) -> None:
    with pytest.raises(ValidationError, match="route prefix"):
        UpstreamRoute(prefix=prefix, base_url="http://x")


def test_a_route_prefix_is_given_once() -> None:
    with pytest.raises(ValidationError, match="given twice"):
        UpstreamSettings(
            routes=[
                UpstreamRoute(prefix="/a", base_url="http://x"),
                UpstreamRoute(prefix="a/", base_url="http://y"),
            ]
        )


async def test_https_upstreams_are_checked_against_the_systems_authorities(
    aiohttp_server: ServerFactory,
) -> None:
    """The owner builds the TLS context (off the loop, at start): a certificate no system
    authority signed is refused, not sent to in the clear or unchecked."""
    authority = trustme.CA()
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(served)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    server = await aiohttp_server(app, ssl=served)
    base = str(server.make_url("/v1").with_scheme("https"))
    async with Upstream(UpstreamSettings(base_url=base)) as upstream:
        with pytest.raises(UpstreamUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
            await upstream.send_to("GET", upstream.url_for("models"), [], None)
