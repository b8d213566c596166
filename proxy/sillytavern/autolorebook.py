"""ST-Auto-Recap's auto-lorebook: the entities it kept in a chat's own lorebook, read as
entities to take over. Pure.

The extension keeps one book per chat (by default `z-AutoLB-{{char}}-{{chat}}`, attached
as the chat's own book, `chat_metadata.world_info`): one entry per entity, its comment
`type-Name` and its content the entity's facts one a line, and per type a registry entry
`_registry_<type>` that lists each entity as
`- UID=<uid> | name: <type-Name> | aliases: a; b | synopsis: ...`. A book without any
registry entry is someone's own lorebook, not the extension's, and is not read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from proxy.core.entities import FACT_LONGEST, NAME_LONGEST, unique
from proxy.core.entity_changes import Change
from proxy.core.lore import WorldEntry

REGISTRY = "_registry_"
# Its entity types, as ours: a location is a place, a faction a group; lore, events,
# documents and rules are `other`.
TYPES = {
    "character": "character",
    "location": "place",
    "item": "item",
    "faction": "group",
    "lore": "other",
    "event": "other",
    "document": "other",
    "rule": "other",
}
_COMMENT = re.compile(r"^([a-z]+)-(.+)$")
_LISTED = re.compile(r"^- UID=(\S+) \| name: .*? \| aliases: (.*?) \| synopsis:", re.MULTILINE)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]\s+)?")


def book_entities(entries: Sequence[WorldEntry]) -> list[Change]:
    """The `import` changes of the entities an auto-lorebook holds, in its order (none
    when the book is not one)."""
    registries = [e for e in entries if e.comment.startswith(REGISTRY)]
    if not registries:
        return []
    aliases: dict[str, tuple[str, ...]] = {}
    for entry in registries:
        for uid, listed in _LISTED.findall(entry.content):
            names = (" ".join(a.split()) for a in listed.split(";"))
            aliases[uid] = tuple(a for a in names if a and len(a) <= NAME_LONGEST)
    found: list[Change] = []
    for entry in entries:
        match = _COMMENT.match(entry.comment.strip())
        if match is None or match.group(1) not in TYPES:
            continue
        name = " ".join(match.group(2).split())
        if not name or len(name) > NAME_LONGEST:
            continue
        lines = (_BULLET.sub("", line).strip() for line in entry.content.splitlines())
        facts = unique(" ".join(t.split()) for t in lines if t and len(t) <= FACT_LONGEST)
        if not facts:
            continue
        found.append(
            Change(
                "import",
                name,
                name=name,
                type=TYPES[match.group(1)],
                aliases=unique(aliases.get(str(entry.uid), ()), exclude=name),
                facts=facts,
            )
        )
    return found
