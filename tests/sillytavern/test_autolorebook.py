"""ST-Auto-Recap's auto-lorebook read as entities: its `type-Name` entries with their
registry's aliases; a book that is no auto-lorebook gives none."""

from __future__ import annotations

from proxy.core.lore import WorldEntry
from proxy.sillytavern.autolorebook import book_entities

REGISTRY = WorldEntry(
    uid=0,
    comment="_registry_character",
    content="[Registry: character]\n"
    "- UID=1 | name: character-Marcus | aliases: Marc; the smith | synopsis: the blacksmith\n"
    "- UID=2 | name: location-Old Mill | aliases:  | synopsis: a ruin",
)
MARCUS = WorldEntry(
    uid=1, comment="character-Marcus", content="- Is the village blacksmith.\nOwes Ava money.\n"
)
MILL = WorldEntry(uid=2, comment="location-Old Mill", content="Burned down in the storm.")
QUEUE = WorldEntry(uid=9, comment="__operation_queue", content="[]", disable=True)
EMPTY = WorldEntry(uid=3, comment="item-Brass Key", content="  \n")


def test_entities_of_an_auto_lorebook() -> None:
    found = book_entities([REGISTRY, MARCUS, MILL, QUEUE, EMPTY])
    assert [(c.kind, c.name, c.type, c.aliases, c.facts) for c in found] == [
        ("import", "Marcus", "character", ("Marc", "the smith"),
         ("Is the village blacksmith.", "Owes Ava money.")),
        ("import", "Old Mill", "place", (), ("Burned down in the storm.",)),
    ]  # fmt: skip


def test_a_book_that_is_no_auto_lorebook_gives_none() -> None:
    assert book_entities([MARCUS, MILL]) == []
    assert book_entities([]) == []
