"""A generated ST chat that grows the way ST saves it, for the memory engine's tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.fake_llm import END_SCENE
from tests.st_data import save_like_st

CHAR = "Ava"
USER = "Tom"
CHAT_ID = f"default-user/chats/{CHAR}/{CHAR} - 2026-11-22@10h00m00s"
SYSTEM = "You are Ava, a ranger of the northern woods. Stay in character."
PLACES = ["the old mill", "the river ford", "the watchtower", "the market square", "the cave"]


def line(position: int, *, ends_scene: bool = False) -> dict[str, Any]:
    """Message `position` of the story: the user speaks at odd positions, Ava at even ones
    (she greets first). Each is long enough to be recapped."""
    place = PLACES[position % len(PLACES)]
    if position % 2:
        text = f"Tom asks Ava about {place} and the lantern number {position}, then waits."
    else:
        text = (
            f"Ava walks with Tom toward {place}, pointing out tracks and telling the story "
            f"of lantern number {position} and the people who once lived there."
        )
    if ends_scene:
        text += f" She closes the door behind them and they part ways. {END_SCENE}"
    return {
        "name": USER if position % 2 else CHAR,
        "is_user": bool(position % 2),
        "is_system": False,
        "send_date": f"2026-11-22T10:{position // 60:02d}:{position % 60:02d}.000Z",
        "mes": text,
        "swipes": [text],
        "swipe_id": 0,
        "extra": {},
    }


def chat_id(char: str = CHAR, folder: str | None = None) -> str:
    return f"default-user/chats/{folder or char}/{char} - 2026-11-22@10h00m00s"


class Story:
    """The chat file of one story in a temp ST data folder."""

    def __init__(
        self, data_dir: Path, ends: set[int], char: str = CHAR, folder: str | None = None
    ) -> None:
        """`folder`: the character's folder when it is not its name (ST's default
        character lives in `default_Seraphina/`)."""
        self.char = char
        self.chat_id = chat_id(char, folder)
        self.path = data_dir / f"{self.chat_id}.jsonl"
        self.ends = ends
        self.messages: list[dict[str, Any]] = []
        self.metadata: dict[str, Any] = {}  # more of the header's chat_metadata

    def grow(self, count: int) -> None:
        start = len(self.messages)
        for i in range(start, start + count):
            message = line(i, ends_scene=i in self.ends)
            if not message["is_user"]:
                message["name"] = self.char
                message["mes"] = message["mes"].replace(CHAR, self.char)
            self.messages.append(message)
        self.save()

    def save(self) -> None:
        header = {
            "user_name": USER,
            "character_name": self.char,
            "create_date": "2026-11-22@10h00m00s",
            "chat_metadata": {
                "integrity": f"{self.char}-2222-3333-4444-555555555555",
                **self.metadata,
            },
        }
        rows = [header, *self.messages]
        save_like_st(self.path, "\n".join(json.dumps(r) for r in rows).encode() + b"\n")

    def request(
        self, *, stream: bool = False, model: str = "fake-model", lore: str = ""
    ) -> dict[str, Any]:
        """ST's request for the next reply (the file ends with the user's message)."""
        history = [
            {"role": "user" if m["is_user"] else "assistant", "content": m["mes"]}
            for m in self.messages
            if not m["is_system"]
        ]
        return {
            "model": model,
            "stream": stream,
            "messages": [
                {"role": "system", "content": SYSTEM.replace(CHAR, self.char)},
                *([{"role": "system", "content": lore}] if lore else []),
                {"role": "system", "content": "[Start a new Chat]"},
                *history,
            ],
        }
