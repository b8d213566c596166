"""The scene full-text index: kept current by the schema's triggers, read by the chat
path through its own read-only connection."""

from __future__ import annotations

from pathlib import Path

from proxy.sillytavern.chatfile import STMessage
from proxy.sillytavern.reconcile import Event
from proxy.store import Database
from proxy.store.schema import MIGRATIONS
from proxy.store.search import SceneSearch
from tests.test_store import clock, record

CHAT = "u/chats/S/c"
RECAPS = [
    "Ava hid the brass key under the third stone of the old mill.",
    "Tom lost his silver compass in the river during the storm.",
    "The market square was full of traders selling spices and wool.",
    "A wolf followed them through the pines until dawn.",
]


def story(path: Path | str) -> tuple[Database, list[int]]:
    """A chat of eight messages with a scene ending at every second one."""
    db = Database(path, clock)
    messages = [STMessage(name="Ava", mes=f"message {i}") for i in range(8)]
    events = [Event("added", i) for i in range(8)]
    db.save_chat(record(CHAT), [None] * 8, [b"%d" % i for i in range(8)], messages.__getitem__,
                 events)  # fmt: skip
    uids = [m.uid for m in db.messages(CHAT)][1::2]
    for uid, recap in zip(uids, RECAPS, strict=True):
        db.memory.set_break(CHAT, uid, "auto", 0.0)
        db.memory.add_scene_recap(CHAT, uid, recap, 0.0, scene_name=None, source="llm")
    return db, uids


def indexed(db: Database) -> dict[int, str]:
    return dict(db.db.execute("SELECT rowid, recap FROM scene_search").fetchall())


def test_the_index_follows_every_change_to_a_scene() -> None:
    db, uids = story(":memory:")
    assert indexed(db) == dict(zip(uids, RECAPS, strict=True))
    # A new version replaces the old one in the index; choosing the old one brings it back.
    db.memory.add_scene_recap(CHAT, uids[0], "Ava gave the key to Tom.", 0.0, scene_name=None,
                              source="edit")  # fmt: skip
    assert indexed(db)[uids[0]] == "Ava gave the key to Tom."
    db.memory.update_break(uids[0], current=1)
    assert indexed(db)[uids[0]] == RECAPS[0]
    # A renamed scene is found by its new name.
    db.memory.update_break(uids[1], name="The Storm")
    row = db.db.execute("SELECT name FROM scene_search WHERE rowid=?", (uids[1],)).fetchone()
    assert row[0] == "The Storm"
    # A hidden break leaves the index, and comes back when shown.
    db.memory.update_break(uids[2], visible=0)
    assert uids[2] not in indexed(db)
    db.memory.update_break(uids[2], visible=1)
    assert uids[2] in indexed(db)
    # A removed break, or a deleted message, takes its scene with it.
    db.memory.remove_break(uids[2])
    db.db.execute("DELETE FROM messages WHERE uid=?", (uids[3],))
    assert set(indexed(db)) == {uids[0], uids[1]}


def test_search_ranks_the_scene_that_matches(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    db, uids = story(path)
    search = SceneSearch(path)
    try:
        assert search.ranked(CHAT, '"brass" OR "key" OR "weather"', 10, 0.5) == [uids[0]]
        # Stemmed: "compasses" finds "compass"; a chat of its own only.
        assert search.ranked(CHAT, '"compasses"', 10, 0.5) == [uids[1]]
        assert search.ranked("another/chat", '"compass"', 10, 0.0) == []
        # A weak match (a word most scenes share) is not a match.
        assert search.ranked(CHAT, '"the"', 10, 0.5) == []
        # It sees what the writer commits after it opened.
        db.memory.add_scene_recap(CHAT, uids[2], "Traders sold a brass lantern.", 0.0,
                                  scene_name=None, source="llm")  # fmt: skip
        assert uids[2] in search.ranked(CHAT, '"lantern"', 10, 0.5)
        # Bad input answers nothing, never an error.
        assert search.ranked(CHAT, '"unclosed', 10, 0.0) == []
        assert search.ranked(CHAT, "", 10, 0.0) == []
    finally:
        search.close()
        db.close()


def test_an_in_memory_store_has_no_search() -> None:
    assert SceneSearch(":memory:").ranked(CHAT, '"key"', 10, 0.0) == []


def test_a_store_from_before_the_index_gets_its_scenes_indexed(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db, uids = story(path)
    # As a store of schema 5 was: no index, no triggers.
    db.db.executescript(
        "DROP TRIGGER scene_search_break_insert; DROP TRIGGER scene_search_break_update; "
        "DROP TRIGGER scene_search_break_delete; DROP TRIGGER scene_search_recap_insert; "
        "DROP TABLE scene_search; PRAGMA user_version=5;"
    )
    db.db.executescript(
        "ALTER TABLE memory_state DROP COLUMN condense_version; "
        # and without what schemas 7 to 12 added
        "DROP INDEX messages_layout; CREATE INDEX messages_chat ON messages(chat_id, position); "
        "DROP TABLE usage; DROP TABLE entity_mentions; DROP TABLE entity_changes; "
        "DROP TABLE vectors; "
        "DROP INDEX messages_extension_new; ALTER TABLE messages DROP COLUMN extension; "
        "ALTER TABLE messages DROP COLUMN extension_new; "
        "ALTER TABLE message_recaps DROP COLUMN source; "
        "ALTER TABLE memory_state DROP COLUMN imported_running;"
    )
    db.close()
    upgraded = Database(path, clock)
    try:
        assert upgraded.schema_version == len(MIGRATIONS)
        assert indexed(upgraded) == dict(zip(uids, RECAPS, strict=True))
    finally:
        upgraded.close()
