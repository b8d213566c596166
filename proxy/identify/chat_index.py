"""The chat index: the newest messages of every indexed chat, by their fingerprints. Pure.

A fingerprint is the hash of a message's whitespace-normalised text. A file message has
several: its text, `Name: text` (group chats and ST's "names in content" mode), and its
text with `{{char}}`/`{{user}}` filled in (greetings are stored raw). The index keeps each
chat's newest visible messages (`TAIL`) and, for each fingerprint, the chats holding it:
`proxy.identify.match` finds a request's chat through it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from proxy.core.fingerprints import IndexedMessage
from proxy.identify.reasoning import DEFAULT_REASONING, ReasoningFormat

TAIL = 64  # newest visible messages per chat kept for matching
MAX_SKIPPED = 12  # request messages that match nothing before an alignment gives up
# Of those, the newest this many keep their text: identification reads the last one's (a
# continue), the engine the newest `relevant_scenes_context` (at most 20) to rank scenes
# ahead of a request. The rest are held for their fingerprints alone: the text was half of
# what the index of a thousand chats held in memory.
TEXT_KEPT = 20


@dataclass(slots=True)
class ChatEntry:
    chat_id: str
    updated: float
    total: int  # all messages in the file, hidden ones included
    tail: list[IndexedMessage]  # the newest visible messages, oldest first
    name: str = ""  # file name without .jsonl
    group_name: str | None = None
    enabled: bool | None = None  # the chat's own memory on/off, None = default
    world: str | None = None  # the chat's own lorebook (`chat_metadata.world_info`)


@dataclass(slots=True)
class ChatIndex:
    """Fingerprints of every chat's newest messages, with a reverse map for lookups."""

    entries: dict[str, ChatEntry] = field(default_factory=dict)
    # The chats whose tail holds a fingerprint. A tuple: nearly every fingerprint is one
    # chat's (a set of one is four times the memory), and the few shared ones (a
    # character's greeting) are shared by tens, not thousands.
    by_fp: dict[int, tuple[str, ...]] = field(default_factory=dict)
    version: int = 0  # counts changes: what was looked up before one may be stale
    # How ST may write reasoning before a reply's text: the users' formats and its default.
    reasoning: tuple[ReasoningFormat, ...] = (DEFAULT_REASONING,)

    def put(self, entry: ChatEntry) -> None:
        chat_id = entry.chat_id
        self.remove(chat_id)
        self.version += 1
        tail = entry.tail[-TAIL:]
        keep = len(tail) - TEXT_KEPT
        entry.tail = [
            IndexedMessage(m.position, m.is_user, "", m.fps) if i < keep and m.text else m
            for i, m in enumerate(tail)
        ]
        self.entries[chat_id] = entry
        by_fp = self.by_fp
        for message in entry.tail:
            for fp in message.fps:
                holders = by_fp.get(fp)
                if holders is None:
                    by_fp[fp] = (chat_id,)
                elif chat_id not in holders:
                    by_fp[fp] = (*holders, chat_id)

    def remove(self, chat_id: str) -> None:
        old = self.entries.pop(chat_id, None)
        if old is None:
            return
        self.version += 1
        by_fp = self.by_fp
        for message in old.tail:
            for fp in message.fps:
                holders = by_fp.get(fp)
                if holders is None or chat_id not in holders:
                    continue
                rest = tuple(c for c in holders if c != chat_id)
                if rest:
                    by_fp[fp] = rest
                else:
                    del by_fp[fp]

    def resolve(self, name: str) -> str | None:
        """A chat id from what a client named: an id, a file name, or a group name."""
        name = name.strip().removesuffix(".jsonl")
        if name in self.entries:
            return name
        for attribute in ("name", "group_name"):
            found = [e for e in self.entries.values() if getattr(e, attribute) == name]
            if found:
                return max(found, key=lambda e: e.updated).chat_id
        return None

    def candidates(self, fps: Iterable[int]) -> set[str]:
        found: set[str] = set()
        by_fp = self.by_fp
        for fp in fps:
            chats = by_fp.get(fp)
            if chats:
                found.update(chats)
        return found
