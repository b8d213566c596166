"""The HTTP client under `Upstream`, against servers that misbehave on purpose (raw
sockets writing whatever bytes a test gives), a forward proxy and a private CA: every
failure is the proxy's own error, nothing a hostile server sends is taken as more than
one answer, and every upstream a user has is reachable."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from proxy.errors import UpstreamTimeout, UpstreamUnreachable
from proxy.settings import UpstreamRoute, UpstreamSettings
from proxy.upstream.client import Proxies
from proxy.upstream.upstreams import Upstream, UpstreamResponse
from tests.conftest import Handler, HttpsServer
from tests.fakes.forward_proxy import ForwardProxy

ServerFactory = Callable[..., Awaitable[TestServer]]
RawServer = Callable[[Handler], Awaitable[URL]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + (await reader.readexactly(length) if length else b"")


def replies(*answers: bytes, requests: list[bytes] | None = None) -> Handler:
    """A connection's handler: each request in turn gets the next answer's bytes, then
    the connection is closed."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            try:
                request = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if requests is not None:
                requests.append(request)
            writer.write(answer)
            await writer.drain()
        writer.close()

    return handler


@contextlib.asynccontextmanager
async def upstream_at(base: URL | str, **settings: Any) -> AsyncIterator[Upstream]:
    async with Upstream(UpstreamSettings(base_url=str(base), **settings)) as upstream:
        yield upstream


async def body(answer: UpstreamResponse) -> bytes:
    data = await answer.read()
    answer.release()
    return data


async def test_a_header_flood_is_refused_as_a_malformed_answer(raw_server: RawServer) -> None:
    """A server that sends an endless header block is cut off at aiohttp's limits (8,190
    bytes a line, 128 fields), not read into memory whole."""
    sent = 0

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        with contextlib.suppress(ConnectionError):
            for i in range(20_000):  # 2 MB of headers, if anyone read them all
                line = b"X-Flood-%d: %s\r\n" % (i, b"a" * 90)
                writer.write(line)
                sent += len(line)
                await writer.drain()
        writer.close()

    async with upstream_at(await raw_server(flood)) as upstream:
        with pytest.raises(UpstreamUnreachable, match="malformed answer") as caught:
            await upstream.send_to("POST", upstream.url_for("chat/completions"), [], b"{}")
    assert caught.value.status == 502 and caught.value.code == "upstream_malformed"
    assert "header" in str(caught.value).lower()


async def test_a_long_header_line_is_refused(raw_server: RawServer) -> None:
    answer = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100_000 + b"\r\nContent-Length: 2\r\n\r\nok"
    async with upstream_at(await raw_server(replies(answer))) as upstream:
        with pytest.raises(UpstreamUnreachable, match="malformed answer"):
            await upstream.send_to("GET", upstream.url_for("models"), [], None)


async def test_bytes_after_a_complete_answer_are_not_a_second_answer(
    raw_server: RawServer,
) -> None:
    """A smuggled answer behind the real one never reaches the client, in this exchange or
    the next: the connection that carried it is dropped, and the next request goes on a
    new one."""
    connections: list[list[bytes]] = []
    smuggled = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        b"HTTP/1.1 200 OK\r\nX-Smuggled: 1\r\nContent-Length: 3\r\n\r\nSMU"
    )

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests: list[bytes] = []
        connections.append(requests)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                requests.append(await read_request(reader))
                writer.write(smuggled)
                await writer.drain()
        writer.close()

    async with upstream_at(await raw_server(handler)) as upstream:
        for _ in range(2):
            got = await upstream.send_to("GET", upstream.url_for("a"), [], None)
            assert got.header("x-smuggled") is None
            assert await body(got) == b"hello"
            await asyncio.sleep(0.05)  # the next request would find the connection idle
    assert [len(requests) for requests in connections] == [1, 1]


async def test_trailers_are_not_headers(raw_server: RawServer) -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Late\r\n\r\n"
        b"5\r\nhello\r\n0\r\nX-Late: 1\r\n\r\n"
    )
    async with upstream_at(await raw_server(replies(answer))) as upstream:
        got = await upstream.send_to("GET", upstream.url_for("a"), [], None)
        assert got.content_length is None  # chunked: no length to pass on
        assert await body(got) == b"hello"
        assert got.header("x-late") is None


async def test_a_close_delimited_answer_ends_with_its_connection(raw_server: RawServer) -> None:
    answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello, world"
    async with upstream_at(await raw_server(replies(answer))) as upstream:
        got = await upstream.send_to("GET", upstream.url_for("a"), [], None)
        assert got.content_length is None
        assert await body(got) == b"hello, world"


async def test_an_answer_cut_short_is_a_broken_upstream(raw_server: RawServer) -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial"
    async with upstream_at(await raw_server(replies(answer))) as upstream:
        got = await upstream.send_to("GET", upstream.url_for("a"), [], None)
        assert got.content_length == 100
        received = []
        with pytest.raises(UpstreamUnreachable, match="connection broke") as caught:
            async for chunk in got.chunks:
                received.append(chunk)
        got.close()
    assert received == [b"partial"] and caught.value.code == "upstream_broken"


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", "malformed answer"),
        (b"", "cannot reach upstream"),  # closed without a word
    ],
)
async def test_no_answer_or_a_malformed_one_is_an_error(
    raw_server: RawServer, answer: bytes, match: str
) -> None:
    async with upstream_at(await raw_server(replies(answer))) as upstream:
        with pytest.raises(UpstreamUnreachable, match=match):
            await upstream.send_to("POST", upstream.url_for("a"), [], b"{}")


async def test_informational_and_bodiless_answers(raw_server: RawServer) -> None:
    handler = replies(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: caf\xc3\xa9\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",  # the answer to a HEAD
    )
    async with upstream_at(await raw_server(handler)) as upstream:
        url = upstream.url_for("a")
        got = await upstream.send_to("GET", url, [], None)
        assert got.status == 200 and got.header("x-final") == "café"
        assert await body(got) == b"ok"
        got = await upstream.send_to("DELETE", url, [], None)
        assert got.status == 204 and await body(got) == b""
        got = await upstream.send_to("HEAD", url, [], None)
        assert got.content_length == 1000
        assert await asyncio.wait_for(body(got), 2) == b""


async def test_the_request_goes_as_given(raw_server: RawServer) -> None:
    """The client's headers and body, with nothing of the client library's own added."""
    requests: list[bytes] = []
    handler = replies(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", requests=requests)
    async with upstream_at(await raw_server(handler) / "v1") as upstream:
        headers = [("Authorization", "Bearer sk-test"), ("X-Thing", "1")]
        url = upstream.url_for("chat/completions", "a=1&b=%2F")
        await body(await upstream.send_to("POST", url, headers, b'{"x": 1}'))
    head, _, sent = requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions?a=1&b=%2F HTTP/1.1"
    names = {ln.split(b":")[0].lower() for ln in lines[1:]}
    assert names == {b"host", b"authorization", b"x-thing", b"content-length"}
    assert sent == b'{"x": 1}'


async def test_a_stale_connection_is_retried_for_idempotent_methods_only(
    raw_server: RawServer,
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
    async with upstream_at(base) as upstream:
        url = upstream.url_for("a")
        assert await body(await upstream.send_to("GET", url, [], None)) == b"ok"
        assert await body(await upstream.send_to("GET", url, [], None)) == b"ok"
    async with upstream_at(base) as upstream:
        assert await body(await upstream.send_to("POST", url, [], b"{}")) == b"ok"
        with pytest.raises(UpstreamUnreachable):
            await upstream.send_to("POST", url, [], b"{}")
    assert len(requests) == 5  # GET, GET unanswered, GET again; POST, POST unanswered


async def test_a_silent_upstream_times_out(raw_server: RawServer) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async with upstream_at(await raw_server(silent), read_timeout=0.2) as upstream:
        with pytest.raises(UpstreamTimeout, match="did not answer in time") as caught:
            await upstream.send_to("POST", upstream.url_for("a"), [], b"{}")
    assert caught.value.status == 504 and caught.value.code == "upstream_timeout"


async def test_a_full_pool_is_a_504_naming_max_connections(aiohttp_server: ServerFactory) -> None:
    """Waiting for a free connection counts against `connect_timeout`; the limit is per
    upstream host, so another host is not held up by this one's."""
    gate = asyncio.Event()

    async def held(request: web.Request) -> web.Response:
        await gate.wait()
        return web.Response(text="done")

    app = web.Application()
    app.router.add_get("/v1/held", held)
    busy, other = await aiohttp_server(app), await aiohttp_server(app)
    settings = {"max_connections": 1, "connect_timeout": 0.3}
    async with upstream_at(busy.make_url("/v1"), **settings) as upstream:
        first = asyncio.create_task(upstream.send_to("GET", upstream.url_for("held"), [], None))
        await asyncio.sleep(0.05)
        with pytest.raises(UpstreamTimeout, match=r"upstream\.max_connections") as caught:
            await upstream.send_to("GET", upstream.url_for("held"), [], None)
        assert caught.value.status == 504 and "all 1 connections" in str(caught.value)
        elsewhere = asyncio.create_task(
            upstream.send_to("GET", other.make_url("/v1/held"), [], None)
        )
        await asyncio.sleep(0.05)
        gate.set()
        for task in (first, elsewhere):
            assert await body(await task) == b"done"
        # Its place is free again.
        assert await body(await upstream.send_to("GET", upstream.url_for("held"), [], None))


async def test_credentials_in_the_base_url_are_sent_as_basic_auth(raw_server: RawServer) -> None:
    requests: list[bytes] = []
    handler = replies(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", requests=requests)
    base = await raw_server(handler)
    with_user = base.with_user("me").with_password("s3cret pass")
    async with upstream_at(with_user / "v1") as upstream:
        headers = [("Authorization", "Bearer ignored")]
        await body(await upstream.send_to("GET", upstream.url_for("models"), headers, None))
    head = requests[0].decode()
    assert "Authorization: Basic bWU6czNjcmV0IHBhc3M=" in head  # me:s3cret pass
    assert "Bearer ignored" not in head and "s3cret" not in head.split("\r\n")[0]


async def test_an_error_never_shows_the_base_urls_credentials() -> None:
    async with upstream_at("http://me:s3cret@127.0.0.1:9/v1", connect_timeout=2) as upstream:
        with pytest.raises(UpstreamUnreachable) as caught:
            await upstream.send_to("GET", upstream.url_for("models"), [], None)
    assert "s3cret" not in str(caught.value) and "me:" not in str(caught.value)


def echo_app() -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read(), headers={"X-Path": request.path})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    return app


@pytest.fixture
async def forward_proxy() -> AsyncIterator[tuple[ForwardProxy, URL]]:
    proxy = ForwardProxy()
    url = await proxy.start()
    yield proxy, url
    await proxy.stop()


async def test_upstream_proxy_carries_every_request(
    aiohttp_server: ServerFactory, forward_proxy: tuple[ForwardProxy, URL]
) -> None:
    proxy, proxy_url = forward_proxy
    server = await aiohttp_server(echo_app())
    with_auth = str(proxy_url.with_user("u").with_password("p"))
    async with upstream_at(server.make_url("/v1"), proxy=with_auth) as upstream:
        got = await upstream.send_to("POST", upstream.url_for("chat/completions"), [], b"hi")
        assert await body(got) == b"hi" and got.header("x-path") == "/v1/chat/completions"
    assert proxy.seen == [f"POST {server.make_url('/v1/chat/completions')} HTTP/1.1"]
    assert proxy.auth == ["Basic dTpw"]  # u:p, as Proxy-Authorization
    assert all("u:p" not in line for line in proxy.seen)


async def test_an_https_upstream_through_a_proxy_is_tunnelled(
    https_server: HttpsServer, forward_proxy: tuple[ForwardProxy, URL]
) -> None:
    proxy, proxy_url = forward_proxy
    server, ca = await https_server(echo_app())
    base = server.make_url("/v1").with_scheme("https")
    async with upstream_at(base, proxy=str(proxy_url), ca_file=ca) as upstream:
        got = await upstream.send_to("POST", upstream.url_for("x"), [], b"sealed")
        assert await body(got) == b"sealed"
    assert proxy.seen == [f"CONNECT 127.0.0.1:{server.port} HTTP/1.1"]


async def test_the_environments_proxy_carries_requests_for_the_internet(
    aiohttp_server: ServerFactory,
    forward_proxy: tuple[ForwardProxy, URL],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`HTTP_PROXY` as a user behind a proxy sets it: the upstream's name is one only the
    proxy can resolve, so the answer came through it."""
    proxy, proxy_url = forward_proxy
    proxy.hosts["llm.example"] = "127.0.0.1"
    monkeypatch.setenv("HTTP_PROXY", str(proxy_url))
    server = await aiohttp_server(echo_app())
    async with upstream_at(f"http://llm.example:{server.port}/v1") as upstream:
        got = await upstream.send_to("POST", upstream.url_for("chat/completions"), [], b"hi")
        assert await body(got) == b"hi"
    assert proxy.seen == [f"POST http://llm.example:{server.port}/v1/chat/completions HTTP/1.1"]


def test_the_environments_proxy_is_for_the_internet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.lan:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://user:pw@proxy.lan:3129")
    monkeypatch.setenv("NO_PROXY", "internal.example,.corp")
    proxies = Proxies(UpstreamSettings())
    assert proxies.via(URL("https://api.openai.com/v1")).url == URL("http://proxy.lan:3128")
    plain = proxies.via(URL("http://api.example/v1"))
    assert plain.url == URL("http://proxy.lan:3129") and "pw" not in str(plain.url)
    assert plain.headers == {"Proxy-Authorization": "Basic dXNlcjpwdw=="}  # user:pw
    for direct in ("http://internal.example/v1", "https://x.corp/v1", "http://127.0.0.1:5001",
                   "http://localhost:8080", "http://[::1]:8080"):  # fmt: skip
        assert proxies.via(URL(direct)).url is None, direct


def test_a_configured_proxy_wins_and_a_route_may_have_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env.lan:3128")
    settings = UpstreamSettings(
        base_url="http://127.0.0.1:5001/v1",
        proxy="http://configured.lan:8080",
        routes=[
            UpstreamRoute(
                prefix="/claude",
                base_url="https://api.anthropic.com/v1",
                proxy="http://claude-only.lan:8080",
            ),
        ],
    )
    proxies = Proxies(settings)
    assert proxies.via(URL("http://127.0.0.1:5001/v1")).url == URL("http://configured.lan:8080")
    claude = proxies.via(URL("https://api.anthropic.com/v1/messages"))
    assert claude.url == URL("http://claude-only.lan:8080")


async def test_a_private_ca_is_trusted_from_ca_file(https_server: HttpsServer) -> None:
    server, ca = await https_server(echo_app())
    base = server.make_url("/v1").with_scheme("https")
    async with upstream_at(base, ca_file=ca) as upstream:
        assert await body(await upstream.send_to("POST", upstream.url_for("x"), [], b"ok")) == b"ok"
    async with upstream_at(base) as upstream:  # the system's authorities only
        with pytest.raises(UpstreamUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
            await upstream.send_to("POST", upstream.url_for("x"), [], b"ok")


async def test_verify_false_accepts_any_certificate_and_says_so(
    https_server: HttpsServer, caplog: pytest.LogCaptureFixture
) -> None:
    server, _ = await https_server(echo_app())
    base = server.make_url("/v1").with_scheme("https")
    async with upstream_at(base, verify=False) as upstream:
        assert await body(await upstream.send_to("POST", upstream.url_for("x"), [], b"ok")) == b"ok"
    assert any("upstream.verify is false" in r.getMessage() for r in caplog.records)


def test_a_missing_ca_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        UpstreamSettings(ca_file=tmp_path / "nope.pem")
