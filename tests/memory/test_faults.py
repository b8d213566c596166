"""Faults never lose or duplicate memory: garbage, 429, 401, timeouts, content changed
while a job is in flight, a restart mid-queue, two chats at once."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any
from urllib.parse import quote

from proxy.web.keys import LIBRARY
from tests.memory.story import CHAT_ID, Story
from tests.memory_env import Memory, MemoryFactory
from tests.waiting import until

QUICK_RETRY = {"queue.backoff_seconds": 0.05, "queue.backoff_cap_seconds": 0.1}


async def start(memory: Memory) -> None:
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.status == 200


async def test_garbage_and_429_are_retried(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **QUICK_RETRY)
    memory.fake.state.faults = {
        "detect_scene_break": ["status=429"],
        "scene_recap": ["garbage"],
        "running_recap": ["status=500"],
    }
    await start(memory)
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    ops = memory.fake.state.operations
    assert ops.count("scene_recap") == 2 and ops.count("running_recap") == 2
    assert ops.count("detect_scene_break") >= 2
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert len(await memory.run(lambda db: db.memory.scene_recaps(scene.uid))) == 1
    assert len(await memory.run(lambda db: db.memory.running_recaps(CHAT_ID))) == 1


async def test_invalid_detection_answers_are_re_asked_a_bounded_number_of_times(
    memory_proxy: MemoryFactory,
) -> None:
    """Three unusable answers in one job (the first and two re-asks) fail it: never read
    as "no break", which marked the window checked and lost its scene for good. The job
    is run again, and its answer then places the break."""
    memory = await memory_proxy(
        16, ends={8}, **{"memory.scene_break_retries": 2, "memory.message_recaps": False}
    )
    memory.fake.state.faults = {"detect_scene_break": ["garbage"] * 3}
    await start(memory)
    await memory.engine.settle()
    assert memory.fake.state.operations[:4] == ["detect_scene_break"] * 4
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert scene.position == 8
    jobs = await memory.run(lambda db: db.jobs.list(CHAT_ID))
    first = next(j for j in jobs if j.operation == "detect_scene_break")
    assert first.attempts == 2 and first.state == "done"


async def test_401_fails_at_once_and_can_be_retried(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    memory.fake.state.faults = {"detect_scene_break": ["status=401"]}
    await start(memory)
    await memory.engine.settle()
    [job] = await memory.engine.queue.jobs(states=("failed",))
    assert job.attempts == 1 and "401" in (job.error or "")
    assert memory.fake.state.operations == ["detect_scene_break"]
    retried = await memory.client.post(f"/recap/api/queue/jobs/{job.id}/retry", json={})
    assert retried.status == 200
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))


async def test_a_failure_made_again_after_its_cool_down_is_over_once_that_succeeds(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(
        16, ends={8}, **{"memory.message_recaps": False, "queue.failed_retry_minutes": 0.01}
    )
    memory.fake.state.faults = {"scene_recap": ["status=401"]}
    await start(memory)
    await memory.until(lambda db: db.jobs.list(CHAT_ID, ("failed",)), settle=False)
    # After the cool-down (0.6 s) planning makes the job again by itself; it succeeds.
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    assert memory.fake.state.operations.count("scene_recap") == 2
    # The failed job it was made again for is gone: the page, `memory`, /health and
    # doctor counted it as failed for good.
    assert await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",))) == []
    health = await (await memory.client.get("/health")).json()
    assert health["queue"]["failed"] == 0


async def test_a_timeout_is_retried(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **QUICK_RETRY, **{"memory.llm.timeout_seconds": 0.3})
    memory.fake.state.faults = {"scene_recap": ["slow"]}
    await start(memory)
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    assert memory.fake.state.operations.count("scene_recap") == 2
    # The call given up on was cancelled at the server: it stopped generating.
    await asyncio.wait_for(memory.fake.state.cancelled.wait(), 5)


async def hold(memory: Memory, operation: str) -> None:
    memory.fake.state.faults = {operation: ["hold"]}
    await start(memory)
    await asyncio.wait_for(memory.fake.state.held.wait(), 5)


async def test_message_edited_while_its_recap_is_in_flight(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        12,
        ends=set(),
        **{"memory.auto_scene_break": False, "memory.message_recap_batch_size": 6},
    )
    await hold(memory, "message_recap")
    memory.story.messages[4]["mes"] = "Ava lights a fire in the cave and tells Tom to sleep now."
    memory.story.save()
    await memory.until(lambda db: "fire" in db.messages(CHAT_ID)[4].message.mes, settle=False)
    memory.fake.state.release.set()
    await memory.until(
        lambda db: any("fire" in r.recap for r in db.memory.message_recaps(CHAT_ID).values())
    )
    recaps = await memory.run(lambda db: db.memory.message_recaps(CHAT_ID))
    by_position = await memory.run(
        lambda db: {db.memory.position_of(uid): r.recap for (uid, _), r in recaps.items()}
    )
    assert by_position[4].startswith("#4: Ava lights a fire")  # never the old text's recap
    assert memory.fake.state.operations.count("message_recap") == 2  # redone once


async def test_scene_end_deleted_while_its_recap_is_in_flight(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    await hold(memory, "scene_recap")
    del memory.story.messages[8]
    memory.story.save()
    await memory.until(lambda db: len(db.messages(CHAT_ID)) == 15, settle=False)
    memory.fake.state.release.set()
    await memory.engine.settle()
    # The break went with its message; the held recap was not applied anywhere.
    assert await memory.run(lambda db: db.memory.breaks(CHAT_ID)) == []
    assert await memory.run(lambda db: db.memory.running_recaps(CHAT_ID)) == []
    jobs = await memory.engine.queue.jobs()
    assert {j.operation: j.state for j in jobs}["scene_recap"] == "dropped"


async def test_restart_mid_queue_runs_the_job_once(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    await hold(memory, "scene_recap")
    await memory.client.close()  # the server stops while the call is in flight
    memory.fake.state.release.set()

    again = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    queued = await again.engine.queue.jobs(states=("queued",))
    assert "scene_recap" in {job.operation for job in queued}
    await start(again)  # the chat's next request brings its key and model back
    await again.until(lambda db: db.memory.running_recaps(CHAT_ID))
    [scene] = await again.run(lambda db: db.memory.breaks(CHAT_ID))
    assert len(await again.run(lambda db: db.memory.scene_recaps(scene.uid))) == 1
    assert len(await again.run(lambda db: db.memory.running_recaps(CHAT_ID))) == 1


async def test_two_chats_keep_their_own_memory(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    other = Story(memory.story.path.parents[3], ends={6}, char="Bea")
    other.grow(14)
    library = memory.app[LIBRARY]
    await until(lambda: other.chat_id in library.index.entries, "the second chat is indexed")
    await asyncio.gather(
        memory.client.post("/v1/chat/completions", json=memory.story.request()),
        memory.client.post("/v1/chat/completions", json=other.request()),
    )
    await memory.until(
        lambda db: db.memory.running_recaps(CHAT_ID) and db.memory.running_recaps(other.chat_id)
    )
    mine: Any = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    theirs: Any = await memory.run(lambda db: db.memory.breaks(other.chat_id))
    assert [b.position for b in mine] == [8] and [b.position for b in theirs] == [6]
    [a] = await memory.run(lambda db: db.memory.running_recaps(CHAT_ID))
    [b] = await memory.run(lambda db: db.memory.running_recaps(other.chat_id))
    assert "Bea" not in a.content and "Bea" in b.content


async def test_planning_that_meets_a_failing_store_is_made_again_once_it_takes_writes(
    memory_proxy: MemoryFactory, monkeypatch: Any
) -> None:
    # A full disk when a chat's upkeep is planned: no job could be written. Once the
    # store takes writes, the plan is made, with no further request or save to ask.
    memory = await memory_proxy(16, ends={8})  # the store tried again every 0.05 s
    await memory.run(lambda db: db.db.execute("PRAGMA query_only=1"))
    await start(memory)
    await until(lambda: memory.engine._retries.waits(CHAT_ID), "planning failed")
    await asyncio.sleep(0.2)  # tried again, still failing
    assert memory.fake.state.operations == []
    await memory.run(lambda db: db.db.execute("PRAGMA query_only=0"))
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))


async def test_a_plan_the_store_could_not_take_is_made_again(
    memory_proxy: MemoryFactory, monkeypatch: Any
) -> None:
    memory = await memory_proxy(16, ends={8})  # the store tried again every 0.05 s
    plan = memory.engine.upkeep.plan
    failures: list[int] = []

    def full_once(*args: Any, **kwargs: Any) -> Any:
        if not failures:
            failures.append(1)
            full = sqlite3.OperationalError("database or disk is full")
            full.sqlite_errorname = "SQLITE_FULL"
            raise full
        return plan(*args, **kwargs)

    monkeypatch.setattr(memory.engine.upkeep, "plan", full_once)
    await start(memory)
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    assert failures == [1]


async def test_a_break_you_set_while_detection_is_in_flight_wins(
    memory_proxy: MemoryFactory,
) -> None:
    """Detection reads the open scene; a break set meanwhile closes that scene, and the
    answer, about a scene that is no longer open, is not applied inside it (it would leave
    the scene's recap, just made, of messages it no longer has)."""
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    await hold(memory, "detect_scene_break")
    api = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"
    response = await memory.client.put(f"{api}/messages/12/scene_break", json={})
    assert response.status == 200
    memory.fake.state.release.set()
    await memory.engine.settle()

    breaks = await memory.run(
        lambda db: [(b.position, b.source) for b in db.memory.breaks(CHAT_ID)]
    )
    assert breaks[0] == (12, "manual")  # the model's break at 8 went unapplied for now
    scenes = await (await memory.client.get(f"{api}/scenes")).json()
    for scene in scenes:
        assert scene["recap"].startswith(f"{scene['index'] - scene['first'] + 1} messages")


async def test_a_model_that_fills_in_the_placeholders_never_becomes_memory(
    memory_proxy: MemoryFactory,
) -> None:
    """Forced into JSON, a small model answered `{"scene_name": "<short title>", "recap":
    "<recap>"}` and `{"recap": "<the whole new running recap>"}`: stored, the running
    recap "covered" the chat's past and trimming left it out for a placeholder. Now no
    such answer is kept, the chat keeps its whole history, and the queue says why."""
    memory = await memory_proxy(
        30, ends={8, 17}, **{"memory.message_recaps": False, "queue.max_attempts": 1}
    )
    memory.fake.state.faults = {"scene_recap": ["placeholders"] * 20}
    await start(memory)
    await memory.engine.settle()
    breaks = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert [b.position for b in breaks] == [8, 17]  # detection answered well
    uids = [b.uid for b in breaks]
    recaps = await memory.run(lambda db: [db.memory.scene_recaps(uid) for uid in uids])
    assert recaps == [[], []]
    assert await memory.run(lambda db: db.memory.running_recaps(CHAT_ID)) == []
    failed = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert failed and all("placeholders in as they stand" in (j.error or "") for j in failed)
    sent = memory.story.request()
    response = await memory.client.post("/v1/chat/completions", json=sent)
    assert response.headers.get("X-Recap-Trimmed", "0") == "0"
    went = memory.forwarded()[-1]["messages"]
    for message in sent["messages"]:
        assert message in went  # every message of the chat went upstream


async def test_a_model_that_copies_the_prompt_back_finds_no_scene_break(
    memory_proxy: MemoryFactory,
) -> None:
    """A base model copied the prompt back, and its example answer (`"sceneBreakAt":
    false`) was read as "no break", marking the window checked: its scene was never
    found. An echo is no answer; the window stays to check."""
    memory = await memory_proxy(
        16, ends={8}, **{"memory.message_recaps": False, "queue.max_attempts": 1}
    )
    memory.fake.state.faults = {"detect_scene_break": ["echo"] * 10}
    await start(memory)
    await memory.engine.settle()
    assert await memory.run(lambda db: db.memory.breaks(CHAT_ID)) == []
    state = await memory.run(lambda db: db.memory.state(CHAT_ID))
    assert state is None or state.checked_uid is None
    [failed] = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert "copies the prompt back" in (failed.error or "")
    assert "instruction-tuned" in (failed.error or "")
    # /health says why, for whoever looks there first.
    health = await (await memory.client.get("/health")).json()
    said = health["memory"]["last_failure"]
    assert said.startswith("detect_scene_break: ") and "copies the prompt back" in said


async def test_recaps_about_something_else_are_not_kept(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        16, ends={8}, **{"memory.message_recaps": "always", "queue.max_attempts": 1}
    )
    memory.fake.state.faults = {
        "scene_recap": ["unrelated"] * 5,
        "message_recap": ["unrelated"] * 20,
    }
    await start(memory)
    await memory.engine.settle()
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert await memory.run(lambda db: db.memory.scene_recaps(scene.uid)) == []
    failed = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    errors = {j.operation: j.error or "" for j in failed}
    assert "shares no word" in errors["scene_recap"]
    assert "no recap shares a word with its message" in errors["message_recap"]
