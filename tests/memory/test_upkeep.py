"""Planning one chat on the store's thread (`Upkeep.plan`), called directly with the queue
paused, so that what a plan queues stays in the store to be read."""

from __future__ import annotations

from collections.abc import Callable

from proxy.core.operations import Operation
from proxy.memory.upkeep import Planned
from proxy.store import Database
from proxy.store.jobs import Payload
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory


async def paused(memory_proxy: MemoryFactory, **dotted: object) -> Memory:
    memory = await memory_proxy(16, ends={8}, **dotted)
    await memory.run(lambda db: db.jobs.set_paused(True))
    return memory


def queued(db: Database) -> list[tuple[str, Payload]]:
    return [(job.operation, job.payload) for job in db.jobs.list(CHAT_ID, ["queued"])]


async def test_a_chat_is_planned_only_once_it_is_looked_after(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await paused(memory_proxy)
    upkeep = memory.engine.upkeep

    # No request named the chat yet: nothing is spent on it, and it has no view.
    assert await memory.run(lambda db: upkeep.plan(db, CHAT_ID)) == Planned(0)
    assert CHAT_ID not in upkeep.views and await memory.run(queued) == []

    await memory.run(lambda db: db.memory.activate(CHAT_ID))
    planned = await memory.run(lambda db: upkeep.plan(db, CHAT_ID))
    assert planned.queued >= 1 and planned.failed_at is None
    jobs = await memory.run(queued)
    assert jobs[0][0] == Operation.DETECT_SCENE_BREAK
    assert planned.queued == len(jobs)
    assert upkeep.views[CHAT_ID] is memory.engine.views[CHAT_ID]
    # Planned again with nothing changed: the same jobs stand, none is queued twice.
    assert await memory.run(lambda db: upkeep.plan(db, CHAT_ID)) == Planned(0)
    assert await memory.run(queued) == jobs


async def test_a_chat_with_its_memory_off_keeps_a_view_and_gets_no_jobs(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await paused(memory_proxy)
    upkeep = memory.engine.upkeep

    def off(db: Database) -> Planned:
        db.memory.activate(CHAT_ID)
        db.set_enabled(CHAT_ID, False)
        return upkeep.plan(db, CHAT_ID)

    assert await memory.run(off) == Planned(0)
    assert await memory.run(queued) == []
    assert CHAT_ID in upkeep.views  # the page and the chat path still read it
    assert await memory.run(lambda db: upkeep.messages_until_check(db, CHAT_ID)) is None


async def test_a_changed_scene_is_recapped_again_unless_you_wrote_its_recap(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await paused(memory_proxy, **{"memory.auto_scene_break": False})
    upkeep = memory.engine.upkeep

    def scene_with_recap(source: str) -> Callable[[Database], int]:
        def work(db: Database) -> int:
            db.memory.activate(CHAT_ID)
            uid = db.memory.uid_at(CHAT_ID, 8)
            assert uid is not None
            db.memory.set_break(CHAT_ID, uid, "manual", 0.0)
            # Made from other messages than the scene's own (its hash does not match).
            db.memory.add_scene_recap(
                CHAT_ID, uid, "Ava and Tom.", 0.0, scene_name=None, source=source,
                input_hash="made from other messages",
            )  # fmt: skip
            db.jobs.clear(CHAT_ID)
            return uid

        return work

    def recaps_queued(db: Database) -> list[object]:
        return [p["break"] for op, p in queued(db) if op == Operation.SCENE_RECAP]

    uid = await memory.run(scene_with_recap("llm"))
    # Planning after a change from the scene's start looks at whether it changed.
    await memory.run(lambda db: upkeep.plan(db, CHAT_ID, since=0))
    assert await memory.run(recaps_queued) == [uid]
    # Planning that no change reached leaves the scene's recap alone.
    await memory.run(lambda db: db.jobs.clear(CHAT_ID))
    await memory.run(lambda db: upkeep.plan(db, CHAT_ID, since=12))
    assert await memory.run(recaps_queued) == []

    await memory.run(lambda db: db.memory.add_scene_recap(
        CHAT_ID, uid, "My own words.", 0.0, scene_name=None, source="user",
        input_hash="made from other messages",
    ))  # fmt: skip
    await memory.run(lambda db: upkeep.plan(db, CHAT_ID, since=0))
    assert await memory.run(recaps_queued) == []  # yours, to regenerate when you choose


async def test_reconfigured_settings_reach_the_next_plan(memory_proxy: MemoryFactory) -> None:
    memory = await paused(memory_proxy)
    upkeep = memory.engine.upkeep
    await memory.run(lambda db: db.memory.activate(CHAT_ID))
    settings = upkeep.settings.model_copy(update={"auto_scene_break": False})
    upkeep.reconfigure(settings, upkeep.policy, upkeep.view_inputs.frame)
    await memory.run(lambda db: upkeep.plan(db, CHAT_ID))
    operations = {op for op, _ in await memory.run(queued)}
    assert Operation.DETECT_SCENE_BREAK not in operations
    assert upkeep.view_inputs.settings is settings and upkeep.work.settings is settings


async def test_a_scene_without_a_recap_gets_its_job_and_a_recapped_one_only_once_changed(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await paused(memory_proxy, **{"memory.auto_scene_break": False})
    upkeep = memory.engine.upkeep

    def wanted(since: int | None) -> Callable[[Database], list[object]]:
        def work(db: Database) -> list[object]:
            breaks = [b for b in db.memory.breaks(CHAT_ID) if b.visible]
            jobs = upkeep.scene_recap_jobs(db, CHAT_ID, breaks, since)
            return [(op, payload["break"]) for op, _, payload in jobs]

        return work

    def scene(db: Database) -> int:
        db.memory.activate(CHAT_ID)
        uid = db.memory.uid_at(CHAT_ID, 8)
        assert uid is not None
        db.memory.set_break(CHAT_ID, uid, "manual", 0.0)
        return uid

    uid = await memory.run(scene)
    assert await memory.run(wanted(None)) == [(Operation.SCENE_RECAP, uid)]
    await memory.run(lambda db: db.memory.add_scene_recap(
        CHAT_ID, uid, "Ava and Tom.", 0.0, scene_name=None, source="llm",
        input_hash="made from other messages",
    ))  # fmt: skip
    assert await memory.run(wanted(None)) == []  # no change since: not looked at
    assert await memory.run(wanted(9)) == []  # a change after the scene
    assert await memory.run(wanted(3)) == [(Operation.SCENE_RECAP, uid)]  # its input differs
