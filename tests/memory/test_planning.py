"""Planning reads only the stretch of a chat it needs: the scene-break check of a long
open scene (a backfill of thousands of messages) is the one reading the whole scene gives."""

from __future__ import annotations

import json
from typing import Any

import pytest

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
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory
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


# -- message recaps: only what ST no longer sends ------------------------------------------


def recapped(db: Database) -> set[int]:
    """The positions of the chat's messages that have a message recap."""
    found = db.memory.messages_by_uid([uid for uid, _ in db.memory.message_recaps(CHAT_ID)])
    return {m.position for m in found.values()}


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
    memory, whole = await folded(memory_proxy, **{"memory.message_recap_ahead": 4})
    assert await memory.run(lambda db: db.memory.message_recaps(CHAT_ID)) == {}  # all sent
    # ST's context is full: it sends the chat from message 20 on.
    cut = cut_at(whole, 20)
    await memory.client.post("/v1/chat/completions", json=cut)

    await memory.until(lambda db: recapped(db))
    # The open scene (9 on: the running recap covers 0-8) up to the cut and 4 ahead, the
    # character's messages (the user's are not recapped by default), in batches of three:
    # 22, ahead of the cut, waits for a full batch; those already cut never wait.
    assert await memory.run(recapped) == {10, 12, 14, 16, 18, 20}
    await memory.client.post("/v1/chat/completions", json=cut)
    sent = json.loads(memory.fake.state.seen[-1].body)
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
    sent = json.loads(memory.fake.state.seen[-1].body)["messages"]
    return [m["content"] for m in sent if m["role"] != "system"]


async def test_st_cutting_the_chat_moves_the_history_start_in_steps(
    memory_proxy: MemoryFactory,
) -> None:
    memory, whole = await folded(
        memory_proxy, **{"memory.message_recap_ahead": 4, "memory.history_cut_step": 4}
    )
    chat = [m["mes"] for m in memory.story.messages]

    # Trimming leaves out 0-8 (the first scene, in the running recap): the start steps by
    # four from 9 on. ST cuts at 22: the history starts at 25 (22-24 left out with it),
    # and the recap of 22 (the character's) is written at once: a message already left
    # out never waits.
    response = await memory.client.post("/v1/chat/completions", json=cut_at(whole, 22))
    assert response.headers["X-Recap-Trimmed"] == "3"
    assert sent_history(memory)[0] == chat[25]
    await memory.until(lambda db: 22 in recapped(db))
    # A batch that goes anyway is filled up past the ones due (batches of three).
    assert await memory.run(recapped) == {10, 12, 14, 16, 18, 20, 22, 24, 26}

    # The next exchanges: ST cuts at 23, then 25, the history still starts at 25, and the
    # memory before the changing part stays as it was: a provider's cache holds.
    await memory.client.post("/v1/chat/completions", json=cut_at(whole, 23))
    before = json.loads(memory.fake.state.seen[-1].body)["messages"]
    assert "#22" in before[-3]["content"]  # its recap stands in for it
    await memory.client.post("/v1/chat/completions", json=cut_at(whole, 25))
    after = json.loads(memory.fake.state.seen[-1].body)["messages"]
    assert after[:-3] == before[:-3] and sent_history(memory)[0] == chat[25]
    # ST passes 25: the start steps on to 29.
    await memory.client.post("/v1/chat/completions", json=cut_at(whole, 26))
    assert sent_history(memory)[0] == chat[29]


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
