"""Lorebooks, cards and settings written the way ST writes them, for tests."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

GLADE = 'User: "What is the glade?"\nSeraphina: *Seraphina smiles softly, her eyes sparkling'


def glade_content(requests: Path) -> str:
    """The Eldoria entry ST inserted into the captured prompts (its WI "before" text)."""
    for line in requests.read_text(encoding="utf-8").splitlines():
        body = json.loads(line)["body"]
        for message in (body or {}).get("messages", []):
            if message["content"].startswith(GLADE[:26]):
                return str(message["content"])
    raise LookupError("no glade entry in the capture")


def write_world(user_dir: Path, name: str, entries: dict[str, Any]) -> Path:
    path = user_dir / "worlds" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"entries": entries}, indent=4), encoding="utf-8")
    return path


def entry(uid: int, content: str, **fields: Any) -> dict[str, Any]:
    return {
        "uid": uid,
        "key": [],
        "keysecondary": [],
        "comment": f"entry {uid}",
        "content": content,
        "constant": False,
        "selective": True,
        "order": 100,
        "position": 0,
        "disable": False,
        "depth": 4,
        "role": None,
        "sticky": 0,
        "displayIndex": uid,
        "probability": 100,
        **fields,
    }


def png_card(name: str, world: str | None) -> bytes:
    """A minimal PNG carrying a V2 card in a `chara` tEXt chunk, as ST exports it."""
    card = {
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {"name": name, "description": "", "extensions": {"world": world or ""}},
    }

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    text = b"chara\x00" + base64.b64encode(json.dumps(card).encode())
    pixel = zlib.compress(b"\x00\x00\x00\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"tEXt", text)
        + chunk(b"IDAT", pixel)
        + chunk(b"IEND", b"")
    )


def write_card(user_dir: Path, avatar: str, name: str, world: str | None) -> None:
    path = user_dir / "characters" / f"{avatar}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_card(name, world))


def write_settings(user_dir: Path, *, global_books: list[str], username: str = "User") -> None:
    settings = {
        "username": username,
        "world_info_settings": {"world_info": {"globalSelect": global_books, "charLore": []}},
        "power_user": {"persona_description_lorebook": ""},
    }
    (user_dir / "settings.json").write_text(json.dumps(settings, indent=4), encoding="utf-8")
