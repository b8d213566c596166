"""Changes over the registry: the user's edits, deletions, merges and releases, condensing
and imports, applied in order over what the scenes say."""

from __future__ import annotations

from proxy.core.entities import Mention
from proxy.core.entity_changes import Change, edited, find, resolve

ALDRIC = (10, 5, Mention("Aldric", "character", ("the monk",), ("Keeps the ledger.",)))
EXILED = (30, 25, Mention("Aldric", "character", (), ("Was exiled.",)))
FRIAR = (40, 35, Mention("Friar Al", "character", (), ("Lives by the river.",)))
MILL = (20, 15, Mention("The Mill", "place", (), ("Burned down.",)))
STORY = [ALDRIC, MILL, EXILED, FRIAR]


def texts(entity: object) -> list[str]:
    return [f.text for f in getattr(entity, "facts")]  # noqa: B009


def test_with_no_changes_the_registry_is_the_scenes() -> None:
    found = resolve(STORY, [])
    assert [e.name for e in found] == ["Aldric", "The Mill", "Friar Al"]
    assert texts(found[0]) == ["Keeps the ledger.", "Was exiled."]
    assert found[0].from_scenes == found[0].facts and not found[0].edited


def test_an_edit_is_kept_as_written_whatever_later_scenes_say_until_released() -> None:
    aldric = resolve(STORY, [])[0]
    change = edited(aldric, name="Brother Aldric", facts=["Keeps the guild ledger."])
    later = (50, 45, Mention("Brother Aldric", "character", (), ("Came back.",)))
    found = resolve([*STORY, later], [change])
    entity = find(found, "brother aldric")
    assert entity is not None and entity.edited
    assert entity.name == "Brother Aldric" and entity.aliases == ("the monk",)
    assert texts(entity) == ["Keeps the guild ledger."]
    assert [f.source for f in entity.facts] == ["edit"]
    # The scenes' facts, the later scene's among them (the user's new name joined them).
    assert [f.text for f in entity.from_scenes][-1] == "Came back."
    released = resolve([*STORY, later], [change, Change("release", "Brother Aldric")])
    entity = find(released, "Aldric")
    assert entity is not None and not entity.edited and entity.name == "Aldric"
    assert texts(entity) == ["Keeps the ledger.", "Was exiled.", "Came back."]


def test_a_deleted_entity_stays_deleted_when_named_again_until_released() -> None:
    changes = [Change("delete", "the monk")]
    assert [e.name for e in resolve(STORY, changes) if e.deleted] == ["Aldric"]
    assert find(resolve(STORY, [*changes, Change("release", "Aldric")]), "Aldric") is not None
    restored = resolve(STORY, [*changes, Change("release", "aldric")])
    assert not any(e.deleted for e in restored)


def test_a_merge_makes_two_entities_one_under_the_name_merged_into() -> None:
    found = resolve(STORY, [Change("merge", "Friar Al", name="Aldric")])
    assert [e.name for e in found] == ["Aldric", "The Mill"]
    assert found[0].aliases == ("the monk", "Friar Al")
    assert texts(found[0]) == ["Keeps the ledger.", "Was exiled.", "Lives by the river."]
    # Merged the other way: the friar's name stands.
    other = resolve(STORY, [Change("merge", "Aldric", name="Friar Al")])
    assert other[0].name == "Friar Al" and "Aldric" in other[0].aliases


def test_a_condensing_stands_while_the_facts_it_rewrote_stand() -> None:
    condense = Change(
        "condense",
        "Aldric",
        facts=("Exiled ledger-keeper.",),
        covers=("Keeps the ledger.", "Was exiled."),
        id=7,
    )
    later = (50, 45, Mention("Aldric", "character", (), ("Came back.",)))
    entity = resolve([*STORY, later], [condense])[0]
    assert texts(entity) == ["Exiled ledger-keeper.", "Came back."]
    assert [f.source for f in entity.facts] == ["condensed", "scene"]
    assert entity.condensed == 7
    # Scene 30 recapped again without the exile: the condensing no longer holds.
    again = (30, 25, Mention("Aldric", "character", (), ("Left town.",)))
    entity = resolve([ALDRIC, MILL, again, later], [condense])[0]
    assert entity.condensed is None
    assert texts(entity) == ["Keeps the ledger.", "Left town.", "Came back."]


def test_an_edit_outranks_condensing_and_an_import_is_older_than_the_story() -> None:
    imported = Change("import", "Aldric", name="Aldric", type="character",
                      facts=("Born in the north.",))  # fmt: skip
    entity = resolve(STORY, [imported])[0]
    assert texts(entity)[0] == "Born in the north." and entity.facts[0].source == "imported"
    alone = Change("import", "Mara", name="Mara", type="character", facts=("A smith.",))
    assert resolve(STORY, [alone])[0].name == "Mara"


def test_a_change_of_an_entity_no_scene_names_waits() -> None:
    found = resolve([MILL], [Change("delete", "Aldric")])
    assert [e.name for e in found] == ["The Mill"] and not found[0].deleted
    # Named again: the change applies.
    assert find(resolve([MILL, ALDRIC], [Change("delete", "Aldric")]), "Aldric") is not None
    assert [e.deleted for e in resolve([MILL, ALDRIC], [Change("delete", "Aldric")])] == [
        True,
        False,
    ]
