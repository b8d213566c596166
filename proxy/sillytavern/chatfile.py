"""ST chat files (JSONL): every format ST has written, read line by line.

A file is a header line (1.15+: `chat_metadata` with `user_name: "unused"`; older: real
names and `create_date`; pre-1.15 group chats: no header) and one JSON message per line.
BOM, CRLF and a missing trailing newline are accepted. A line that is not a JSON object
or not a message is skipped, counted and reported with its line number; it never stops
the rest of the file.

Lines are hashed before they are parsed: a caller that already knows a line (same hash)
does not need it parsed again, which is what keeps re-reading a 10k-message chat cheap.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Container
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from proxy.sillytavern.extensions import AUTO_RECAP, message_extension

log = logging.getLogger(__name__)

_OLD_DATE_FORMATS = ("%B %d, %Y %I:%M%p", "%B %d, %Y %I:%M %p", "%b %d, %Y %I:%M%p")


def normalize_send_date(value: object) -> str | None:
    """ISO-8601 text for every `send_date` form ST has written, else the value as text."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = value / 1000 if value > 1e11 else value  # epoch ms or s
        try:
            return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds")
        except (OverflowError, OSError, ValueError):
            return str(value)
    text = str(value).strip()
    if not text[:1].isalpha():
        return text  # ISO-8601 already, or other text no month name starts
    return _dated(text)


@lru_cache(maxsize=1024)
def _dated(text: str) -> str:
    """`normalize_send_date` for the forms that start with a month name. Memoised: a
    chat's messages share their minute, and strptime was a third of reading a chat."""
    for fmt in _OLD_DATE_FORMATS:
        try:
            return dt.datetime.strptime(text, fmt).isoformat(timespec="minutes")
        except ValueError:
            continue
    return text


# `extra.type` of the notices ST itself adds to a chat (`system_message_types` in ST's
# script.js but narrator and comment, which the user writes): a group chat's "Group chat
# created", /help's text. ST never sends them to the model, and they are not the story.
ST_NOTICES = frozenset(
    {
        "help",
        "welcome",
        "group",
        "empty",
        "generic",
        "slash_commands",
        "formatting",
        "hotkeys",
        "macros",
        "welcome_prompt",
        "assistant_note",
    }
)


class STMessage(BaseModel):
    """One message line; unknown keys are ignored, missing ones take ST's meaning."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = ""
    is_user: bool = False
    is_system: bool = False  # missing on AI messages means visible
    send_date: str | None = None
    mes: str = ""
    swipe_id: int | None = None
    swipe_hashes: tuple[str, ...] = ()  # one content hash per swipe
    original_avatar: str | None = None
    narrator: bool = False
    extra_type: str | None = None  # `extra.type`: narrator, thoughts, ...
    # What memory extensions stored on it (`proxy.sillytavern.extensions`), compact JSON.
    extension: str | None = None
    # Not the story, though in the chat: Stepped Thinking's thoughts (`is_thoughts`),
    # ST-Auto-Recap's own system messages (`extra.auto_recap_memory.
    # is_auto_recap_system_memory`). No memory is made of them.
    aside: bool = False

    @field_validator("send_date", mode="before")
    @classmethod
    def _date(cls, value: object) -> str | None:
        return normalize_send_date(value)

    @field_validator("is_user", "is_system", mode="before")
    @classmethod
    def _flag(cls, value: object) -> bool:
        return bool(value) if value is not None else False

    @property
    def hidden(self) -> bool:
        return self.is_system

    @property
    def notice(self) -> bool:
        """One of ST's own notices (`ST_NOTICES`), not a message of the story."""
        return self.extra_type in ST_NOTICES

    @property
    def swipe_count(self) -> int:
        return len(self.swipe_hashes) or 1

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> STMessage:
        extra = data.get("extra")
        kind = extra.get("type") if isinstance(extra, dict) else None
        kind = kind if isinstance(kind, str) and kind else None
        mes = data.get("mes")
        swipes = data.get("swipes")
        hashes = (
            tuple(text_hash(s if isinstance(s, str) else "") for s in swipes)
            if isinstance(swipes, list)
            else ()
        )
        return cls.model_validate(
            {
                **data,
                "narrator": kind == "narrator",
                "extra_type": kind,
                "mes": mes if isinstance(mes, str) else "",
                "swipe_hashes": hashes,
                "extension": message_extension(data),
                "aside": _aside(data, extra),
            }
        )


def _aside(data: dict[str, Any], extra: object) -> bool:
    if data.get("is_thoughts") is True:
        return True
    ours = extra.get(AUTO_RECAP) if isinstance(extra, dict) else None
    return isinstance(ours, dict) and ours.get("is_auto_recap_system_memory") is True


class ChatHeader(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    user_name: str | None = None
    character_name: str | None = None
    create_date: str | None = None
    chat_metadata: dict[str, Any] = {}

    @property
    def integrity(self) -> str | None:
        value = self.chat_metadata.get("integrity")
        return value if isinstance(value, str) else None

    @property
    def main_chat(self) -> str | None:
        value = self.chat_metadata.get("main_chat")
        return value if isinstance(value, str) and value else None


class Line(NamedTuple):
    """One non-empty line of a chat file: its 1-based number, where its bytes are in the
    (normalised) file, and their hash.

    Offsets, not bytes: a 10k-message chat has 10k of them, and the lines a save kept are
    at the same offsets in the next version, so they are taken over as they are."""

    number: int
    start: int
    end: int
    digest: bytes


@dataclass(slots=True)
class BadLine:
    number: int
    reason: str


@dataclass(slots=True)
class ChatFile:
    """A parsed chat file. `messages[i]` is ST's message id `i` (header excluded).

    A message is None when its line's digest was in `known`: the caller has it already.
    """

    header: ChatHeader | None
    lines: list[Line] = field(default_factory=list)
    messages: list[STMessage | None] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    # The whole file in lines (header and bad lines too): `parse_chat(before=...)` next time.
    split: SplitFile = field(default_factory=lambda: SplitFile(b""))

    def raw(self, i: int) -> memoryview:
        """The bytes of message `i`'s line."""
        line = self.lines[i]
        return memoryview(self.split.data)[line.start : line.end]

    def message(self, i: int) -> STMessage:
        """Message `i`, parsed now if it was skipped as known."""
        found = self.messages[i]
        if found is None:
            found = self.messages[i] = parse_message(self.raw(i))
        return found

    def character_name(self, look_back: int = 50) -> str | None:
        """The character's name as the chat itself gives it: the header's `character_name`
        (ST up to 1.14 writes it on every save; 1.15+ writes "unused"), else the newest
        character message's speaker. Never the folder the file is in (ST's default
        character lives in `default_Seraphina/`)."""
        named = self.header.character_name if self.header is not None else None
        if named and named != "unused":
            return named
        for i in range(len(self.messages) - 1, max(-1, len(self.messages) - 1 - look_back), -1):
            message = self.message(i)
            if not (message.is_user or message.is_system or message.narrator) and message.name:
                return message.name
        return None


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def file_digest(lines: list[Line]) -> bytes:
    """A digest of a file's content from its line digests (no second pass over the bytes)."""
    return hashlib.sha1(b"".join(line.digest for line in lines)).digest()


@dataclass(slots=True)
class SplitFile:
    """A chat file's bytes (BOM and CRLF normalised) and its lines, with where each starts
    and ends. Kept so that the file's next version is split without hashing again what it
    shares with this one: ST rewrites the whole file on every save, but a save usually adds
    or changes only the last lines."""

    data: bytes
    lines: list[Line] = field(default_factory=list)
    reused: int = 0  # lines taken over from the version before (not hashed again)


class RecentSplits:
    """The splits of the chat files read most recently, at most `count` of them within a
    budget of bytes (LRU).

    ST saves the open chat before every generation request, and the request waits for
    the re-read: keeping that file's last split turns hashing every line into one
    comparison of memory. A few chats are enough (the ones being written in now); more
    would only hold memory. One owner thread (the store's): no lock."""

    def __init__(self, budget: int = 32 * 1024 * 1024, count: int = 4) -> None:
        self.budget = budget
        self.count = count
        self._kept: OrderedDict[str, SplitFile] = OrderedDict()
        self._size = 0

    def take(self, key: str) -> SplitFile | None:
        found = self._kept.pop(key, None)
        if found is not None:
            self._size -= len(found.data)
        return found

    def keep(self, key: str, split: SplitFile | None) -> None:
        self.take(key)
        if split is None or len(split.data) > self.budget:
            return
        self._kept[key] = split
        self._size += len(split.data)
        while self._size > self.budget or len(self._kept) > self.count:
            _, old = self._kept.popitem(last=False)
            self._size -= len(old.data)

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def size(self) -> int:
        return self._size


def split_file(data: bytes, before: SplitFile | None = None) -> SplitFile:
    """`data` in lines; the lines before `before`'s last one are taken over, not hashed,
    when `data` starts with the same bytes (one comparison of memory, no digest)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    split = SplitFile(data)
    lines = split.lines
    start, number, size = 0, 1, len(data)
    if before is not None and len(before.lines) > 1:
        # Everything up to the start of the old last line: that line may have changed
        # (a reply finished, a swipe) even when nothing before it did.
        last = before.lines[-1]
        if size >= last.start and data.startswith(memoryview(before.data)[: last.start]):
            lines.extend(before.lines[:-1])
            start, number = last.start, last.number
            split.reused = len(lines)
    # Change detection, not security: SHA-1 is the fastest hashlib digest here (SHA-NI).
    sha1 = hashlib.sha1
    find = data.find
    view = memoryview(data)
    while start <= size:
        end = find(b"\n", start)
        if end < 0:
            end = size
        # A JSON line starts with "{"; anything else is checked for being blank.
        if end > start and (data[start] == 0x7B or not data[start:end].isspace()):
            lines.append(Line(number, start, end, sha1(view[start:end]).digest()))
        start, number = end + 1, number + 1
    return split


def _is_header(obj: dict[str, Any]) -> bool:
    if "chat_metadata" in obj:
        return True
    return "mes" not in obj and "user_name" in obj and "character_name" in obj


def _loads(raw: bytes | memoryview) -> Any:
    """One line's JSON, read as ST reads it: ST decodes its files as UTF-8 with each
    invalid byte sequence replaced (node's `'utf8'`), so such a line is a message there,
    and must be one here too, or every later message's index would differ from ST's."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return orjson.loads(bytes(raw).decode("utf-8", "replace"))
        raise


def parse_message(raw: bytes | memoryview) -> STMessage:
    """Parse one message line; raises ValueError with the reason."""
    try:
        obj = _loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    try:
        return STMessage.from_json(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"bad message field {where}: {first['msg']}") from None


def parse_chat(
    data: bytes,
    *,
    source: str = "",
    known: Container[bytes] = (),
    before: SplitFile | None = None,
) -> ChatFile:
    """Parse a chat file; lines whose digest is in `known` are left unparsed (None).
    `before`: the split of the file's previous version (`ChatFile.split`), to split faster."""
    split = split_file(data, before)
    lines = split.lines
    view = memoryview(split.data)
    header: ChatHeader | None = None
    if lines:
        try:
            first = _loads(view[lines[0].start : lines[0].end])
        except orjson.JSONDecodeError:
            first = None
        if isinstance(first, dict) and _is_header(first):
            try:
                header = ChatHeader.model_validate(first)
            except ValidationError:
                header = ChatHeader()
            lines = lines[1:]
    result = ChatFile(header=header, split=split)
    for line in lines:
        message: STMessage | None = None
        if line.digest not in known:
            try:
                message = parse_message(view[line.start : line.end])
            except ValueError as exc:
                result.bad.append(BadLine(line.number, str(exc)))
                continue
        result.lines.append(line)
        result.messages.append(message)
    if result.bad:
        shown = ", ".join(f"line {b.number}: {b.reason}" for b in result.bad[:3])
        more = f" (+{len(result.bad) - 3} more)" if len(result.bad) > 3 else ""
        log.warning("%s: skipped %d malformed line(s): %s%s", source, len(result.bad), shown, more)
    return result
