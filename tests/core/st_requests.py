"""Real ST request bodies, read from the cassettes built from the ST captures."""

from __future__ import annotations

from typing import Any

from adapters.openai_chat import OpenAIChatAdapter
from proxy.core.models import ChatMessage
from proxy.upstream.cassette import decode_body, load_cassette
from tests.fakes.cassette_upstream import CASSETTES

ST_CASSETTES = CASSETTES / "st-1.12.6"


def st_body(name: str) -> bytes:
    return decode_body(load_cassette(ST_CASSETTES / f"{name}.json")["request"])


def st_json(name: str) -> dict[str, Any]:
    return OpenAIChatAdapter().parse(st_body(name)).body


def st_messages(name: str) -> list[ChatMessage]:
    return OpenAIChatAdapter().parse(st_body(name)).messages
