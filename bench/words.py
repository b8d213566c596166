"""The vocabulary generated chats and lorebooks are made of, in every benchmark, and the
shape of the chat files made of them."""

import json
from collections.abc import Sequence
from typing import Any

WORDS = tuple(
    [
        "the",
        "river",
        "spirits",
        "whisper",
        "of",
        "old",
        "oaths",
        "beneath",
        "the",
        "silver",
        "moon",
        "while",
        "{{char}}",
        "keeps",
        "watch",
        "over",
        "{{user}}",
        "and",
        "the",
        "glade",
        "of",
        "Eldoria",
        "where",
        "shadowfangs",
        "roam",
    ]
)

# Chat files store messages with macros already filled in (only greetings keep them).
CHAT_WORDS = tuple(word for word in WORDS if "{{" not in word)


def st_message(position: int, name: str, is_user: bool, text: str) -> dict[str, object]:
    """One message of a generated chat file, as ST writes it."""
    return {
        "name": name,
        "is_user": is_user,
        "send_date": f"2026-11-22T10:{position // 60 % 60:02d}:{position % 60:02d}.000Z",
        "mes": text,
        "swipes": [text],
        "swipe_id": 0,
        "extra": {},
    }


def chat_file(
    messages: Sequence[dict[str, Any]], user: str, char: str, integrity: str = "x"
) -> bytes:
    """A generated chat's file, as ST writes it: its header line, then a line a message."""
    header = {"user_name": user, "character_name": char, "chat_metadata": {"integrity": integrity}}
    return "\n".join(json.dumps(m) for m in [header, *messages]).encode() + b"\n"
