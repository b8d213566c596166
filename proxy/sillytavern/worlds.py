"""Lorebooks (world info) and the places that say which ones a chat uses.

    <user>/worlds/<book>.json        {"entries": {"<uid>": {...}}}   (ST writes it indented)
    <user>/characters/<avatar>.png   card JSON in a `chara` (V2) or `ccv3` tEXt chunk
    <user>/characters/<avatar>.json  a JSON card
    <user>/settings.json             global books, extra character books, the persona's book
    chat_metadata.world_info         the chat's own book

Missing and unknown fields are tolerated; a malformed entry is skipped and a malformed file
is logged and treated as empty, so that one bad book never hides the others.
"""

from __future__ import annotations

import base64
import logging
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from proxy.core.lore import WorldEntry

log = logging.getLogger(__name__)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class World:
    name: str
    entries: tuple[WorldEntry, ...] = ()
    bad_entries: int = 0


def read_world(path: Path) -> World | None:
    """A lorebook file, or None (logged) when it cannot be read at all."""
    name = path.stem
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        log.warning("skipping lorebook %s: %s", path, exc)
        return None
    raw = data.get("entries") if isinstance(data, dict) else None
    if isinstance(raw, dict):
        items = [(k, v) for k, v in raw.items()]
    elif isinstance(raw, list):
        items = [(str(i), v) for i, v in enumerate(raw)]
    else:
        log.warning("skipping lorebook %s: no `entries`", path)
        return None
    entries, bad = [], 0
    for key, value in items:
        if not isinstance(value, dict):
            bad += 1
            continue
        try:
            entries.append(WorldEntry.model_validate({"uid": key, **value}))
        except ValidationError:
            bad += 1
    if bad:
        log.warning("lorebook %s: skipped %d malformed entr(y/ies)", path, bad)
    return World(name, tuple(entries), bad)


@dataclass(frozen=True)
class Card:
    """What the proxy needs of a character card."""

    name: str
    world: str | None


def read_card(path: Path) -> Card | None:
    """A character card (PNG with a `chara`/`ccv3` chunk, or JSON), or None."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    try:
        data = _png_card_json(raw) if raw.startswith(PNG_SIGNATURE) else orjson.loads(raw)
    except (ValueError, orjson.JSONDecodeError, struct.error) as exc:
        log.warning("cannot read character card %s: %s", path, exc)
        return None
    if not isinstance(data, dict):
        return None
    inner = data.get("data") if isinstance(data.get("data"), dict) else data
    assert isinstance(inner, dict)
    extensions = inner.get("extensions") if isinstance(inner.get("extensions"), dict) else {}
    assert isinstance(extensions, dict)
    world = extensions.get("world")
    name = inner.get("name") or data.get("name") or path.stem
    return Card(name=str(name), world=world if isinstance(world, str) and world else None)


def _png_card_json(raw: bytes) -> Any:
    """The card JSON from a PNG's text chunks (`ccv3` preferred over `chara`, as ST does)."""
    found: dict[str, bytes] = {}
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(raw):
        length, kind = struct.unpack(">I4s", raw[pos : pos + 8])
        body = raw[pos + 8 : pos + 8 + length]
        if kind == b"tEXt":
            keyword, _, chunk_text = body.partition(b"\x00")
            found[keyword.decode("latin-1").lower()] = chunk_text
        elif kind == b"zTXt":
            keyword, _, rest = body.partition(b"\x00")
            found[keyword.decode("latin-1").lower()] = zlib.decompress(rest[1:])
        elif kind == b"IEND":
            break
        pos += 12 + length
    card = found.get("ccv3") or found.get("chara")
    if not card:
        raise ValueError("no chara/ccv3 text chunk")
    return orjson.loads(base64.b64decode(card))


@dataclass(frozen=True)
class LoreSettings:
    """Which books ST's settings select beyond the card and the chat."""

    global_books: tuple[str, ...] = ()
    character_extras: dict[str, tuple[str, ...]] = field(default_factory=dict)
    persona_book: str | None = None


def read_lore_settings(user_dir: Path) -> LoreSettings:
    try:
        data = orjson.loads((user_dir / "settings.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return LoreSettings()
    if not isinstance(data, dict):
        return LoreSettings()
    wi_settings = data.get("world_info_settings")
    wi = wi_settings.get("world_info") if isinstance(wi_settings, dict) else None
    wi = wi if isinstance(wi, dict) else {}
    global_books = tuple(str(b) for b in wi.get("globalSelect") or [] if isinstance(b, str))
    extras: dict[str, tuple[str, ...]] = {}
    for item in wi.get("charLore") or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            books = tuple(str(b) for b in item.get("extraBooks") or [] if isinstance(b, str))
            extras[item["name"].removesuffix(".png")] = books
    power_user = data.get("power_user") if isinstance(data.get("power_user"), dict) else {}
    assert isinstance(power_user, dict)
    persona = power_user.get("persona_description_lorebook")
    return LoreSettings(
        global_books=global_books,
        character_extras=extras,
        persona_book=persona if isinstance(persona, str) and persona else None,
    )
