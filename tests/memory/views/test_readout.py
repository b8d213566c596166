"""What the API shows of a chat's memory, read straight from a store."""

from __future__ import annotations

from pathlib import Path

from proxy.core.recaps import RecapShelf
from proxy.memory.views import readout
from proxy.memory.views.view import MemoryView
from proxy.sillytavern.chatfile import STMessage, text_hash
from proxy.sillytavern.reconcile import Event
from proxy.store import Database
from tests.test_store import clock, record

CHAT = "u/chats/S/c"


def chat(path: Path) -> tuple[Database, list[int]]:
    """Eight messages; scenes end at 1 (hidden), 3 and 5."""
    db = Database(path, clock)
    messages = [STMessage(name="Ava", mes=f"message {i}") for i in range(8)]
    events = [Event("added", i) for i in range(8)]
    db.save_chat(record(CHAT), [None] * 8, [b"%d" % i for i in range(8)], messages.__getitem__,
                 events)  # fmt: skip
    uids = [m.uid for m in db.messages(CHAT)]
    for position in (1, 3, 5):
        db.memory.set_break(CHAT, uids[position], "auto", 0.0)
    db.memory.update_break(uids[1], visible=0)
    return db, uids


def test_scenes_span_from_the_last_visible_break(tmp_path: Path) -> None:
    db, uids = chat(tmp_path / "s.sqlite3")
    db.memory.add_scene_recap(CHAT, uids[3], "Ava left.", 0.0, scene_name="Leaving", source="llm")
    db.memory.add_scene_recap(CHAT, uids[3], "Ava went.", 0.0, scene_name=None, source="edit")
    listed = readout.scenes(db, CHAT)
    assert [(s["index"], s["first"], s["visible"]) for s in listed] == [
        (1, 0, False),
        (3, 0, True),  # the hidden break at 1 does not end a scene
        (5, 4, True),
    ]
    assert listed[1]["versions"] == 2 and listed[1]["recap"] == "Ava went."
    assert listed[2]["recap"] is None and listed[2]["current_version"] is None

    found = db.memory.scene_break(uids[3])
    assert found is not None
    one = readout.scene(db, found)
    assert one["current_version"] == 2
    versions = one["versions"]
    assert isinstance(versions, list)
    assert [(v["version"], v["current"]) for v in versions if isinstance(v, dict)] == [
        (1, False),
        (2, True),
    ]


def test_message_recaps_say_stale_excluded_and_whether_they_can_be_injected(
    tmp_path: Path,
) -> None:
    db, uids = chat(tmp_path / "s.sqlite3")
    put = db.memory.put_message_recap
    put(CHAT, uids[6], 0, text_hash("message 6"), "Ava spoke.", 0.0)
    put(CHAT, uids[7], 0, text_hash("what message 7 said before"), "Ava spoke again.", 0.0)
    db.memory.set_excluded(CHAT, uids[2], True)
    view = MemoryView(shelf=RecapShelf(positions=(6,)))

    listed = readout.message_recaps(db, CHAT, view)
    assert [(m["index"], m["stale"], m["excluded"], m["can_be_injected"]) for m in listed] == [
        (2, False, True, False),
        (6, False, False, True),
        (7, True, False, False),
    ]
    assert listed[0]["recap"] is None and listed[1]["source"] == "llm"
    # Without a view (the chat was never planned) nothing is said to go into requests.
    assert not any(m["can_be_injected"] for m in readout.message_recaps(db, CHAT, None))


def test_the_overview_counts_the_visible_scenes_and_the_running_recap(tmp_path: Path) -> None:
    db, uids = chat(tmp_path / "s.sqlite3")
    db.memory.activate(CHAT)
    db.memory.add_running(
        CHAT, "So far.", 0.0, scene_count=1, prev_scene_uid=None, new_scene_uid=uids[3],
        source="llm",
    )  # fmt: skip
    chat_record = db.chat(CHAT)
    assert chat_record is not None
    shown = readout.overview(db, chat_record, MemoryView(cutoff=3), True, 4)
    assert shown["scenes"] == 2 and shown["active"] is True and shown["on"] is True
    assert shown["covered_through"] == 3 and shown["left_out_through"] == 3
    assert shown["scene_check_in"] == 4
    running = shown["running_recap"]
    assert isinstance(running, dict)
    assert running["new_scene_index"] == 3 and running["current"] is True
    assert shown["queue"] == {"queued": 0, "running": 0, "failed": 0}
    assert readout.running_versions(db.memory, CHAT) == [running]
