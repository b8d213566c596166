"""The path a request is forwarded to: slashes folded, dot segments refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import RequestError
from proxy.web import routes
from proxy.web.routes import proxied_path


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
    routes._SPECIAL = ("/",)
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
