"""Lorebook snapshots in the store: a snapshot waits for the reply it was made for, binds
to a character's message only, expires when that reply never comes, and a scene reads
the entries of its messages' current swipes once each."""

from __future__ import annotations

from proxy.sillytavern.chatfile import STMessage
from proxy.sillytavern.reconcile import Event
from proxy.store import Database
from proxy.store.schema import PENDING_SNAPSHOT_TTL
from tests.test_store import record

CHAT = "u/chats/S/c"


def entry(world: str, uid: int) -> dict[str, object]:
    return {"world": world, "uid": uid, "comment": f"{world} {uid}"}


def save(db: Database, messages: list[STMessage]) -> None:
    """Save the chat as `messages`: the stored ones kept, the rest added (a grown chat)."""
    known: list[int | None] = [m.uid for m in db.messages(CHAT)]
    events = [Event("added", i) for i in range(len(known), len(messages))]
    uids = known + [None] * (len(messages) - len(known))
    hashes = [b"%d" % i for i in range(len(messages))]
    db.save_chat(record(CHAT), uids, hashes, messages.__getitem__, events)


def test_a_snapshot_waits_for_its_reply_and_binds_to_a_characters_message_only() -> None:
    now = [1000.0]
    db = Database(":memory:", lambda: now[0])
    user = STMessage(name="Arden", mes="hello", is_user=True)
    save(db, [STMessage(name="Ava", mes="hi"), user])
    # The request asked for the reply at index 2, which is not saved yet.
    db.lore.add_snapshot(CHAT, 2, 0, "normal", {"active": [entry("w", 1)], "inactive": []}, 1.0)
    # A snapshot for index 1 (the user's message) never binds.
    db.lore.add_snapshot(CHAT, 1, 0, "normal", {"active": [entry("w", 9)], "inactive": []}, 1.0)
    assert all(db.lore.snapshot_for(m.uid, 0) is None for m in db.messages(CHAT))

    save(db, [STMessage(name="Ava", mes="hi"), user, STMessage(name="Ava", mes="reply")])
    uids = [m.uid for m in db.messages(CHAT)]
    bound = db.lore.snapshot_for(uids[2], 0)
    assert bound is not None and bound["active"] == [entry("w", 1)]
    assert bound["generation"] == "normal" and bound["created"] == 1.0
    assert db.lore.snapshot_for(uids[1], 0) is None


def test_a_snapshot_whose_reply_never_came_is_dropped_after_an_hour() -> None:
    now = [1000.0]
    db = Database(":memory:", lambda: now[0])
    save(db, [STMessage(name="Arden", mes="hello", is_user=True)])
    snapshot = {"active": [entry("w", 1)], "inactive": []}
    db.lore.add_snapshot(CHAT, 1, 0, "normal", snapshot, now[0])
    now[0] += PENDING_SNAPSHOT_TTL + 1
    db.lore.bind_snapshots(CHAT, now[0])
    save(db, [STMessage(name="Arden", mes="hello", is_user=True), STMessage(name="Ava", mes="x")])
    assert db.lore.snapshot_for(db.messages(CHAT)[1].uid, 0) is None


def test_a_scene_reads_its_current_swipes_entries_once_each() -> None:
    db = Database(":memory:", lambda: 1000.0)
    save(db, [STMessage(name="Ava", mes=f"m{i}") for i in range(3)])
    one, two, three = entry("w", 1), entry("w", 2), entry("other", 1)
    db.lore.add_snapshot(CHAT, 0, 0, "normal", {"active": [one, two], "inactive": []}, 1.0)
    db.lore.add_snapshot(CHAT, 1, 0, "normal", {"active": [two, three], "inactive": []}, 1.0)
    # Message 2's swipe 1 was never chosen (its current swipe is 0): its entry is not read.
    db.lore.add_snapshot(CHAT, 2, 1, "swipe", {"active": [entry("w", 7)], "inactive": []}, 1.0)
    assert db.lore.active_lore(CHAT, 0, 2) == [one, two, three]
    assert db.lore.active_lore(CHAT, 1, 1) == [two, three]
    assert db.lore.active_lore(CHAT, 5, 9) == []
