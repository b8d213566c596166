"""Which lorebook entries were in a prompt. Pure.

An entry is active when its content, after ST's macro substitution and with whitespace
normalised, is in the prompt that was sent: the proxy sees the final prompt, so it does
not have to guess ST's keyword scan. Matching runs one Aho-Corasick pass over the prompt
for every entry's opening words (a C automaton: a thousand `in` tests over a 100k-token
prompt would cost a hundred times more), then checks each hit's full content in place.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ahocorasick
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from proxy.core.fingerprints import normalize

ANCHOR = 48  # characters of an entry's normalised content used to find it


class WorldEntry(BaseModel):
    """One lorebook entry; ST's defaults for what is missing."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    uid: int | str
    key: tuple[str, ...] = ()
    keysecondary: tuple[str, ...] = ()
    comment: str = ""
    content: str = ""
    constant: bool = False
    selective: bool = True
    order: int = 100
    position: int = 0
    depth: int = 4
    role: int = 0
    disable: bool = False
    sticky: int | None = None
    cooldown: int | None = None
    delay: int | None = None
    vectorized: bool = False

    @field_validator("uid", mode="before")
    @classmethod
    def _uid(cls, value: object) -> object:
        # ST's uids are numbers; the `entries` keys that carry them when missing are text.
        return int(value) if isinstance(value, str) and value.isdigit() else value

    @field_validator("key", "keysecondary", mode="before")
    @classmethod
    def _keys(cls, value: object) -> tuple[str, ...]:
        if isinstance(value, str):
            return (value,) if value else ()
        if isinstance(value, list):
            return tuple(str(v) for v in value if isinstance(v, str | int) and str(v))
        return ()

    @field_validator("role", "order", "position", "depth", mode="before")
    @classmethod
    def _number(cls, value: object, info: ValidationInfo) -> int:
        defaults = {"role": 0, "order": 100, "position": 0, "depth": 4}
        if isinstance(value, bool) or not isinstance(value, int | float):
            return defaults[str(info.field_name)]
        return int(value)

    @field_validator("sticky", "cooldown", "delay", mode="before")
    @classmethod
    def _count(cls, value: object) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            return None
        return int(value)

    @field_validator("content", "comment", mode="before")
    @classmethod
    def _text(cls, value: object) -> str:
        return value if isinstance(value, str) else ""


def fill_macros(text: str, values: Mapping[str, str]) -> str:
    """ST's `{{char}}`/`{{user}}` (any case), as ST substitutes them at activation."""
    for name, value in values.items():
        for form in (f"{{{{{name}}}}}", f"{{{{{name.upper()}}}}}", f"{{{{{name.capitalize()}}}}}"):
            text = text.replace(form, value)
    return text


@dataclass(frozen=True, slots=True)
class LoreEntry:
    """An entry of a book that applies to the chat, ready for matching."""

    world: str
    entry: WorldEntry
    text: str  # normalised content with macros filled
    content_hash: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.world, str(self.entry.uid))


def prepare(
    world: str, entries: Iterable[WorldEntry], macros: Mapping[str, str]
) -> list[LoreEntry]:
    """The enabled entries of a book, with their matchable text."""
    out = []
    for entry in entries:
        if entry.disable:
            continue
        text = normalize(fill_macros(entry.content, macros))
        digest = hashlib.sha1(entry.content.encode()).hexdigest()[:16]
        out.append(LoreEntry(world, entry, text, digest))
    return out


class LoreMatcher:
    """Finds which of a fixed set of entries a prompt contains."""

    def __init__(self, entries: Sequence[LoreEntry]) -> None:
        self.entries = list(entries)
        self._automaton: Any = ahocorasick.Automaton()
        anchors: dict[str, list[int]] = {}
        for i, item in enumerate(self.entries):
            if item.text:
                anchors.setdefault(item.text[:ANCHOR], []).append(i)
        for anchor, ids in anchors.items():
            self._automaton.add_word(anchor, (len(anchor), ids))
        self._empty = not anchors
        if not self._empty:
            self._automaton.make_automaton()

    def active(self, prompt: str) -> set[int]:
        """Indices of the entries whose whole text is in `prompt` (already normalised)."""
        found: set[int] = set()
        if self._empty:
            return found
        for end, (length, ids) in self._automaton.iter(prompt):
            start = end - length + 1
            for i in ids:
                if i not in found and prompt.startswith(self.entries[i].text, start):
                    found.add(i)
        return found


@dataclass(slots=True)
class StickyTracker:
    """The seed's sticky bookkeeping, per chat: an entry activated with `sticky = N` stays
    tracked for N generations that advance the chat (swipes, regenerations and continues
    of the same message do not count down)."""

    remaining: dict[tuple[str, str], int] = field(default_factory=dict)
    last_target: int | None = None

    def advance(self, target: int | None) -> None:
        if target is None or (self.last_target is not None and target <= self.last_target):
            return
        self.last_target = target
        self.remaining = {k: n - 1 for k, n in self.remaining.items() if n > 1}

    def note(self, active: Iterable[LoreEntry]) -> None:
        for item in active:
            if item.entry.sticky and item.key not in self.remaining:
                self.remaining[item.key] = item.entry.sticky

    def is_sticky(self, key: tuple[str, str]) -> bool:
        return key in self.remaining


def st_sticky_keys(chat_metadata: Mapping[str, Any], chat_length: int) -> set[tuple[str, str]]:
    """Entries ST itself holds sticky at this chat length (`chat_metadata.timedWorldInfo`)."""
    timed = chat_metadata.get("timedWorldInfo")
    sticky = timed.get("sticky") if isinstance(timed, dict) else None
    found: set[tuple[str, str]] = set()
    if not isinstance(sticky, dict):
        return found
    for name, effect in sticky.items():
        world, _, uid = str(name).rpartition(".")
        end = effect.get("end") if isinstance(effect, dict) else None
        if world and isinstance(end, int | float) and chat_length < end:
            found.add((world, uid))
    return found


def describe(item: LoreEntry, strategy: str) -> dict[str, Any]:
    entry = item.entry
    return {
        "uid": entry.uid,
        "world": item.world,
        "comment": entry.comment,
        "keys": list(entry.key),
        "position": entry.position,
        "depth": entry.depth,
        "order": entry.order,
        "role": entry.role,
        "constant": entry.constant,
        "sticky": entry.sticky,
        "strategy": strategy,
        "content_hash": item.content_hash,
    }


def snapshot(
    entries: Sequence[LoreEntry],
    active: set[int],
    sticky: StickyTracker,
    st_sticky: set[tuple[str, str]],
) -> dict[str, list[dict[str, Any]]]:
    """`{active, inactive}` for one generation; updates the tracker."""
    was_sticky = {i for i in active if sticky.is_sticky(entries[i].key)}
    sticky.note(entries[i] for i in active)
    out: dict[str, list[dict[str, Any]]] = {"active": [], "inactive": []}
    for i, item in enumerate(entries):
        if i in active:
            if item.entry.constant:
                strategy = "constant"
            elif item.entry.vectorized:
                strategy = "vectorized"
            elif i in was_sticky or item.key in st_sticky:
                strategy = "sticky"
            else:
                strategy = "normal"
            out["active"].append(describe(item, strategy))
        else:
            out["inactive"].append(describe(item, "constant" if item.entry.constant else "normal"))
    return out
