"""Canonical models shared by adapters, the core and the shell.

They are plain frozen dataclasses rather than pydantic models: they are built on every
request, from data an adapter already validated, and must cost next to nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple


class Position(StrEnum):
    """ST's `extension_prompt_types`, by name; `parse` also takes ST's numbers."""

    BEFORE_PROMPT = "before_prompt"  # ST 2
    IN_PROMPT = "in_prompt"  # ST 0
    IN_CHAT = "in_chat"  # ST 1
    NONE = "none"  # ST -1

    @classmethod
    def parse(cls, value: object) -> Position:
        if isinstance(value, Position):
            return value
        by_number = {2: cls.BEFORE_PROMPT, 0: cls.IN_PROMPT, 1: cls.IN_CHAT, -1: cls.NONE}
        key: object = value
        if isinstance(value, str):
            text = value.strip().lower()
            key = int(text) if text.lstrip("-").isdigit() else text
        if isinstance(key, int) and not isinstance(key, bool) and key in by_number:
            return by_number[key]
        if isinstance(key, str):
            for member in cls:
                if member.value == key:
                    return member
        raise ValueError("expected before_prompt (2), in_prompt (0), in_chat (1) or none (-1)")


class Role(StrEnum):
    """ST's `extension_prompt_roles`, by name; `parse` also takes ST's numbers."""

    SYSTEM = "system"  # ST 0
    USER = "user"  # ST 1
    ASSISTANT = "assistant"  # ST 2

    @classmethod
    def parse(cls, value: object) -> Role:
        if isinstance(value, Role):
            return value
        by_number = {0: cls.SYSTEM, 1: cls.USER, 2: cls.ASSISTANT}
        key: object = value
        if isinstance(value, str):
            text = value.strip().lower()
            key = int(text) if text.isdigit() else text
        if isinstance(key, int) and not isinstance(key, bool) and key in by_number:
            return by_number[key]
        if isinstance(key, str):
            for member in cls:
                if member.value == key:
                    return member
        raise ValueError("expected system (0), user (1) or assistant (2)")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a memory text goes, with ST's semantics (see `proxy.core.placement`)."""

    position: Position = Position.BEFORE_PROMPT
    depth: int = 2
    role: Role = Role.SYSTEM

    def __post_init__(self) -> None:
        if not 0 <= self.depth <= 10000:
            raise ValueError("depth must be between 0 and 10000 (ST's MAX_INJECTION_DEPTH)")


class ChatMessage(NamedTuple):
    """One message of a request, reduced to what the core decides on.

    `text` is the message's text (the text parts joined, for content arrays). A NamedTuple
    because hundreds are built per request: it costs a quarter of a frozen dataclass.
    """

    role: str
    text: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Memory:
    """What a memory provider knows for one request.

    `values` fills the injection template's macros (`running_recap`, ...).
    `chat_enabled` is the chat's own on/off state, `None` when it has none.
    `history` optionally lists the request indices that are real chat messages (a known
    chat can tell them apart from ST's own injections); `None` means "find them from the
    request alone".
    """

    values: Mapping[str, str] = field(default_factory=dict)
    chat_id: str | None = None
    chat_enabled: bool | None = None
    history: Sequence[int] | None = None


@dataclass(frozen=True, slots=True)
class Insertion:
    """The decision for one request: insert `message` at `index` of the message list."""

    index: int
    role: Role
    text: str
    tokens: int
