"""The path a request is forwarded to: slashes folded, dot segments refused; the counting
after a chat request, which never fails it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import RequestError
from proxy.web import routes
from proxy.web.keys import RELAY
from proxy.web.routes import proxied_path
from tests.memory_env import MemoryFactory


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
