"""The synchronous store: the change log, per-chat on/off, deleted chats forgotten, a
failed write."""

from __future__ import annotations

import sqlite3

import pytest

from proxy.sillytavern.chatfile import STMessage
from proxy.sillytavern.reconcile import Event
from proxy.store import (
    Database,
)
from tests.test_store import clock, record


def test_events_are_logged_with_uids_and_enabled_is_kept() -> None:
    store = Database(":memory:", clock)
    message = STMessage(name="Alex", is_user=True, mes="hi")
    events = store.save_chat(record(), [None], [b"d1"], lambda i: message, [Event("added", 0)])
    uid = store.messages("u/chats/S/c")[0].uid
    assert events == [Event("added", 0, uid)]
    assert store.events("u/chats/S/c") == [(1, "added", uid, 0)]
    store.set_enabled("u/chats/S/c", False)
    store.save_chat(record(), [uid], [b"d1"], lambda i: message, [])
    chat = store.chat("u/chats/S/c")
    assert chat is not None and chat.enabled is False  # re-indexing keeps the user's choice


def test_deleted_chats_are_forgotten_after_a_week() -> None:
    now = [1000.0]
    store = Database(":memory:", lambda: now[0])
    message = STMessage(name="Seraphina", mes="hi")
    store.save_chat(record(), [None], [b"d1"], lambda i: message, [Event("added", 0)])
    uid = store.messages("u/chats/S/c")[0].uid
    store.lore.add_snapshot("u/chats/S/c", 0, 0, "normal", {"active": [], "inactive": []}, now[0])
    assert store.lore.snapshot_for(uid, 0) is not None
    store.mark_deleted("u/chats/S/c")
    assert store.purge_deleted() == []  # a rename may still claim it
    now[0] = 1e12
    assert store.purge_deleted() == ["u/chats/S/c"]
    assert store.chat("u/chats/S/c") is None
    assert store.messages("u/chats/S/c") == []
    assert store.lore.snapshot_for(uid, 0) is None
    assert store.events("u/chats/S/c") == []


def test_a_failed_write_raises_its_own_error_and_leaves_no_transaction_open() -> None:
    store = Database(":memory:", clock)
    # SQLite rolls a transaction back by itself on some errors (a full disk): the error
    # raised is that one, not a failed ROLLBACK's "no transaction is active".
    with pytest.raises(sqlite3.OperationalError, match="disk is full"), store.transaction():
        store.db.execute("ROLLBACK")
        raise sqlite3.OperationalError("database or disk is full")
    # A COMMIT that fails (a deferred constraint here; a full disk alike) is rolled back:
    # the next transaction can begin, and nothing of the failed one went in.
    with pytest.raises(sqlite3.IntegrityError), store.transaction():
        store.db.execute("PRAGMA defer_foreign_keys=ON")
        store.db.execute("INSERT INTO memory_state (chat_id) VALUES ('no such chat')")
    assert not store.db.in_transaction
    with store.transaction():
        store.db.execute("INSERT INTO settings_kv (key, value) VALUES ('k', 'v')")
    assert store.db.execute("SELECT COUNT(*) FROM memory_state").fetchone()[0] == 0
