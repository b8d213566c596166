"""Where a SillyTavern user's requests go, read from real ST 1.12.6 settings files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.sillytavern.connection import connection, points_at, proxy_urls

SETTINGS = Path(__file__).parents[1] / "data" / "st-settings"
PROXY = "http://127.0.0.1:8765"


def settings(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((SETTINGS / f"{name}.json").read_text(encoding="utf-8"))
    return value


@pytest.mark.parametrize(
    ("name", "api", "key", "url", "wanted"),
    [
        ("claude", "Chat Completion → Claude", "oai_settings.reverse_proxy",
         "http://127.0.0.1:5011/v1", PROXY + "/v1"),
        ("openai-reverse-proxy", "Chat Completion → OpenAI", "oai_settings.reverse_proxy",
         "http://127.0.0.1:5016/v1", PROXY + "/v1"),
        ("textgen-llamacpp", "Text Completion → llamacpp",
         "textgenerationwebui_settings.server_urls.llamacpp", "http://127.0.0.1:5014", PROXY),
        ("kobold-classic", "KoboldAI Classic", "api_server", "http://127.0.0.1:5013/api",
         PROXY + "/api"),
    ],
)  # fmt: skip
def test_each_api_family_and_its_field(
    name: str, api: str, key: str, url: str, wanted: str
) -> None:
    found = connection(settings(name))
    assert found is not None
    assert (found.api, found.url, found.direct) == (api, url, None)
    assert key in found.field
    assert not points_at(found.url, PROXY, found)
    assert proxy_urls(PROXY, found)[0] == wanted
    assert points_at(wanted, PROXY, found)


def test_what_counts_as_pointing_at_the_proxy() -> None:
    found = connection(settings("claude"))
    assert found is not None
    assert points_at("http://localhost:8765/v1/", PROXY, found)  # loopback names, a slash
    assert not points_at("http://127.0.0.1:8766/v1", PROXY, found)
    assert not points_at("", PROXY, found)
    assert points_at("http://127.0.0.1:8765/claude/v1", PROXY, found, ["/claude"])
    text = connection(settings("textgen-llamacpp"))
    assert text is not None
    assert points_at("http://127.0.0.1:8765/v1", PROXY, text)  # ST trims a /v1 itself


def test_a_source_that_calls_its_provider_directly() -> None:
    st = settings("claude")
    st["oai_settings"]["reverse_proxy"] = ""
    found = connection(st)
    assert found is not None and found.direct == "Claude"
    st["oai_settings"]["chat_completion_source"] = "openrouter"
    found = connection(st)
    assert found is not None and found.direct == "openrouter" and "Custom" in found.field
    st["oai_settings"]["chat_completion_source"] = "custom"
    st["oai_settings"]["custom_url"] = PROXY + "/v1"
    found = connection(st)
    assert found is not None and points_at(found.url, PROXY, found)
    assert connection({"main_api": "novel"}) is None
