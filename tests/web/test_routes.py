"""The path a request is forwarded to: slashes folded, dot segments refused; a chat
request's body, read once and not kept; the counting after a chat request, which never
fails it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import RequestError
from proxy.web import app as app_module
from proxy.web import routes
from proxy.web.keys import RELAY
from proxy.web.relay import Relay
from proxy.web.routes import proxied_path
from tests.conftest import FakeLLM, ProxyFactory
from tests.memory_env import MemoryFactory

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("raw", "forwarded"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/v1//chat/completions", "/v1/chat/completions"),
        ("//v1/models", "/v1/models"),
        ("/api/v1/generate", "/api/v1/generate"),
        ("/v1/files/a.b", "/v1/files/a.b"),
        ("/v1/x%20y", "/v1/x%20y"),
    ],
)
def test_paths_are_forwarded_with_slashes_folded(raw: str, forwarded: str) -> None:
    assert proxied_path(raw) == forwarded


@pytest.mark.parametrize(
    "raw", ["/v1/../admin", "/v1/%2e%2e/admin", "/v1/..%2fadmin", "/v1/a\\..\\b", "/v1/./x"]
)
def test_dot_segments_are_refused(raw: str) -> None:
    with pytest.raises(RequestError):
        proxied_path(raw)


def _slow(raw: str) -> str | None:
    """`proxied_path` with its shortcut off (every path holds a `/`)."""
    special = routes._SPECIAL
    routes._SPECIAL = re.compile("/")
    try:
        return proxied_path(raw)
    except RequestError:
        return None
    finally:
        routes._SPECIAL = special


@given(st.text(alphabet="/a.%2ef\\", max_size=12).map(lambda tail: "/" + tail))
def test_the_shortcut_answers_as_the_full_look(raw: str) -> None:
    try:
        fast: str | None = proxied_path(raw)
    except RequestError:
        fast = None
    assert fast == _slow(raw)


async def test_the_counting_after_a_chat_request_cannot_fail_it(
    memory_proxy: MemoryFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Metrics, health, lore and the `request` event are counted once the request is on
    its way; when that fails, the answer still comes and the log says why."""
    memory = await memory_proxy(16, {8}, **{"memory.message_recaps": False})
    metrics = memory.client.app[RELAY].metrics

    def broken(*args: object) -> None:
        raise RuntimeError("metrics broke")

    metrics.chat_request = broken
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.status == 200
    assert response.headers["X-Recap-Chat"]
    assert (await response.json())["choices"]
    assert "accounting for a chat request failed" in caplog.text
    assert "metrics broke" in caplog.text


async def test_a_chat_body_is_not_kept_on_the_request_while_its_answer_streams(
    proxy: ProxyFactory, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body ST sent is not held on the request for as long as the answer lasts (a
    100k-token chat is 330 KiB of it): by the time the request goes upstream, aiohttp has
    nothing of it left to give."""
    client = await proxy()
    relay: Relay = client.app[RELAY]
    forward = relay.forward
    left: list[bytes] = []

    async def spy(request: web.Request, *args: Any, **kwargs: Any) -> web.StreamResponse:
        left.append(await request.read())
        return await forward(request, *args, **kwargs)

    monkeypatch.setattr(relay, "forward", spy)
    body = json.dumps({**CHAT, "stream": True}).encode()
    response = await client.post("/v1/chat/completions", data=body)
    assert response.status == 200
    assert b"data: [DONE]" in await response.read()
    assert left == [b""]
    assert fake_llm.state.seen[-1].body == body  # and it went upstream whole


async def test_a_chat_body_over_the_limit_is_refused_whole(
    proxy: ProxyFactory, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size limit `request.read()` would apply holds: a 413 in the proxy's JSON error,
    nothing sent upstream; a body at the limit goes through."""
    body = json.dumps(CHAT).encode()
    monkeypatch.setattr(app_module, "MAX_BODY_BYTES", len(body))
    client = await proxy()
    assert (await client.post("/v1/chat/completions", data=body)).status == 200
    over = body[:-1] + b', "user": "x"}'
    refused = await client.post("/v1/chat/completions", data=over)
    assert refused.status == 413
    assert (await refused.json())["error"]["message"]
    assert len(fake_llm.state.seen) == 1
