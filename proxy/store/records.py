"""Rows of the store as typed records, and the column lists that read and write them."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from proxy.sillytavern.chatfile import STMessage, text_hash


@dataclass(frozen=True, slots=True)
class ChatRecord:
    id: str
    user: str
    kind: str
    character: str | None
    group_id: str | None
    group_name: str | None
    name: str
    file: str
    integrity: str | None
    main_chat: str | None
    enabled: bool | None
    size: int
    mtime_ns: int
    file_hash: bytes | None
    messages: int
    bad_lines: int
    updated: float | None
    deleted: bool
    metadata: str | None = None  # the header's chat_metadata, JSON
    # The character's name as the chat calls it; `character` is the folder (the avatar
    # key that finds its card), which may differ: `default_Seraphina` holds "Seraphina".
    character_name: str | None = None

    @property
    def chat_metadata(self) -> dict[str, Any]:
        if not self.metadata:
            return {}
        value = orjson.loads(self.metadata)
        return value if isinstance(value, dict) else {}

    @property
    def own_world(self) -> str | None:
        """The chat's own lorebook (`chat_metadata.world_info`), if it has one."""
        world = self.chat_metadata.get("world_info")
        return world if isinstance(world, str) and world else None

    @property
    def display_name(self) -> str:
        if self.kind == "group":
            return self.group_name or self.name
        return self.character_name or self.character or self.name


@dataclass(frozen=True, slots=True)
class MessageRecord:
    uid: int
    position: int
    digest: bytes
    message: STMessage


CHAT_COLUMNS = (
    "id, user, kind, character, group_id, group_name, name, file, integrity, main_chat, "
    "enabled, size, mtime_ns, file_hash, messages, bad_lines, updated, deleted, metadata, "
    "character_name"
)


class Table:
    """A group of queries over the store's one connection (`Database` owns both);
    `transaction()` makes several writes one."""

    def __init__(
        self, db: sqlite3.Connection, transaction: Callable[[], AbstractContextManager[None]]
    ) -> None:
        self.db = db
        self.transaction = transaction


class Spoken(NamedTuple):
    """A visible message as identification indexes it, and as the chat's names are read."""

    position: int
    is_user: bool
    narrator: bool
    name: str
    text: str


MESSAGE_COLUMNS = (
    "uid, position, digest, name, is_user, is_system, narrator, send_date, text, swipe_id, "
    "swipe_hashes, extra_type"
)
WRITE_COLUMNS = (
    "position, digest, name, is_user, is_system, narrator, send_date, text, text_hash, "
    "swipe_id, swipe_count, swipe_hashes, extra_type, extension"
)


def chat_from_row(row: sqlite3.Row) -> ChatRecord:
    values = dict(row)
    values["enabled"] = None if values["enabled"] is None else bool(values["enabled"])
    values["deleted"] = bool(values["deleted"])
    return ChatRecord(**values)


def message_values(position: int, digest: bytes, message: STMessage) -> tuple[object, ...]:
    return (
        position,
        digest,
        message.name,
        int(message.is_user),
        int(message.is_system),
        int(message.narrator),
        message.send_date,
        message.mes,
        text_hash(message.mes),
        message.swipe_id,
        message.swipe_count,
        orjson.dumps(list(message.swipe_hashes)).decode(),
        message.extra_type,
        message.extension,
    )


def message_from_row(row: sqlite3.Row) -> MessageRecord:
    message = STMessage.model_construct(
        name=row["name"],
        is_user=bool(row["is_user"]),
        is_system=bool(row["is_system"]),
        send_date=row["send_date"],
        mes=row["text"],
        swipe_id=row["swipe_id"],
        swipe_hashes=tuple(orjson.loads(row["swipe_hashes"])),
        original_avatar=None,
        narrator=bool(row["narrator"]),
        extra_type=row["extra_type"],
    )
    return MessageRecord(row["uid"], row["position"], row["digest"], message)


# -- the memory tables' rows (see `proxy.store.memory`) --------------------------------


@dataclass(frozen=True, slots=True)
class MemoryState:
    active: bool
    current_recap: int | None
    checked_uid: int | None
    inherited: bool
    condense_version: int | None = None  # condense this running version before folding on


@dataclass(frozen=True, slots=True)
class SceneBreak:
    uid: int  # the scene's last message
    position: int
    source: str
    visible: bool
    name: str | None
    name_edited: bool
    rationale: str | None
    current: int | None  # selected recap version


@dataclass(frozen=True, slots=True)
class SceneRecap:
    break_uid: int
    version: int
    scene_name: str | None
    recap: str
    reasoning: str | None
    source: str
    created: float

    def public(self, current: int | None) -> dict[str, Any]:
        return {
            "version": self.version,
            "scene_name": self.scene_name,
            "recap": self.recap,
            "reasoning": self.reasoning,  # what the model thought first, when it said
            "source": self.source,
            "created": self.created,
            "current": self.version == current,
        }


@dataclass(frozen=True, slots=True)
class RunningRecap:
    version: int
    content: str
    scene_count: int
    prev_scene_uid: int | None
    new_scene_uid: int | None
    source: str
    created: float


@dataclass(frozen=True, slots=True)
class MessageRecap:
    uid: int
    swipe: int
    source_hash: str
    recap: str
    reasoning: str | None
    edited: bool
    created: float
    source: str = "llm"  # llm | edit | inherited | imported
