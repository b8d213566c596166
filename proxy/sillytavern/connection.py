"""Where a SillyTavern user's requests go: the API source active in its `settings.json`,
the URL field that source uses, and whether that URL reaches this proxy. Pure.

The fields (ST 1.12.6, observed in its settings files): `main_api` picks the API family;
Chat Completion (`openai`) reads `oai_settings.chat_completion_source`: `custom` uses
`oai_settings.custom_url`, Claude and OpenAI use `oai_settings.reverse_proxy` when it is
set (else they call the provider directly); Text Completion (`textgenerationwebui`) uses
`textgenerationwebui_settings.server_urls[type]`; KoboldAI Classic (`kobold`) uses
`api_server`, which ends in `/api`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from proxy.core.guard import is_loopback


@dataclass(frozen=True, slots=True)
class Connection:
    """What one ST user's requests use now."""

    api: str  # in ST's words: "Chat Completion → Custom (OpenAI-compatible)"
    field: str  # the field to set, in ST's words and its settings key
    url: str | None  # its value ("" or None: not set)
    suffix: str  # what the proxy's address needs after it: "/v1", "", "/api"
    direct: str | None = None  # set: the source calls this provider itself, no URL to set


def connection(settings: Mapping[str, Any]) -> Connection | None:
    """The active API of a `settings.json`, or None when it is not one the proxy serves."""
    main = settings.get("main_api")
    if main == "openai":
        oai = _table(settings, "oai_settings")
        source = str(oai.get("chat_completion_source") or "openai")
        if source == "custom":
            return Connection(
                "Chat Completion → Custom (OpenAI-compatible)",
                "Custom Endpoint (Base URL) (oai_settings.custom_url)",
                _text(oai.get("custom_url")),
                "/v1",
            )
        label = {"claude": "Claude", "openai": "OpenAI"}.get(source)
        if label is None:
            return Connection(
                f"Chat Completion → {source}",
                "Chat Completion Source: Custom (OpenAI-compatible), then its Custom Endpoint",
                None,
                "/v1",
                direct=source,
            )
        reverse_proxy = _text(oai.get("reverse_proxy"))
        return Connection(
            f"Chat Completion → {label}",
            f"{label} Reverse Proxy URL (oai_settings.reverse_proxy)",
            reverse_proxy,
            "/v1",
            direct=None if reverse_proxy else label,
        )
    if main == "textgenerationwebui":
        text = _table(settings, "textgenerationwebui_settings")
        kind = str(text.get("type") or "ooba")
        urls = text.get("server_urls")
        url = urls.get(kind) if isinstance(urls, dict) else None
        return Connection(
            f"Text Completion → {kind}",
            f"API URL of the {kind} server (textgenerationwebui_settings.server_urls.{kind})",
            _text(url),
            "",
        )
    if main == "kobold":
        return Connection(
            "KoboldAI Classic",
            "API url (api_server)",
            _text(settings.get("api_server")),
            "/api",
        )
    return None


def proxy_urls(origin: str, connection: Connection, prefixes: Sequence[str] = ()) -> list[str]:
    """The values that would send this user's requests through the proxy at `origin`: its
    address, or one of its route prefixes, with what the API family needs after it."""
    bases = [origin.rstrip("/"), *(origin.rstrip("/") + p for p in prefixes)]
    return [base + connection.suffix for base in bases]


def points_at(
    url: str | None, origin: str, connection: Connection, prefixes: Sequence[str] = ()
) -> bool:
    """Whether ST's URL reaches the proxy (loopback names are one host; a trailing slash or
    `/v1` that ST adds or trims itself does not matter)."""
    if not url:
        return False
    wanted = {_normal(u) for u in proxy_urls(origin, connection, prefixes)}
    have = _normal(url)
    if connection.suffix == "":  # ST trims a trailing /v1 from a Text Completion URL
        have = have.removesuffix("/v1")
    return have in wanted


def _normal(url: str) -> str:
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if is_loopback(host):  # localhost, 127.0.0.1, ::1: one host
        host = "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{host}:{port}{parts.path.rstrip('/')}"


def _table(settings: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = settings.get(key)
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None
