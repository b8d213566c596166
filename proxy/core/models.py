"""Canonical models shared by adapters, the core and the shell.

They are plain frozen dataclasses rather than pydantic models: they are built on every
request, from data an adapter already validated, and must cost next to nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, NamedTuple, Self


class _STEnum(StrEnum):
    """A setting ST stores as a number and we name; `parse` takes either."""

    @classmethod
    def _numbers(cls) -> dict[int, Any]:
        raise NotImplementedError

    @classmethod
    def parse(cls, value: object) -> Self:
        if isinstance(value, cls):
            return value
        key: object = value
        if isinstance(value, str):
            text = value.strip().lower()
            key = int(text) if text.lstrip("-").isdigit() else text
        if isinstance(key, int) and not isinstance(key, bool) and key in cls._numbers():
            member: Self = cls._numbers()[key]
            return member
        for candidate in cls:
            if candidate.value == key:
                return candidate
        choices = ", ".join(f"{m.value} ({n})" for n, m in cls._numbers().items())
        raise ValueError(f"expected one of {choices}")


class Position(_STEnum):
    """ST's `extension_prompt_types`, by name; `parse` also takes ST's numbers."""

    BEFORE_PROMPT = "before_prompt"
    IN_PROMPT = "in_prompt"
    IN_CHAT = "in_chat"
    NONE = "none"

    @classmethod
    def _numbers(cls) -> dict[int, Any]:
        return {2: cls.BEFORE_PROMPT, 0: cls.IN_PROMPT, 1: cls.IN_CHAT, -1: cls.NONE}


class Role(_STEnum):
    """ST's `extension_prompt_roles`, by name; `parse` also takes ST's numbers."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"

    @classmethod
    def _numbers(cls) -> dict[int, Any]:
        return {0: cls.SYSTEM, 1: cls.USER, 2: cls.ASSISTANT}


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a memory text goes, with ST's semantics (see `proxy.core.placement`)."""

    position: Position = Position.BEFORE_PROMPT
    depth: int = 2
    role: Role = Role.SYSTEM

    def __post_init__(self) -> None:
        if not 0 <= self.depth <= 10000:
            raise ValueError("depth must be between 0 and 10000 (ST's MAX_INJECTION_DEPTH)")


# Writes OpenAI-style messages as one prompt in a chat's own instruct template, with the
# stop strings that end the answer's turn (a text completion server without a chat route).
PromptWriter = Callable[[Sequence[Mapping[str, str]]], tuple[str, list[str]]]


class Caller(NamedTuple):
    """How a chat's latest request reached its API: the proxy's own calls for that chat
    go the same way (`api`: the adapter's wire format; `route`: the `[[upstream.routes]]`
    prefix it came under, "" for `upstream.base_url`; `path`: the request's path under
    it; `writer`: how a prompt in the chat's template is written, for text chats)."""

    model: str | None
    api: str = "openai_chat"
    route: str = ""
    path: str = ""
    writer: PromptWriter | None = None


class ChatMessage(NamedTuple):
    """One message of a request, reduced to what the core decides on.

    `text` is the message's text (the text parts joined, for content arrays). A NamedTuple
    because hundreds are built per request: it costs a quarter of a frozen dataclass.
    """

    role: str
    text: str
    name: str | None = None


# How a request's end meets its chat file's end (see `proxy.identify.match`).
Generation = Literal["normal", "swipe", "continue", "quiet"]


# The records built for every chat request (these four, and the others whose comment
# points here) are not frozen, and never changed once built: a frozen dataclass's
# __init__ (an object.__setattr__ per field) costs three times as much.
@dataclass(slots=True)
class Identification:
    chat_id: str
    confidence: float  # 1.0 certain; below 0.5 a guess (ambiguous or barely matching)
    generation: Generation
    target_message: int | None  # ST index the reply will have or replace
    history: tuple[int, ...]  # request indices that are this chat's messages
    matched: int  # of those, the ones as the file has them
    positions: tuple[int, ...] = ()  # the chat position of each of `history` (ascending)
    changed: int = 0  # of `history`, the ones ST changed on the way (`proxy.identify.match`)


@dataclass(slots=True)
class HistorySpan:
    """The part of a message list that holds chat history.

    `start` is the first index after the prompt block, `end` the first index of the
    trailing non-history items; `indices` are the history messages inside `[start, end)`.
    """

    start: int
    end: int
    indices: tuple[int, ...]


@dataclass(slots=True)
class Memory:
    """What a memory provider knows for one request.

    `values` fills the injection template's macros (`running_recap`, ...).
    `chat_enabled` is the chat's own on/off state, `None` when it has none.
    `history` optionally lists the request indices that are real chat messages (a known
    chat can tell them apart from ST's own injections); `None` means "find them from the
    request alone". `replacements` are edits to request messages that go upstream
    whether or not memory is inserted.
    """

    values: Mapping[str, str] = field(default_factory=dict)
    chat_id: str | None = None
    chat_enabled: bool | None = None
    history: Sequence[int] | None = None
    # Request messages whose text must change before forwarding (index -> new text), e.g.
    # an `<ST_METADATA>` block that is ours, not the model's.
    replacements: Mapping[int, str] = field(default_factory=dict)
    # How the request was identified (chat, generation kind, target message), if it was.
    identity: Identification | None = None
    # Request indices of chat messages the inserted memory covers: left out when it goes in.
    drop: tuple[int, ...] = ()
    # The request's history as found from the request alone (with the policy's markers),
    # when the provider looked already: a long request is not searched twice.
    span: HistorySpan | None = None


@dataclass(slots=True)
class Insertion:
    """One part of the memory for one request: insert `text` as a `role` message before
    `index` of the parsed message list (`index == len`: after the last)."""

    index: int
    role: Role
    text: str
    tokens: int
    part: str = "stable"  # `stable` (changes with the running recap) or `changing`
    filled: frozenset[str] = frozenset()  # the macros that put text in it


# Not frozen: built for every chat request (see the note above `Identification`).
@dataclass(slots=True)
class Outcome:
    """What the memory step made of one request: the body to send upstream and what was
    done to it."""

    body: bytes
    insertions: tuple[Insertion, ...] = ()
    memory: Memory | None = None
    messages: Sequence[ChatMessage] = ()
    dropped: tuple[int, ...] = ()  # request indices left out: the memory covers them

    @property
    def chat_id(self) -> str | None:
        return self.memory.chat_id if self.memory is not None else None

    @property
    def tokens(self) -> int:
        """The inserted memory's tokens, all parts."""
        return sum([insertion.tokens for insertion in self.insertions])  # two at most
