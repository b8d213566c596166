"""Scene-break detection as a job runs it: answers checked, re-asked a bounded number of
times, and never over a break the user set meanwhile."""

from __future__ import annotations

from urllib.parse import quote

from tests.memory.story import CHAT_ID
from tests.memory_env import MemoryFactory, hold, start


async def test_invalid_detection_answers_are_re_asked_a_bounded_number_of_times(
    memory_proxy: MemoryFactory,
) -> None:
    """Three unusable answers in one job (the first and two re-asks) fail it: never read
    as "no break", which marked the window checked and lost its scene for good. The job
    is run again, and its answer then places the break."""
    memory = await memory_proxy(
        16,
        ends={8},
        **{
            "memory.scene_break_retries": 2,
            "memory.message_recaps": False,
            "queue.backoff_seconds": 0.01,  # the job's second run comes at once
            "queue.backoff_cap_seconds": 0.01,
        },
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
