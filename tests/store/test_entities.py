"""The entities each scene recap version listed: a chat's current ones are those of its
visible scenes' current versions, so a scene recapped again, edited or deleted takes its
own along."""

from __future__ import annotations

from proxy.core.entities import Mention
from proxy.core.entity_changes import Change
from tests.store.test_search import CHAT, story

ALDRIC = Mention("Aldric", "character", ("the monk",), ("Keeps the ledger.",))
MILL = Mention("The Mill", "place", (), ("Burned down.",))


def test_a_chats_entities_are_its_current_scene_recaps() -> None:
    db, uids = story(":memory:")  # a scene ends at positions 1, 3, 5 and 7 (version 1 each)
    db.entities.add(CHAT, uids[0], 1, [ALDRIC, MILL])
    db.entities.add(CHAT, uids[2], 1, [Mention("Aldric", "other", (), ("Was exiled.",))])
    assert db.entities.listed(uids[0], 1) == [ALDRIC, MILL]
    assert [(uid, position, m.name) for uid, position, m in db.entities.current(CHAT)] == [
        (uids[0], 1, "Aldric"),
        (uids[0], 1, "The Mill"),
        (uids[2], 5, "Aldric"),
    ]
    # Recapped again: the new version's list (here none) stands; the old one is kept.
    version = db.memory.add_scene_recap(CHAT, uids[0], "Again.", 0.0, scene_name=None, source="llm")
    assert [m.name for _, _, m in db.entities.current(CHAT)] == ["Aldric"]
    assert db.entities.listed(uids[0], 1) == [ALDRIC, MILL]
    db.memory.update_break(uids[0], current=version - 1)  # the old version chosen again
    assert len(db.entities.current(CHAT)) == 3
    # A hidden scene, a removed break, a deleted message: their entities go.
    db.memory.update_break(uids[2], visible=0)
    assert [m.name for _, _, m in db.entities.current(CHAT)] == ["Aldric", "The Mill"]
    db.memory.remove_break(uids[0])
    assert db.entities.current(CHAT) == []
    db.db.execute("DELETE FROM messages WHERE uid=?", (uids[2],))
    assert db.db.execute("SELECT COUNT(*) FROM entity_mentions").fetchone()[0] == 0


def test_changes_are_kept_in_order_and_follow_a_rename() -> None:
    db, uids = story(":memory:")
    db.entities.add(CHAT, uids[0], 1, [ALDRIC, MILL])
    written = Change("edit", "Aldric", name="Brother Aldric", type="character",
                     aliases=("the monk",), facts=("Keeps the guild ledger.",))  # fmt: skip
    first = db.entities.change(CHAT, written, 5.0)
    second = db.entities.change(CHAT, Change("delete", "The Mill"), 6.0)
    assert second > first
    kept = db.entities.changes(CHAT)
    assert [(c.kind, c.key, c.id, c.made) for c in kept] == [
        ("edit", "Aldric", first, 5.0),
        ("delete", "The Mill", second, 6.0),
    ]
    assert kept[0].facts == ("Keeps the guild ledger.",) and kept[0].aliases == ("the monk",)
    names = [(e.name, e.edited, e.deleted) for e in db.entities.registry(CHAT)]
    assert names == [("Brother Aldric", True, False), ("The Mill", False, True)]
    db.rename(CHAT, CHAT + " (renamed)")
    assert [c.kind for c in db.entities.changes(CHAT + " (renamed)")] == ["edit", "delete"]
    assert db.entities.changes(CHAT) == []
