"""`recap-proxy backfill` against a memory proxy: its progress line, what holds it up,
a job queued before it, a chat whose memory is off."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest

from proxy.cli import backfill as cli_backfill
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory, cli


async def test_backfill_builds_a_whole_chat_with_progress(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(
        60, ends={12, 30, 45}, **{"memory.llm.model": "fake-model", "memory.scene_break_window": 10}
    )
    assert await cli(memory, "backfill", "Ava - 2026-11-22@10h00m00s") == 0
    err = capsys.readouterr().err
    assert "job(s) queued" in err and "[##############################]" in err
    assert "46/60 messages covered, 3 scene(s) (3 folded in)" in err
    # The bar's missing part: the open scene, and when its next check comes (a check of
    # #49-#57 found nothing; #58 and #59 are two new ones, three are needed).
    assert "not covered: messages #46-59, the open scene" in err
    assert "next scene-break check after 1 more message(s)" in err
    assert await cli(memory, "memory", "Ava") == 0
    out = capsys.readouterr().out
    assert "scene    #0-12" in out and "scene    #13-30" in out and "scene    #31-45" in out
    assert "running recap v3 (3 scene(s), llm)" in out
    assert CHAT_ID in out


async def backfill_until(
    memory: Memory, capsys: pytest.CaptureFixture[str], says: str, *argv: str
) -> str:
    """What a backfill that waits printed once its progress line says `says` (it is
    stopped then, as a user would stop it with Ctrl-C)."""
    task = asyncio.create_task(cli(memory, "backfill", CHAT_ID, *argv))
    err = ""
    for _ in range(200):
        await asyncio.sleep(0.05)
        err += capsys.readouterr().err
        if says in err.rsplit("\r", 1)[-1] or task.done():
            break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return err + capsys.readouterr().err


async def test_backfill_says_what_holds_its_work_up(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_backfill, "POLL_SECONDS", 0.05)
    # No request of the chat yet and no [memory.llm] model: the jobs wait for a model. The
    # bar used to count the seconds at 0/60, with nothing else, for as long as one let it.
    memory = await memory_proxy(60, ends={12, 30, 45})
    line = "waiting for a model (chat once in this chat, or set [memory.llm] model)"
    err = await backfill_until(memory, capsys, line)
    assert "the jobs wait for a model" in err
    bar, stopped = err.rsplit("\r", 1)[-1].split("\n", 1)
    assert bar.startswith("[..............................] 0/60 messages")
    assert bar.rstrip().endswith(line)
    # Stopped (Ctrl-C), it ends its line and says the work goes on without it.
    assert stopped.startswith("stopped watching; the jobs go on in the server")
    assert f"(`recap-proxy memory '{CHAT_ID}'`)" in stopped
    # `memory` says why the queue does not move.
    assert await cli(memory, "memory", CHAT_ID) == 0
    out = capsys.readouterr().out
    assert "queue:   1 queued, 0 running, 0 failed\nwaiting: detect_scene_break (job 1), " in out
    assert "until the chat's next request brings a model: NoCredentials: no model" in out


@pytest.fixture
async def failing_once(memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch) -> Memory:
    """A 60-message chat of three scenes whose first scene-break check the API answers
    with a 503 (retried after a second), polled quickly by `backfill`."""
    monkeypatch.setattr(cli_backfill, "POLL_SECONDS", 0.05)
    memory = await memory_proxy(
        60,
        ends={12, 30, 45},
        **{"memory.llm.model": "fake-model", "queue.backoff_seconds": 1.0},
    )
    memory.fake.state.faults = {"detect_scene_break": ["status=503"]}
    return memory


async def test_backfill_says_when_the_api_fails_and_clears_the_note_after(
    failing_once: Memory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = failing_once
    assert await cli(memory, "backfill", CHAT_ID) == 0
    err = capsys.readouterr().err
    lines = err.split("\r")
    held = [i for i, line in enumerate(lines) if "; retrying: the API answered 503" in line]
    assert held, err
    # Once the retry got through, the note goes, and spaces cover what it left.
    after = lines[held[-1] + 1]
    assert "retrying" not in after and len(after) == len(lines[held[-1]])
    last = lines[-1].splitlines()[0]
    assert "retrying" not in last and "46/60 messages covered" in last


async def test_backfill_waits_for_the_chats_jobs_queued_before_it(
    failing_once: Memory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = failing_once
    # The chat's request starts its upkeep; its first call fails and waits for its retry.
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    for _ in range(200):
        if "detect_scene_break" in memory.fake.state.operations:
            break
        await asyncio.sleep(0.02)
    for _ in range(100):  # its failure kept on it
        assert await cli(memory, "memory", CHAT_ID) == 0
        out = capsys.readouterr().out
        if "waiting:" in out:
            break
    assert "waiting: detect_scene_break (job 1), retried at " in out
    assert ": JobFailure: detect_scene_break: the API answered 503" in out
    # That job is not this backfill's, yet the chat's work is not done before it is: the
    # command used to end at once, its bar full at 0/60.
    assert await cli(memory, "backfill", CHAT_ID) == 0
    err = capsys.readouterr().err
    assert ": 0 job(s) queued" in err
    assert "; retrying: the API answered 503" in err
    assert "[##############################] 46/60 messages covered, 3 scene(s)" in err


async def test_backfill_of_a_chat_whose_memory_is_off_says_so(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(40, ends={12})
    assert await cli(memory, "memory", CHAT_ID, "--off") == 0
    capsys.readouterr()
    # It used to say "0 job(s) queued", that the jobs waited for a model, and end with a
    # full bar at 0/40.
    assert await cli(memory, "backfill", CHAT_ID) == 1
    err = capsys.readouterr().err
    assert "memory is off for this chat, so it has no upkeep to do: `recap-proxy memory" in err
    assert "wait for a model" not in err and "[####" not in err
    answer = await memory.client.post(
        f"/recap/api/chats/{quote(CHAT_ID, safe='')}/backfill", json={}
    )
    assert await answer.json() == {
        "chat": CHAT_ID, "queued": 0, "waiting_for_model": False, "memory_on": False
    }  # fmt: skip
    assert await cli(memory, "memory", CHAT_ID, "--default") == 0
    answer = await memory.client.post(
        f"/recap/api/chats/{quote(CHAT_ID, safe='')}/backfill", json={}
    )
    found = await answer.json()
    assert found["memory_on"] is True and found["waiting_for_model"] is True  # no model yet
