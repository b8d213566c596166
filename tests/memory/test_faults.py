"""Faults never lose or duplicate memory: garbage, 429, 401, timeouts, content changed
while a job is in flight, a restart mid-queue, two chats at once."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

from proxy.web.keys import RUNTIME
from tests.memory.story import CHAT_ID, Story
from tests.memory_env import MemoryFactory, hold, start
from tests.waiting import until

QUICK_RETRY = {"queue.backoff_seconds": 0.05, "queue.backoff_cap_seconds": 0.1}


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
    library = memory.app[RUNTIME].memory_parts().library
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
