"""The running recap stays within its budget: a version over it is condensed before the
next scene is folded onto it, a cut-off fold condenses its base first, and a condensing
that keeps failing never stops the story being folded in."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from proxy.core.tokens import TokenCounter
from proxy.store import Database
from tests.memory.story import CHAT_ID, Story
from tests.memory_env import Memory, MemoryFactory

NO_RECAPS = {"memory.message_recaps": False}
QUICK = {"queue.backoff_seconds": 0.01, "queue.backoff_cap_seconds": 0.01}
RUNNING = {"running_recap", "condense_running_recap"}
API = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"


def versions(db: Database) -> list[tuple[int, str, int | None]]:
    return [(v.version, v.source, v.new_scene_uid) for v in db.memory.running_recaps(CHAT_ID)]


def folded_all(db: Database) -> bool:
    breaks = db.memory.breaks(CHAT_ID)
    newest = db.memory.running_recaps(CHAT_ID)
    return len(breaks) == 3 and bool(newest) and newest[-1].new_scene_uid == breaks[-1].uid


def running_ops(memory: Memory) -> list[str]:
    return [op for op in memory.fake.state.operations if op in RUNNING]


async def test_a_version_over_its_budget_is_condensed_before_the_next_fold(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(
        36, ends={8, 17, 26}, **NO_RECAPS, **{"memory.running_recap_max_tokens": 200}
    )
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(folded_all)
    await memory.until(lambda db: versions(db)[-1][1] == "condensed")
    # Every fold grows the recap past 200 tokens, and is condensed before the next one.
    assert running_ops(memory) == ["running_recap", "condense_running_recap"] * 3
    found = await memory.run(versions)
    assert [source for _, source, _ in found] == ["llm", "condensed"] * 3
    # A condensed version stands for the same scenes as the one it condenses.
    for (_, _, folded), (_, _, kept) in zip(found[::2], found[1::2], strict=True):
        assert folded == kept
    current = await memory.run(lambda db: db.memory.current_running(CHAT_ID))
    assert current is not None and current.source == "condensed"
    assert TokenCounter().count(current.content) <= 200
    # What was condensed away stays, and stays selectable.
    chosen = await memory.client.put(f"{API}/running/current", json={"version": 5})
    assert chosen.status == 200
    listed: list[dict[str, Any]] = await (await memory.client.get(f"{API}/running")).json()
    assert [v["source"] for v in listed if v["current"]] == ["llm"]


async def test_a_cut_off_fold_condenses_its_base_first(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        27, ends={8, 17}, **NO_RECAPS, **{"memory.running_recap_max_tokens": 250}
    )
    # The first fold makes a version within 250 tokens, but over half of it; the second
    # fold's answer runs past its limit.
    memory.fake.state.faults = {"running_recap": ["", "long"]}
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: len(db.memory.running_recaps(CHAT_ID)) >= 3)
    await memory.engine.settle()
    assert running_ops(memory)[:4] == [
        "running_recap",
        "running_recap",
        "condense_running_recap",
        "running_recap",
    ]
    found = await memory.run(versions)
    first, second = await memory.run(lambda db: [b.uid for b in db.memory.breaks(CHAT_ID)])
    assert found[:3] == [(1, "llm", first), (2, "condensed", first), (3, "llm", second)]
    state = await memory.run(lambda db: db.memory.state(CHAT_ID))
    assert state is not None and state.condense_version is None
    jobs = await memory.run(lambda db: db.jobs.list(CHAT_ID))
    assert "failed" not in {j.state for j in jobs}


async def test_failed_condensing_lets_folding_go_on_then_comes_back(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(
        36,
        ends={8, 17, 26},
        **NO_RECAPS,
        **QUICK,
        **{
            "memory.running_recap_max_tokens": 200,
            "queue.max_attempts": 2,
            "queue.failed_retry_minutes": 0.02,
        },
    )
    memory.fake.state.faults = {"condense_running_recap": ["garbage"] * 2}
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    # Condensing version 1 fails twice: the job is failed, and visible until a newer
    # version is condensed; the story is folded in all the same, onto the long versions.
    error = "JobFailure: condense_running_recap: no JSON object in the reply: 'Sure! {{{ not json'"
    await memory.until(folded_all)
    queue = await (await memory.client.get("/recap/api/queue")).json()
    failed = [j for j in queue["jobs"] if j["error"] and error in j["error"]]
    assert [j["operation"] for j in failed] == ["condense_running_recap"]
    superseded = f"a newer version was condensed (it had: {error})"
    assert (failed[0]["state"], failed[0]["error"]) in {("failed", error), ("dropped", superseded)}
    overview = await (await memory.client.get(f"{API}/memory")).json()
    assert overview["running_recap"] is not None
    # After the cool-down, planning asks again by itself: the newest version is condensed.
    await memory.until(lambda db: versions(db)[-1][1] == "condensed", timeout=10)
    assert "condense_running_recap" in running_ops(memory)[2:]
    # The failed condensing of the older version is over once a newer one is condensed:
    # dropped, no longer counted as failed (the page, `memory`, /health and doctor said
    # "1 failed" for good).
    overview = await (await memory.client.get(f"{API}/memory")).json()
    assert overview["queue"]["failed"] == 0 and overview["failures"] == []
    queue = await (await memory.client.get("/recap/api/queue")).json()
    [over] = [j for j in queue["jobs"] if j["id"] == failed[0]["id"]]
    assert over["state"] == "dropped"
    assert over["error"] == superseded


async def test_a_scene_with_nothing_to_recap_does_not_stop_the_running_recap(
    memory_proxy: MemoryFactory,
) -> None:
    """A scene whose messages recaps do not read (all hidden, with hidden messages left
    out) gets no recap; the scenes after it are folded in all the same."""

    def build(story: Story) -> None:
        story.grow(20)
        for message in story.messages[:9]:
            message["is_system"] = True
        story.save()

    memory = await memory_proxy(
        0,
        ends={16},
        build=build,
        **{"memory.include_hidden_messages": False, "memory.message_recaps": False},
    )
    api = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"
    response = await memory.client.put(f"{api}/messages/8/scene_break", json={})
    assert response.status == 200
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    [version] = await memory.run(lambda db: db.memory.running_recaps(CHAT_ID))
    assert await memory.run(lambda db: db.memory.position_of(version.new_scene_uid)) == 16
