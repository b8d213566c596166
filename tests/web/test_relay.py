"""The chat path end to end: passthrough, streaming, headers, errors, cancellation."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import aiohttp
import pytest

from proxy.chat.providers import NoMemory
from proxy.core.models import Memory
from proxy.errors import UpstreamTimeout, UpstreamUnreachable
from proxy.runtime.runtime import build_runtime
from proxy.web import make_app
from tests.conftest import FakeLLM, ProxyFactory, make_settings
from tests.fakes.fake_llm import REPLY, sse_chunks
from tests.fakes.fake_upstream import FakeUpstream, Script

CHAT = {
    "messages": [
        {"role": "system", "content": "Write Seraphina's next reply."},
        {"role": "system", "content": "[Start a new Chat]"},
        {"role": "assistant", "content": "*You wake in a glade.*"},
        {"role": "user", "content": "Where am I?"},
    ],
    "model": "fake-model",
    "temperature": 1,
    "stream": False,
}


def body(**changes: Any) -> bytes:
    return json.dumps({**CHAT, **changes}).encode()


async def direct(fake_llm: FakeLLM, data: bytes, headers: dict[str, str] | None = None) -> bytes:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.post(fake_llm.base_url + "/chat/completions", data=data, headers=headers) as r,
    ):
        return await r.read()


async def test_non_stream_answer_is_byte_identical(proxy: ProxyFactory, fake_llm: FakeLLM) -> None:
    client = await proxy()
    response = await client.post("/v1/chat/completions", data=body())
    assert response.status == 200
    assert await response.read() == await direct(fake_llm, body())
    assert response.headers["X-Recap-Injected"] == "0"
    assert response.headers["X-Recap-Chat"] == ""


async def test_without_memory_the_request_bytes_go_upstream_untouched(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    client = await proxy()
    # Odd spacing and key order: a re-serialisation would change these bytes.
    raw = b'{ "model":"fake-model",  "messages": [{"role":"user","content":"hi\\u00e9"}], "x":1.50}'
    await client.post("/v1/chat/completions", data=raw)
    assert fake_llm.state.seen[-1].body == raw


@pytest.mark.parametrize("mode", ["", "reasoning"])
async def test_stream_bytes_are_relayed_unchanged(
    proxy: ProxyFactory, fake_llm: FakeLLM, mode: str
) -> None:
    client = await proxy()
    headers = {"X-Fake": mode} if mode else {}
    response = await client.post("/v1/chat/completions", data=body(stream=True), headers=headers)
    received = await response.read()
    expected = b"".join(sse_chunks(REPLY, model="fake-model", reasoning=mode == "reasoning"))
    assert received == expected
    assert response.headers["Content-Type"].startswith("text/event-stream")
    if mode == "reasoning":
        assert b'"reasoning_content"' in received and b'"tool_calls"' in received


async def test_stream_is_not_buffered(proxy: ProxyFactory, fake_llm: FakeLLM) -> None:
    """The first event reaches the client while the upstream still holds the rest back."""
    fake_llm.state.gate = asyncio.Event()
    client = await proxy()
    response = await client.post("/v1/chat/completions", data=body(stream=True))
    try:
        first = await asyncio.wait_for(response.content.readany(), timeout=5)
    finally:
        fake_llm.state.gate.set()
    assert first == sse_chunks(REPLY, model="fake-model")[0]
    rest = await response.read()
    assert first + rest == b"".join(sse_chunks(REPLY, model="fake-model"))


async def test_a_streams_headers_are_not_held_for_its_first_token(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    """The status and headers reach ST as the upstream sends them, before the first token
    (the relay holds an answer's headers back only to send them with body bytes that are
    there already)."""
    fake_llm.state.first_token = asyncio.Event()
    client = await proxy()
    try:
        response = await asyncio.wait_for(
            client.post("/v1/chat/completions", data=body(stream=True)), timeout=5
        )
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
    finally:
        fake_llm.state.first_token.set()
    assert await response.read() == b"".join(sse_chunks(REPLY, model="fake-model"))


async def test_compressed_answer_reaches_the_client_intact(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    client = await proxy()
    headers = {"X-Fake": "gzip", "Accept-Encoding": "gzip"}
    response = await client.post("/v1/chat/completions", data=body(), headers=headers)
    raw = await response.read()
    assert response.headers["Content-Encoding"] == "gzip"
    assert raw == await direct(fake_llm, body(), headers)
    answer = json.loads(gzip.decompress(raw))
    assert answer["choices"][0]["message"]["content"] == REPLY


async def test_end_to_end_headers_forwarded_hop_by_hop_dropped(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    client = await proxy()
    await client.post(
        "/v1/chat/completions",
        data=body(),
        headers={
            "Authorization": "Bearer sk-client",
            "X-Custom": "kept",
            "Connection": "keep-alive, X-Per-Hop",
            "X-Per-Hop": "dropped",
            "Proxy-Authorization": "Basic abc",
            "TE": "trailers",
            "User-Agent": "node-fetch/1.0",
        },
    )
    seen = {k.lower(): v for k, v in fake_llm.state.seen[-1].headers.items()}
    assert seen["authorization"] == "Bearer sk-client"
    assert seen["x-custom"] == "kept"
    for name in ("x-per-hop", "proxy-authorization", "te"):
        assert name not in seen
    assert seen["user-agent"] == "node-fetch/1.0"


async def test_configured_api_key_replaces_the_clients(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    client = await proxy(**{"upstream.api_key": "sk-server"})
    await client.get("/v1/models", headers={"Authorization": "Bearer undefined"})
    seen = fake_llm.state.seen[-1].headers
    assert seen["Authorization"] == "Bearer sk-server"


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
async def test_upstream_error_status_and_body_pass_through(
    proxy: ProxyFactory, fake_llm: FakeLLM, status: int
) -> None:
    client = await proxy()
    headers = {"X-Fake": f"status={status}"}
    response = await client.post("/v1/chat/completions", data=body(), headers=headers)
    assert response.status == status
    assert await response.read() == await direct(fake_llm, body(), headers)
    assert response.headers["X-Fake-Error"] == "yes"
    assert response.headers["X-Recap-Injected"] == "0"


async def test_unreachable_upstream_is_a_502_openai_error(proxy: ProxyFactory) -> None:
    # Port 9 on loopback (discard) is closed on test machines: connection refused.
    client = await proxy(**{"upstream.base_url": "http://127.0.0.1:9/v1"})
    response = await client.post("/v1/chat/completions", data=body())
    assert response.status == 502
    error = (await response.json())["error"]
    assert error["type"] == "upstream_unreachable"
    assert "127.0.0.1:9" in error["message"]
    assert set(error) == {"message", "type", "code"}
    assert response.headers["X-Recap-Injected"] == "0"


async def test_upstream_timeout_is_a_504_openai_error(proxy: ProxyFactory) -> None:
    client = await proxy(**{"upstream.read_timeout": 0.2})
    response = await client.post("/v1/chat/completions", data=body(), headers={"X-Fake": "slow"})
    assert response.status == 504
    assert (await response.json())["error"]["type"] == "upstream_timeout"


async def test_mid_stream_failure_ends_the_stream_and_keeps_the_status(
    proxy: ProxyFactory,
) -> None:
    client = await proxy()
    response = await client.post(
        "/v1/chat/completions", data=body(stream=True), headers={"X-Fake": "break"}
    )
    assert response.status == 200
    with pytest.raises(aiohttp.ClientPayloadError):
        await response.read()


async def test_client_disconnect_cancels_the_upstream_request(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    client = await proxy()
    request = asyncio.ensure_future(
        client.post("/v1/chat/completions", data=body(stream=True), headers={"X-Fake": "slow"})
    )
    await asyncio.wait_for(fake_llm.state.started.wait(), timeout=5)
    request.cancel()  # what ST's Stop button does: the connection goes away
    with pytest.raises(asyncio.CancelledError):
        await request
    await asyncio.wait_for(fake_llm.state.cancelled.wait(), timeout=5)


async def test_client_disconnect_mid_stream_cancels_the_upstream_request(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    fake_llm.state.gate = asyncio.Event()  # the upstream sends one event, then waits
    client = await proxy()
    response = await client.post("/v1/chat/completions", data=body(stream=True))
    first = await asyncio.wait_for(response.content.readany(), timeout=5)
    assert first.startswith(b"data: ")
    response.close()  # Stop, while the reply is streaming
    await asyncio.wait_for(fake_llm.state.cancelled.wait(), timeout=5)


async def test_doubled_slash_from_a_trailing_slash_url_works(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    client = await proxy(memory=Memory(values={"running_recap": "Arden fought wolves."}))
    response = await client.post("/v1//chat/completions", data=body())
    assert response.status == 200
    assert fake_llm.state.seen[-1].path == "/v1/chat/completions"
    assert int(response.headers["X-Recap-Injected"]) > 0


async def test_other_methods_and_paths_pass_through(proxy: ProxyFactory, fake_llm: FakeLLM) -> None:
    client = await proxy()
    models = await client.get("/v1/models")
    assert (await models.json())["data"][0]["id"] == "fake-model"
    assert "X-Recap-Chat" not in models.headers
    put = await client.put("/v1/some/thing?a=1&b=%20x", data=b"\x00\x01raw")
    assert put.status == 201
    assert await put.json() == {
        "method": "PUT",
        "path": "/v1/some/thing",
        "query": "a=1&b=%20x",
        "size": 5,
    }
    assert put.headers["X-Echo"] == "1"
    # Only POST goes through the chat adapter; a GET on the same path is plain passthrough.
    get_chat = await client.get("/v1/chat/completions")
    assert (await get_chat.json())["method"] == "GET"
    assert "X-Recap-Injected" not in get_chat.headers


async def test_the_root_and_recap_pages_are_the_proxys_own(proxy: ProxyFactory) -> None:
    client = await proxy()
    root = await client.get("/")
    assert (await root.json())["service"] == "recap-proxy"
    response = await client.get("/recap/chat/completions")
    assert response.status == 404
    assert "no such page of recap-proxy" in (await response.json())["error"]["message"]


# -- the relay over a fake upstream at its seam (`Upstream.send_to`), no socket upstream --------


async def test_chunks_from_the_seam_reach_the_client_as_they_were(aiohttp_client: Any) -> None:
    chunks = [b'data: {"a":1}\n\n', b"data: [DO", b"NE]\n\n"]
    upstream = FakeUpstream(Script(chunks=chunks))
    client = await aiohttp_client(
        make_app(build_runtime(make_settings(), upstream=upstream, provider=NoMemory()))
    )
    response = await client.post("/v1/chat/completions", data=body(stream=True))
    assert response.status == 200
    assert await response.read() == b"".join(chunks)
    [sent] = upstream.sent
    assert sent.released and not sent.closed  # read whole: the connection goes back


async def test_a_failure_at_the_seam_cuts_the_stream_and_drops_the_connection(
    aiohttp_client: Any,
) -> None:
    broken = UpstreamUnreachable("reset", code="upstream_broken")
    upstream = FakeUpstream(
        Script(chunks=[b"data: one\n\n", b"never"], failure=broken, fail_after=1)
    )
    client = await aiohttp_client(
        make_app(build_runtime(make_settings(), upstream=upstream, provider=NoMemory()))
    )
    response = await client.post("/v1/chat/completions", data=body(stream=True))
    assert response.status == 200  # the status line had gone out already
    with pytest.raises(aiohttp.ClientPayloadError):
        await response.read()
    assert upstream.sent[0].closed


async def test_no_answer_at_the_seam_is_our_json_error(aiohttp_client: Any) -> None:
    upstream = FakeUpstream(Script(failure=UpstreamTimeout("too slow", code="upstream_timeout")))
    client = await aiohttp_client(
        make_app(build_runtime(make_settings(), upstream=upstream, provider=NoMemory()))
    )
    response = await client.post("/v1/chat/completions", data=body())
    assert response.status == 504
    assert (await response.json())["error"]["type"] == "upstream_timeout"
    assert response.headers["X-Recap-Chat"] == ""


# -- every path goes upstream; named routes ---------------------------------------------------


async def test_paths_outside_v1_go_to_the_upstreams_root(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    client = await proxy()  # upstream.base_url is the fake's `/v1`
    for method, path in [
        ("POST", "/api/extra/tokencount"),  # KoboldCpp beside its /v1
        ("POST", "/tokenize"),  # llama.cpp
        ("POST", "/api/show"),  # Ollama
        ("GET", "/api/v1/info/version?x=1"),  # KoboldAI Classic's probe
    ]:
        response = await client.request(method, path, data=b'{"prompt": "Hi"}')
        assert response.status == 200, path
        echoed = await response.json()
        assert (echoed["path"], echoed["query"]) == tuple(path.partition("?")[::2])
        assert fake_llm.state.seen[-1].body == b'{"prompt": "Hi"}'


async def test_a_named_route_leads_to_its_own_api(proxy: ProxyFactory, fake_llm: FakeLLM) -> None:
    root = str(fake_llm.server.make_url(""))
    client = await proxy(
        **{
            "upstream.routes": [
                {"prefix": "/claude", "base_url": f"{root}/anthropic/v1", "api_key": "sk-ant"}
            ],
            "server.access_key": "s3cret",
        }
    )
    headers = {"x-api-key": "s3cret", "anthropic-version": "2023-06-01"}
    response = await client.post("/claude/v1/messages", data=b"{}", headers=headers)
    assert response.status == 200
    assert (await response.json())["path"] == "/anthropic/v1/messages"
    seen = fake_llm.state.seen[-1].headers
    # The access key came as Claude's password; the route's own key went on in its place.
    assert seen["x-api-key"] == "sk-ant" and "Authorization" not in seen
    other = await client.get("/v1/models", headers={"Authorization": "Bearer s3cret"})
    assert other.status == 200
    refused = await client.post("/claude/v1/messages", data=b"{}")
    assert refused.status == 401
