"""Planning reads only the stretch of a chat it needs: the scene-break check of a long
open scene (a backfill of thousands of messages) is the one reading the whole scene gives."""

from __future__ import annotations

from proxy.core.jsontypes import as_int, as_list
from proxy.core.scenes import Window, detection_window
from proxy.core.tokens import TokenCounter
from proxy.memory.planning import WorkPlanner
from proxy.memory.settings import MemorySettings
from proxy.sillytavern.chatfile import STMessage
from proxy.sillytavern.reconcile import Event
from proxy.store import Database
from proxy.store.jobs import Payload
from proxy.store.records import MemoryState
from tests.test_store import clock, record

CHAT = "u/chats/S/c"


def long_chat(count: int) -> Database:
    db = Database(":memory:", clock)
    # Every fifth message hidden: the check reads shown messages, rows are read in pages.
    messages = [
        STMessage(name="Ava", mes=f"message {i}", is_system=i % 5 == 0) for i in range(count)
    ]
    db.save_chat(record(CHAT), [None] * count, [b"%d" % i for i in range(count)],
                 messages.__getitem__, [Event("added", i) for i in range(count)])  # fmt: skip
    return db


def positions(db: Database, payload: Payload, key: str) -> list[int]:
    uids = [as_int(uid, key) for uid in as_list(payload[key], key)]
    found = db.memory.messages_by_uid(uids)
    return [found[uid].position for uid in uids]


def test_a_long_open_scene_is_checked_as_if_read_whole() -> None:
    db = long_chat(3000)
    settings = MemorySettings(include_hidden_messages=False)
    planner = WorkPlanner(settings, TokenCounter())
    state = MemoryState(active=True, current_recap=None, checked_uid=None, inherited=False)
    payload = planner.detection(db, CHAT, -1, state)
    assert payload is not None
    shown = [r.position for r in db.memory.messages_from(CHAT) if not r.message.hidden]

    def whole_window(checked: int | None) -> Window | None:
        return detection_window(
            shown,
            checked=checked,
            minimum=settings.minimum_scene_length,
            offset=settings.scene_break_offset,
            every=settings.scene_break_every,
            size=settings.scene_break_window,
        )

    whole = whole_window(None)
    assert whole is not None
    assert positions(db, payload, "choosable") == list(whole.choosable)
    assert positions(db, payload, "shown") == list(whole.shown)
    # Far into the scene, after a check found nothing there: the same again.
    checked = db.memory.uid_at(CHAT, 2000)
    state = MemoryState(active=True, current_recap=None, checked_uid=checked, inherited=False)
    payload = planner.detection(db, CHAT, -1, state)
    assert payload is not None
    later = whole_window(2000)
    assert later is not None
    assert positions(db, payload, "choosable") == list(later.choosable)
