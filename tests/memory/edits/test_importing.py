"""Taking over what ST-Auto-Recap, qvink's MessageSummarize and ST's Summarize stored in a
chat: on the chat's first request, with no LLM call for what was imported, and what
they write later; the proxy's own work wins."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest

from proxy.store import Database
from tests.memory.extension_chats import (
    AR_BREAKS,
    AR_CHECKED_THROUGH,
    QVINK_EXCLUDED,
    SUMMARIES,
    auto_recap_chat,
    four_stage_recap,
    qvink_chat,
    qvink_memory,
    running_content,
    scene_recap,
    summarize_chat,
)
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory, cli

API = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"
QUIET = {"memory.message_recaps": False, "memory.auto_scene_break": False}


def operations(memory: Memory) -> list[str]:
    """The proxy's own calls to the model, by operation."""
    return [
        seen.headers["X-Recap-Proxy-Operation"]
        for seen in memory.fake.state.seen
        if "X-Recap-Proxy-Operation" in seen.headers
    ]


def positions(db: Database, uids: list[int | None]) -> list[int | None]:
    return [db.memory.position_of(uid) for uid in uids]


def sent_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] != "system"]


async def test_an_auto_recap_chat_is_taken_over_on_its_first_request(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(0, set(), build=auto_recap_chat, **QUIET)
    story = memory.story
    await memory.client.post("/v1/chat/completions", json=story.request())
    await memory.engine.settle()
    first = memory.forwarded()[0]
    # The first request already carries the imported running recap, made by no call.
    assert running_content(179) in first["messages"][0]["content"]
    assert operations(memory) == []

    def imported(db: Database) -> dict[str, Any]:
        breaks = db.memory.breaks(CHAT_ID)
        state = db.memory.state(CHAT_ID)
        return {
            "breaks": [(b.position, b.source, b.visible, b.name) for b in breaks],
            "recaps": [db.memory.scene_recaps(b.uid) for b in breaks],
            "current": [b.current for b in breaks],
            "running": db.memory.running_recaps(CHAT_ID),
            "selected": db.memory.current_running(CHAT_ID),
            "checked": db.memory.position_of(state.checked_uid if state else None),
        }

    found = await memory.run(imported)
    assert [b[:3] for b in found["breaks"]] == [(p, "imported", True) for p in AR_BREAKS]
    assert found["breaks"][0][3] == "Lantern 29 0-29"
    assert found["recaps"][0][0].recap == four_stage_recap(29)
    assert found["recaps"][3][0].recap == scene_recap(119)
    # Two versions at 59, the first selected, as in the extension.
    assert [r.source for r in found["recaps"][1]] == ["imported", "imported"]
    assert found["current"][1] == 1
    assert [r.source for r in found["running"]] == ["imported"] * 3
    assert found["running"][0].created == 1763800000.0
    run_at = await memory.run(lambda db: positions(db, [r.new_scene_uid for r in found["running"]]))
    assert run_at == [59, 119, 179]
    assert found["selected"].content == running_content(179)
    # The extension's detection looked through 185, past the last break: detection
    # goes on from there.
    assert found["checked"] == AR_CHECKED_THROUGH


async def test_imported_memory_leaves_out_what_it_covers(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        0, set(), build=auto_recap_chat, **QUIET, **{"memory.auto_hide_scene_count": 0}
    )
    story = memory.story
    await memory.client.post("/v1/chat/completions", json=story.request())
    await memory.engine.settle()
    sent = sent_texts(memory.forwarded()[0])
    # ST sent 150-199 (auto-hide hid the rest); the running recap covers through 179.
    assert sent == [m["mes"] for m in story.messages[180:]]
    assert operations(memory) == []


async def test_detection_goes_on_after_the_imported_breaks_and_checks(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(0, set(), build=auto_recap_chat, **{"memory.message_recaps": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    assert set(operations(memory)) <= {"detect_scene_break"}
    windows = [
        json.loads(seen.body)
        for seen in memory.fake.state.seen
        if seen.headers.get("X-Recap-Proxy-Operation") == "detect_scene_break"
    ]
    assert windows, "the open scene after the imported breaks is checked"
    shown = " ".join(m["content"] for m in windows[0]["messages"])
    assert "lantern number 180" in shown and "lantern number 170 " not in shown


async def test_what_the_extension_writes_later_is_picked_up(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(0, set(), build=auto_recap_chat, **QUIET)
    story = memory.story
    await memory.client.post("/v1/chat/completions", json=story.request())
    await memory.until(lambda db: len(db.memory.running_recaps(CHAT_ID)) == 3)
    # The extension, still on, closes a scene at 193 and folds it in: only extension
    # data and metadata change, no message text.
    story.messages[193]["extra"]["auto_recap_memory"] = {
        "scene_break": True,
        "scene_recap_versions": ["The cave, at last."],
        "scene_recap_current_index": 0,
    }
    running = story.metadata["auto_recap_running_scene_recaps"]
    running["versions"].append(
        {"version": 3, "content": running_content(193), "scene_count": 7,
         "prev_scene_index": 179, "new_scene_index": 193}
    )  # fmt: skip
    running["current_version"] = 3
    story.save()
    await memory.until(lambda db: len(db.memory.running_recaps(CHAT_ID)) == 4)
    selected = await memory.run(lambda db: db.memory.current_running(CHAT_ID))
    assert selected is not None and selected.content == running_content(193)
    assert selected.source == "imported"
    breaks = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert [b.position for b in breaks][-1] == 193
    await memory.client.post("/v1/chat/completions", json=story.request())
    assert running_content(193) in memory.forwarded()[-1]["messages"][0]["content"]
    # Removing the break in ST removes the imported break (and what was built on it).
    del story.messages[193]["extra"]["auto_recap_memory"]
    story.save()
    await memory.until(lambda db: [b.position for b in db.memory.breaks(CHAT_ID)][-1] == 179)
    selected = await memory.run(lambda db: db.memory.current_running(CHAT_ID))
    assert selected is not None and selected.content == running_content(179)
    assert operations(memory) == []


async def test_the_proxys_own_work_wins(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(0, set(), build=auto_recap_chat, **QUIET)
    story = memory.story
    await memory.client.post("/v1/chat/completions", json=story.request())
    await memory.until(lambda db: len(db.memory.running_recaps(CHAT_ID)) == 3)
    edited = await memory.client.post(
        f"{API}/scenes/119/recaps", json={"recap": "Tom's own account of the watchtower."}
    )
    assert edited.status == 200, await edited.text()
    # Editing scene 119 re-folds the running recap from there (the proxy's own work).
    await memory.until(
        lambda db: (r := db.memory.current_running(CHAT_ID)) is not None and r.source == "llm",
        timeout=20,
    )
    # The extension then writes another version of that scene and a new running version.
    data = story.messages[119]["extra"]["auto_recap_memory"]
    data["scene_recap_versions"].append("The extension's second try.")
    data["scene_recap_current_index"] = 1
    story.metadata["auto_recap_running_scene_recaps"]["versions"][2]["content"] = "Rewritten."
    story.save()
    await memory.until(
        lambda db: any(r.content == "Rewritten." for r in db.memory.running_recaps(CHAT_ID))
    )

    def state(db: Database) -> tuple[Any, ...]:
        scene = next(b for b in db.memory.breaks(CHAT_ID) if b.position == 119)
        recaps = db.memory.scene_recaps(scene.uid)
        selected = db.memory.current_running(CHAT_ID)
        return scene.current, recaps, selected

    current, recaps, selected = await memory.run(state)
    assert [r.source for r in recaps] == ["imported", "edit", "imported"]
    assert current == 2  # the user's edit stays selected over the extension's new try
    assert selected is not None and selected.source == "llm"
    listed = await (await memory.client.get(f"{API}/running")).json()
    assert {v["source"] for v in listed} == {"imported", "llm"}


async def test_a_qvink_chat_brings_its_message_memories(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        0, set(), build=qvink_chat,
        **{"memory.running_recap": False, "memory.auto_scene_break": False},
    )  # fmt: skip
    started = await memory.client.post(f"{API}/backfill", json={})
    assert started.status in (200, 202), await started.text()
    await memory.engine.settle()

    def state(db: Database) -> tuple[Any, ...]:
        uids = {db.memory.position_of(uid): uid for uid, _ in db.memory.message_recaps(CHAT_ID)}
        recaps = db.memory.message_recaps(CHAT_ID)
        excluded = {db.memory.position_of(uid) for uid in db.memory.excluded(CHAT_ID)}
        return uids, recaps, excluded

    uids, recaps, excluded = await memory.run(state)
    assert excluded == set(QVINK_EXCLUDED)
    assert recaps[uids[3], 0].recap == qvink_memory(3) and recaps[uids[3], 0].source == "imported"
    assert recaps[uids[10], 0].edited
    assert recaps[uids[28], 1].recap == "Swipe one."
    # Every message had a memory or was excluded: backfilling made no call.
    assert operations(memory) == []
    listed = await (await memory.client.get(f"{API}/recaps")).json()
    assert {item["source"] for item in listed if item["recap"]} == {"imported"}


async def test_a_summarize_chat_brings_its_newest_summary(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        0, set(), build=summarize_chat, **QUIET, **{"memory.auto_hide_scene_count": 0}
    )
    story = memory.story
    await memory.client.post("/v1/chat/completions", json=story.request())
    await memory.engine.settle()
    first = memory.forwarded()[0]
    assert SUMMARIES[39] in first["messages"][0]["content"]
    assert sent_texts(first) == [m["mes"] for m in story.messages[40:]]
    breaks = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert [(b.position, b.source, b.name) for b in breaks] == [(39, "imported", "Summary")]
    assert operations(memory) == []


async def test_the_cli_shows_what_was_imported(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(0, set(), build=auto_recap_chat, **QUIET)
    assert await cli(memory, "backfill", "Ava") == 0
    capsys.readouterr()
    assert await cli(memory, "memory", "Ava") == 0
    out = capsys.readouterr().out
    assert "scene    #0-29 Lantern 29 0-29 (imported)" in out
    assert "running recap v3 (6 scene(s), imported):" in out
    assert running_content(179) in out
    assert operations(memory) == []


async def test_a_failing_import_leaves_the_chats_own_memory_going(
    memory_proxy: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: object) -> None:
        raise ValueError("unexpected extension data")

    monkeypatch.setattr("proxy.memory.upkeep.import_chat", broken)
    memory = await memory_proxy(16, {8}, **{"memory.message_recaps": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: len(db.memory.running_recaps(CHAT_ID)) == 1)
    failures = [r for r in caplog.records if "importing the memory extension data" in r.message]
    assert len(failures) == 1 and "unexpected extension data" in (failures[0].exc_text or "")
