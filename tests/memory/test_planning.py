"""Planning reads only the stretch of a chat it needs: the scene-break check of a long
open scene (a backfill of thousands of messages) is the one reading the whole scene gives."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.core.jsontypes import as_int, as_list
from proxy.core.scenes import Window, detection_window
from proxy.core.tokens import TokenCounter
from proxy.memory.planning import WorkPlanner, batched
from proxy.settings.memory import MemorySettings
from proxy.sillytavern.chatfile import STMessage
from proxy.sillytavern.reconcile import Event
from proxy.store import Database
from proxy.store.jobs import Payload
from proxy.store.records import MemoryState
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory, recapped
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
        return detection_window(shown, checked=checked, rules=settings.detection_rules())

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


# -- message recaps: only what ST no longer sends ------------------------------------------


async def folded(memory_proxy: MemoryFactory, **dotted: Any) -> tuple[Memory, dict[str, Any]]:
    """A 40-message story whose first scene (0-8) is in the running recap, sent whole
    once (`message_recaps = "needed"`), and that request."""
    memory = await memory_proxy(40, {8}, **{"memory.message_recaps": "needed", **dotted})
    whole = memory.story.request()
    await memory.client.post("/v1/chat/completions", json=whole)
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    return memory, whole


def cut_at(whole: dict[str, Any], first: int) -> dict[str, Any]:
    """ST's request once its context is full: the chat from message `first` on."""
    return {**whole, "messages": whole["messages"][:2] + whole["messages"][2 + first :]}


async def test_needed_recaps_only_what_st_no_longer_sends(memory_proxy: MemoryFactory) -> None:
    memory, whole = await folded(
        memory_proxy, **{"memory.message_recap_ahead": 4, "memory.history_cut_step": 1}
    )
    assert await memory.run(lambda db: db.memory.message_recaps(CHAT_ID)) == {}  # all sent
    # ST's context is full: it sends the chat from message 20 on.
    cut = cut_at(whole, 20)
    await memory.client.post("/v1/chat/completions", json=cut)

    await memory.until(lambda db: 22 in recapped(db))
    # The open scene (9 on: the running recap covers 0-8) before the cut and within 4 of it,
    # the character's messages (the user's are not recapped by default), in batches of
    # three: the last, due at once, filled up with the next ones; nothing after that.
    assert await memory.run(recapped) == {10, 12, 14, 16, 18, 20, 22, 24, 26}
    await memory.client.post("/v1/chat/completions", json=cut)
    sent = memory.forwarded()[-1]
    # The recaps go in: in the memory's changing part, in the chat at depth 2.
    changing = sent["messages"][-3]["content"]
    assert changing.startswith("<RECENT_MEMORY>") and "#10" in changing


def test_a_switch_from_before_reads_as_a_policy() -> None:
    assert MemorySettings(message_recaps=True).message_recaps == "always"
    assert MemorySettings(message_recaps=False).message_recaps == "off"
    assert MemorySettings().message_recaps == "needed"


# -- the history's start, stepped: the prompt's prefix holds for a few exchanges ---------


def sent_history(memory: Memory) -> list[str]:
    """The chat messages of the last forwarded request (memory and ST's own parts aside)."""
    sent = memory.forwarded()[-1]["messages"]
    return [m["content"] for m in sent if m["role"] != "system"]


async def test_st_cutting_the_chat_moves_the_history_start_in_steps(
    memory_proxy: MemoryFactory,
) -> None:
    memory, whole = await folded(
        memory_proxy, **{"memory.message_recap_ahead": 4, "memory.history_cut_step": 4}
    )
    chat = [m["mes"] for m in memory.story.messages]

    # Trimming leaves out 0-8 (the first scene, in the running recap): the start steps by
    # four from 9 on. ST first cuts at 22: the step would start the history at 25, but the
    # character's 22 has no recap yet, and nothing would stand in for it: the history
    # starts where ST cut it.
    response = await memory.client.post("/v1/chat/completions", json=cut_at(whole, 22))
    assert response.headers["X-Recap-Trimmed"] == "0"
    assert sent_history(memory)[0] == chat[22]
    # Its recap is written at once, with the others due (before 25, and within 4 of it),
    # in batches of three, the last filled up with the next messages.
    await memory.until(lambda db: 22 in recapped(db))
    assert await memory.run(recapped) == {10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32}

    # The next exchanges: ST cuts at 23, then 25, the history starts at 25, and the
    # memory before the changing part stays as it was: a provider's cache holds.
    response = await memory.client.post("/v1/chat/completions", json=cut_at(whole, 23))
    assert response.headers["X-Recap-Trimmed"] == "2"
    before = memory.forwarded()[-1]["messages"]
    assert "#22" in before[-3]["content"]  # its recap stands in for it
    await memory.client.post("/v1/chat/completions", json=cut_at(whole, 25))
    after = memory.forwarded()[-1]["messages"]
    assert after[:-3] == before[:-3] and sent_history(memory)[0] == chat[25]
    # ST passes 25: the start steps on to 29.
    await memory.client.post("/v1/chat/completions", json=cut_at(whole, 26))
    assert sent_history(memory)[0] == chat[29]


async def test_a_stale_recap_does_not_stand_in(memory_proxy: MemoryFactory) -> None:
    memory, whole = await folded(
        memory_proxy, **{"memory.message_recap_ahead": 4, "memory.history_cut_step": 4}
    )
    await memory.client.post("/v1/chat/completions", json=cut_at(whole, 22))
    await memory.until(lambda db: 24 in recapped(db))
    # The user edits Ava's 24 in ST, and its new recap is slow to come: the old one is
    # stale, and the step stops before 24 (only the user's 23 goes).
    memory.fake.state.faults = {"message_recap": ["hold"]}
    memory.story.messages[24]["mes"] = "Ava lights a fire in the cave and tells Tom to sleep."
    memory.story.save()
    await asyncio.wait_for(memory.fake.state.held.wait(), 5)
    edited = cut_at(memory.story.request(), 23)
    try:
        response = await memory.client.post("/v1/chat/completions", json=edited)
        assert response.headers["X-Recap-Trimmed"] == "1"
        assert sent_history(memory)[0] == memory.story.messages[24]["mes"]
    finally:
        memory.fake.state.release.set()
    await memory.until(
        lambda db: any("fire" in r.recap for r in db.memory.message_recaps(CHAT_ID).values())
    )
    response = await memory.client.post("/v1/chat/completions", json=edited)
    assert response.headers["X-Recap-Trimmed"] == "2"


async def test_messages_deleted_just_before_a_request_move_the_memory_with_them(
    memory_proxy: MemoryFactory,
) -> None:
    """The user deletes two older messages in ST and sends the next one at once. The chat
    is re-read for the request, but its memory's view is planned again only once the
    request is answered: the view it finds is carried over the re-read, its recaps at the
    positions their messages have now (`proxy.memory.views.reread`). Held by their old ones, the
    deleted 12's recap would go in, the recap of the character's 20 (22 before), which ST
    no longer sends, would not, and the stepped start would leave out the character's 24
    (26 before) with its recap taken for one of a message the request still carries."""
    memory, whole = await folded(
        memory_proxy, **{"memory.message_recap_ahead": 4, "memory.history_cut_step": 4}
    )
    await memory.client.post("/v1/chat/completions", json=cut_at(whole, 23))
    await memory.until(lambda db: {12, 22, 24, 26, 28} <= recapped(db))
    del memory.story.messages[12:14]
    memory.story.save()
    chat = [m["mes"] for m in memory.story.messages]
    for planned in (False, True):
        if planned:  # the view built anew from the file: the same request, the same memory
            await memory.engine.settle()
        response = await memory.client.post(
            "/v1/chat/completions", json=cut_at(memory.story.request(), 22)
        )
        # ST cuts at 22; the start steps to 25, the recaps of 22 and 24 (made as 24 and
        # 26) standing in for them.
        assert response.headers["X-Recap-Trimmed"] == "3"
        assert sent_history(memory)[0] == chat[25]
        changing = memory.forwarded()[-1]["messages"][-3]["content"]
        assert all(f"#{old}: " in changing for old in (22, 24, 26)), changing
        assert "#12: " not in changing


async def test_messages_older_than_the_lookback_hold_the_stepped_start(
    memory_proxy: MemoryFactory,
) -> None:
    """Planning recaps only the newest `message_recap_lookback` messages by itself: older
    uncovered ones never get a recap to stand in for them, and are never stepped away."""
    memory, whole = await folded(
        memory_proxy,
        **{"memory.message_recap_lookback": 10, "memory.history_cut_step": 4},
    )
    for first in (22, 23):
        response = await memory.client.post("/v1/chat/completions", json=cut_at(whole, first))
        assert response.headers["X-Recap-Trimmed"] == "0"
        await memory.engine.settle()
    assert 22 not in await memory.run(recapped)


async def test_nothing_standing_in_holds_the_stepped_start(memory_proxy: MemoryFactory) -> None:
    """With no message recaps, the step leaves out none of the character's messages: only
    the user's (which get no recap by default) before the first of them."""
    memory, whole = await folded(
        memory_proxy, **{"memory.message_recaps": "off", "memory.history_cut_step": 4}
    )
    chat = [m["mes"] for m in memory.story.messages]
    response = await memory.client.post("/v1/chat/completions", json=cut_at(whole, 23))
    assert response.headers["X-Recap-Trimmed"] == "1"
    assert sent_history(memory)[0] == chat[24]


@pytest.mark.parametrize(
    "setting", [{"memory.history_cut_step": 1}, {"memory.auto_hide_scene_count": -1}]
)
async def test_a_step_of_one_or_trimming_off_starts_where_st_cuts(
    memory_proxy: MemoryFactory, setting: dict[str, int]
) -> None:
    memory, whole = await folded(memory_proxy, **setting)
    response = await memory.client.post("/v1/chat/completions", json=cut_at(whole, 22))
    assert response.headers["X-Recap-Trimmed"] == "0"
    assert sent_history(memory)[0] == memory.story.messages[22]["mes"]


# -- the parts of message recap planning -----------------------------------------------------


def test_message_recaps_start_past_the_covered_in_the_open_scene_and_the_lookback() -> None:
    planner = WorkPlanner(MemorySettings(message_recap_lookback=50), TokenCounter())
    assert planner.recap_start(covered=9, last_break=20, total=40, backfill=False) == 21
    assert planner.recap_start(covered=30, last_break=20, total=40, backfill=False) == 31
    assert planner.recap_start(covered=-1, last_break=-1, total=500, backfill=False) == 450
    assert planner.recap_start(covered=-1, last_break=-1, total=500, backfill=True) == 0
    folding_off = WorkPlanner(MemorySettings(running_recap=False), TokenCounter())
    assert folding_off.recap_start(covered=-1, last_break=20, total=40, backfill=False) == 0


def test_batches_are_full_unless_a_backfill_or_due_fills_the_last() -> None:
    pending = [(uid, 0, "h", uid) for uid in range(7)]
    extra = [(uid, 0, "h", uid) for uid in range(7, 12)]
    assert [len(b) for b in batched(pending, extra, 3, backfill=False, due=False)] == [3, 3]
    assert [len(b) for b in batched(pending, extra, 3, backfill=True, due=False)] == [3, 3, 1]
    due = batched(pending, extra, 3, backfill=False, due=True)
    assert [[p[0] for p in b] for b in due] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert batched([], extra, 3, backfill=False, due=True) == []
