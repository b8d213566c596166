"""A chat's memory as a file to keep or to take elsewhere: Markdown to read, JSON for
tools, and a SillyTavern World Info book (`st-world`) that ST imports as it is. Pure.

The World Info book has one entry per scene recap, triggered by the words of the scene's
name, one per entity, triggered by its name and aliases, and one constant entry for the
running recap, so that the memory keeps working inside ST without the proxy. Field names
and defaults are ST's own (`newWorldInfoEntryDefinition` in `public/scripts/world-info.js`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.core.jsontypes import JSONObject, JSONValue
from proxy.core.recall import STOPWORDS, WORD

FORMATS = ("markdown", "json", "st-world")
MEDIA_TYPES = {
    "markdown": "text/markdown",
    "json": "application/json",
    "st-world": "application/json",
}
_RANGE = re.compile(r"\s*\d+\s*-\s*\d+\s*$")  # the message range appended to scene names


@dataclass(frozen=True, slots=True)
class ExportedScene:
    first: int  # ST index of its first and last message
    last: int
    name: str
    recap: str
    version: int
    source: str


@dataclass(frozen=True, slots=True)
class ExportedRunning:
    version: int
    content: str
    scene_count: int
    through: int | None  # ST index of the last message it covers
    source: str


@dataclass(frozen=True, slots=True)
class ExportedEntity:
    name: str
    type: str
    aliases: Sequence[str]
    facts: Sequence[str]


@dataclass(frozen=True, slots=True)
class Exported:
    chat_id: str
    title: str  # the character's or group's name
    scenes: Sequence[ExportedScene]
    running: ExportedRunning | None
    entities: Sequence[ExportedEntity] = ()


def to_json(memory: Exported) -> JSONObject:
    running: JSONValue = None
    if memory.running is not None:
        r = memory.running
        running = {
            "version": r.version,
            "content": r.content,
            "scene_count": r.scene_count,
            "new_scene_index": r.through,
            "source": r.source,
        }
    scenes: list[JSONValue] = [
        {
            "first": s.first,
            "index": s.last,
            "name": s.name,
            "recap": s.recap,
            "version": s.version,
            "source": s.source,
        }
        for s in memory.scenes
    ]
    entities: list[JSONValue] = [
        {"name": e.name, "type": e.type, "aliases": list(e.aliases), "facts": list(e.facts)}
        for e in memory.entities
    ]
    return {"chat": memory.chat_id, "title": memory.title, "running_recap": running,
            "scenes": scenes, "entities": entities}  # fmt: skip


def to_markdown(memory: Exported) -> str:
    lines = [f"# {memory.title or memory.chat_id}", "", f"Chat: `{memory.chat_id}`", ""]
    if memory.running is not None:
        r = memory.running
        through = f", through message {r.through}" if r.through is not None else ""
        lines += [f"## The story so far (version {r.version}{through})", "", r.content, ""]
    if memory.scenes:
        lines += ["## Scenes", ""]
        for s in memory.scenes:
            lines += [f"### {s.name or 'Scene'} (messages {s.first}-{s.last})", "", s.recap, ""]
    if memory.entities:
        lines += ["## Who and what", ""]
        for e in memory.entities:
            also = f"; also {', '.join(e.aliases)}" if e.aliases else ""
            lines += [f"### {e.name} ({e.type}{also})", "", *(f"- {f}" for f in e.facts), ""]
    if memory.running is None and not memory.scenes:
        lines += ["No memory yet.", ""]
    return "\n".join(lines)


def scene_keys(name: str) -> list[str]:
    """World Info keys from a scene's name: its words, without the appended message range
    and the words every scene shares."""
    words = WORD.findall(_RANGE.sub("", name))
    keys = [w for w in words if w.lower() not in STOPWORDS and len(w) > 2 and not w.isdigit()]
    return list(dict.fromkeys(keys))


def _entry(uid: int, comment: str, content: str, keys: list[str], constant: bool,
           order: int) -> JSONObject:  # fmt: skip
    key: list[JSONValue] = [*keys]
    return {
        "uid": uid,
        "key": key,
        "keysecondary": [],
        "comment": comment,
        "content": content,
        "constant": constant,
        "vectorized": False,
        "selective": True,
        "selectiveLogic": 0,
        "addMemo": True,
        "order": order,
        "position": 0,
        "disable": False,
        "excludeRecursion": False,
        "preventRecursion": True,
        "delayUntilRecursion": False,
        "probability": 100,
        "useProbability": True,
        "depth": 4,
        "group": "",
        "groupOverride": False,
        "groupWeight": 100,
        "scanDepth": None,
        "caseSensitive": None,
        "matchWholeWords": None,
        "useGroupScoring": None,
        "automationId": "",
        "role": 0,
        "sticky": None,
        "cooldown": None,
        "delay": None,
        "displayIndex": uid,
    }


def to_world(memory: Exported) -> JSONObject:
    """A World Info book: `{"entries": {"<uid>": entry}}`, the running recap first."""
    entries: dict[str, JSONValue] = {}
    if memory.running is not None:
        entries["0"] = _entry(0, "The story so far (recap-proxy)", memory.running.content,
                              [], True, 100)  # fmt: skip
    for s in memory.scenes:
        uid = len(entries)
        # Later scenes sort after earlier ones, as the story goes.
        entries[str(uid)] = _entry(uid, s.name or f"Scene {s.first}-{s.last}", s.recap,
                                   scene_keys(s.name), False, 100 + uid)  # fmt: skip
    for e in memory.entities:
        # An entity's entry: what is known of it, when the chat names it (ST-Auto-Recap's
        # auto-lorebook names its entries `type-Name` too).
        uid = len(entries)
        entries[str(uid)] = _entry(uid, f"{e.type}-{e.name}", "\n".join(e.facts),
                                   [e.name, *e.aliases], False, 100 + uid)  # fmt: skip
    return {"entries": entries}
