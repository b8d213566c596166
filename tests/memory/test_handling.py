"""What a job does with what it finds: a cut-off answer (`finish_reason: length`) is never
read as complete (it is asked for again with the limit doubled, up to `[memory.llm]
max_tokens_cap`), and input other than the job was planned for is not read at all."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from proxy.memory.handling import gone
from proxy.memory.operations import Operation
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory

NO_RECAPS = {"memory.message_recaps": False}


def limits(memory: Memory, operation: str) -> list[int]:
    """The `max_tokens` of each call of one operation, in order."""
    return [
        json.loads(seen.body)["max_tokens"]
        for seen in memory.fake.state.seen
        if seen.headers.get("X-Recap-Proxy-Operation") == operation
    ]


async def test_a_cut_off_answer_is_asked_again_larger(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS, **{"memory.llm.max_tokens": 40})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    # The scene recap (about 250 words) does not fit 40 tokens: doubled until it does.
    asked = limits(memory, "scene_recap")
    assert asked[:3] == [40, 80, 160] and asked[-1] <= 4096
    assert all(b == 2 * a for a, b in itertools.pairwise(asked))
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    [recap] = await memory.run(lambda db: db.memory.scene_recaps(scene.uid))
    assert recap.recap.startswith("9 messages") and recap.recap.endswith(".")
    # Detection's short answer fits at once; the running recap starts with room for a
    # whole recap at its budget (1.5 x 1200 + 64), whatever `max_tokens` says.
    assert set(limits(memory, "detect_scene_break")) == {40}
    assert limits(memory, "running_recap")[0] == 1864
    jobs = await memory.run(lambda db: db.jobs.list(CHAT_ID))
    assert {j.state for j in jobs} == {"done"} and all(j.attempts == 1 for j in jobs)


async def test_still_cut_off_at_the_cap_fails_and_says_so(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        16,
        ends={8},
        **NO_RECAPS,
        **{
            "memory.llm.max_tokens": 40,
            "memory.llm.max_tokens_cap": 100,
            "memory.running_recap_max_tokens": 100,
            "queue.max_attempts": 1,
        },
    )
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert limits(memory, "scene_recap") == [40, 80, 100]
    [failed] = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert failed.operation == "scene_recap"
    assert failed.error == "CutOff: scene_recap: the answer was cut off at 100 tokens"
    listed = await memory.client.get("/recap/api/queue")
    assert any(j["error"] == failed.error for j in (await listed.json())["jobs"])


@pytest.mark.parametrize(
    "operation", [Operation.DETECT_SCENE_BREAK, Operation.SCENE_RECAP, Operation.RUNNING_RECAP]
)
async def test_a_job_that_finds_other_input_than_it_was_made_for_keeps_nothing(
    memory_proxy: MemoryFactory, operation: Operation
) -> None:
    """A detection, a scene recap or a fold runs on the chat's memory as it is then. When
    that is not its input (the window's messages, the scene, or the recap it folds,
    changed while it waited, and may be as they were again once it ends), nothing it
    would write is kept: it runs again."""
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    jobs = await memory.run(lambda db: db.jobs.list(CHAT_ID))
    job = [j for j in jobs if j.operation == operation][-1]
    handler = memory.engine.handlers[operation]
    calls = len(limits(memory, operation))
    assert await handler.run(replace(job, input_hash="another input")) is gone
    assert len(limits(memory, operation)) == calls  # nothing asked of the model
    assert await handler.run(job) is not gone
