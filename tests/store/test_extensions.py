"""Extension data in the mirror: flagged when it changes, read back until imported, and
filled in for stores from before it was kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from proxy.library.chats import ChatLibrary
from proxy.sillytavern.chatfile import STMessage
from proxy.sillytavern.reconcile import Event
from proxy.store import Database, Store
from proxy.store.schema import MIGRATIONS
from tests.memory.extension_chats import qvink_chat, qvink_memory
from tests.memory.story import CHAT_ID, Story
from tests.test_store import clock, record

CHAT = "u/chats/S/c"


def message(text: str, memory: str | None = None) -> STMessage:
    extra = {"qvink_memory": {"memory": memory}} if memory else {}
    return STMessage.from_json({"name": "Ava", "mes": text, "extra": extra})


def save(db: Database, messages: list[STMessage], digests: list[bytes]) -> None:
    layout = db.layout(CHAT)
    uids: list[int | None] = [uid for uid, _ in layout[: len(messages)]]
    uids += [None] * (len(messages) - len(uids))
    events = [Event("added", i) for i in range(len(layout), len(messages))]
    db.save_chat(record(CHAT), uids, digests, messages.__getitem__, events)


def test_changed_extension_data_waits_for_its_import() -> None:
    db = Database(":memory:", clock)
    save(db, [message("a", "A."), message("b"), message("c", "C.")], [b"1", b"2", b"3"])
    pending = db.extensions.pending(CHAT)
    assert [(p.position, p.extension) for p in pending] == [
        (0, '{"recap":"A."}'),
        (2, '{"recap":"C."}'),
    ]
    db.extensions.imported(p.uid for p in pending)
    assert db.extensions.pending(CHAT) == []
    # A line that changed without its extension data changing is not flagged again...
    save(db, [message("a2", "A."), message("b"), message("c", "C.")], [b"1x", b"2", b"3"])
    assert db.extensions.pending(CHAT) == []
    # ...one whose data changed or went is.
    save(db, [message("a2", "A2."), message("b"), message("c")], [b"1y", b"2", b"3y"])
    assert [(p.position, p.extension) for p in db.extensions.pending(CHAT)] == [
        (0, '{"recap":"A2."}'),
        (2, None),
    ]


def test_the_newest_summary() -> None:
    db = Database(":memory:", clock)
    texts = [STMessage.from_json({"mes": str(i), "extra": {"memory": f"S{i}"}}) for i in (0, 1)]
    save(db, [*texts, message("c", "C.")], [b"1", b"2", b"3"])
    found = db.extensions.latest_summary(CHAT)
    assert found is not None and found[1:] == (1, "S1")
    assert db.extensions.latest_summary("u/chats/S/other") is None


async def test_a_store_from_before_extension_data_reads_its_chats_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    story = qvink_chat(Story(data, set()))
    path = tmp_path / "store.sqlite3"
    library = ChatLibrary(data, Store(path))
    await library.index_all()
    before = await library.store.call(lambda db: [uid for uid, _ in db.layout(CHAT_ID)])
    await library.store.close()
    # As a store of schema 6 was: no extension data.
    old = sqlite3.connect(path)
    old.executescript(
        # v9's and v8's
        "DROP INDEX messages_layout; CREATE INDEX messages_chat ON messages(chat_id, position); "
        "DROP TABLE usage; DROP TABLE entity_mentions; DROP TABLE entity_changes; "
        "DROP TABLE vectors; "
        "DROP INDEX messages_extension_new; ALTER TABLE messages DROP COLUMN extension; "
        "ALTER TABLE messages DROP COLUMN extension_new; "
        "ALTER TABLE message_recaps DROP COLUMN source; "
        "ALTER TABLE memory_state DROP COLUMN imported_running; PRAGMA user_version=6;"
    )
    old.close()

    reopened = ChatLibrary(data, Store(path))
    await reopened.index_all()

    def read(db: Database) -> tuple[list[int], list[tuple[int, str | None]], int]:
        pending = db.extensions.pending(CHAT_ID)
        events = len(db.events(CHAT_ID))
        return (
            [uid for uid, _ in db.layout(CHAT_ID)],
            [(p.position, p.extension) for p in pending],
            events,
        )

    uids, pending, events = await reopened.store.call(read)
    await reopened.store.close()
    assert uids == before  # every message keeps its identity
    assert events == len(story.messages)  # the first indexing's "added" only: no edits
    assert pending[3] == (3, f'{{"recap":"{qvink_memory(3)}"}}')
    assert len(MIGRATIONS) == 12, "this test rebuilt a store of schema 6 (v8 to v12 dropped too)"
