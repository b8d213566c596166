"""The memory commands against a running server (in-process, on loopback)."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest

from proxy import cli_memory
from proxy.cli import build_parser
from proxy.cli_memory import pick_chat, run_memory_command
from proxy.errors import RecapProxyError
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory


async def cli(memory: Memory, *argv: str) -> int:
    server = str(memory.client.server.make_url("/"))
    args = build_parser().parse_args([argv[0], "--server", server, *argv[1:]])
    return await run_memory_command(args)


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
    monkeypatch.setattr(cli_memory, "POLL_SECONDS", 0.05)
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
    monkeypatch.setattr(cli_memory, "POLL_SECONDS", 0.05)
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


async def test_regenerating_a_covered_message_says_why_it_cannot(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(30, ends={12}, **{"memory.llm.model": "fake-model"})
    assert await cli(memory, "backfill", CHAT_ID) == 0
    # It said "POST /recap/api/chats/<the chat id, percent-encoded>/messages/3/recap/
    # regenerate: nothing to message recap there".
    with pytest.raises(RecapProxyError) as caught:
        await cli(memory, "regenerate", CHAT_ID, "message", "3")
    assert str(caught.value) == (
        "message 3 is covered by the running recap (through message 12): a recap of it "
        "would never be used"
    )
    assert await cli(memory, "regenerate", CHAT_ID, "message", "15") == 0  # the open scene


async def test_queue_lists_the_work_not_done_and_the_newest_done_jobs(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(
        60, ends={12, 30, 45}, **{"memory.llm.model": "fake-model", "memory.scene_break_window": 10}
    )
    assert await cli(memory, "backfill", CHAT_ID) == 0
    await memory.engine.queue.pause()
    await memory.client.put(
        f"/recap/api/chats/{quote(CHAT_ID, safe='')}/messages/52/scene_break", json={}
    )
    capsys.readouterr()
    assert await cli(memory, "queue") == 0
    lines = capsys.readouterr().out.splitlines()
    done = [line for line in lines if line.split()[1] == "done"]
    assert lines[0] == "paused: True"
    assert " queued   scene_recap " in lines[1]  # the work not done first
    assert len(done) == 10 and lines[-1].startswith("(and ")
    hidden = int(lines[-1].split()[1])
    ids = [int(line.split()[0]) for line in done]
    assert ids == sorted(ids) and hidden > 0
    assert await cli(memory, "queue", "--all") == 0
    every = capsys.readouterr().out.splitlines()
    assert len([line for line in every if line.split()[1] == "done"]) == 10 + hidden
    assert not every[-1].startswith("(and ")


async def test_breaks_regenerate_queue_and_toggle(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(16, ends=set(), **{"memory.auto_scene_break": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert await cli(memory, "scene-break", CHAT_ID, "5") == 0
    await memory.engine.settle()
    assert await cli(memory, "regenerate", CHAT_ID, "scene", "5") == 0
    assert await cli(memory, "queue", "pause") == 0
    assert await cli(memory, "queue") == 0
    assert "paused: True" in capsys.readouterr().out
    assert await cli(memory, "queue", "resume") == 0
    await memory.engine.settle()
    assert await cli(memory, "memory", CHAT_ID, "--off") == 0
    assert "memory:  off" in capsys.readouterr().out
    assert await cli(memory, "scene-break", CHAT_ID, "5", "--remove") == 0
    with pytest.raises(RecapProxyError, match="no chat named"):
        await cli(memory, "memory", "Nobody")
    with pytest.raises(RecapProxyError, match="needs an index"):
        await cli(memory, "regenerate", CHAT_ID, "message")


async def test_a_short_chat_says_when_its_first_scene_check_comes(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = {"memory.minimum_scene_length": 10, "memory.scene_break_offset": 8,
             "memory.scene_break_every": 20, "memory.scene_break_window": 40}  # fmt: skip
    memory = await memory_proxy(8, ends=set(), **rules)
    assert await cli(memory, "memory", CHAT_ID, "--json") == 0
    assert '"scene_check_in": null' in capsys.readouterr().out  # not looked after yet
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    assert await cli(memory, "memory", CHAT_ID) == 0
    out = capsys.readouterr().out
    assert "memory:  default (on)\n" in out  # what the default comes to
    # The 37th message is the first a check may come with: 9 to open the scene, 20 to
    # choose from, 8 of context after them.
    assert (
        "open     messages #0-7, the open scene (recapped once a scene break ends it); "
        "next scene-break check after 29 more message(s)"
    ) in out
    assert await cli(memory, "memory", CHAT_ID, "--off") == 0
    out = capsys.readouterr().out
    assert "open     messages #0-7, the open scene" in out and "check" not in out
    assert "memory:  off\n" in out


async def test_a_chats_own_state_that_a_global_switch_overrules_says_so(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(8, ends=set(), **{"injection.use_global_toggle_state": True})
    assert await cli(memory, "memory", CHAT_ID, "--off") == 0
    out = capsys.readouterr().out
    assert "memory:  off (but on: [injection] enabled or use_global_toggle_state decide)" in out


async def test_no_server_says_how_to_start_one(unused_tcp_port: int) -> None:
    args = build_parser().parse_args(["queue", "--server", f"http://127.0.0.1:{unused_tcp_port}"])
    with pytest.raises(RecapProxyError, match="recap-proxy serve"):
        await run_memory_command(args)


CHATS = [
    {"id": "u/chats/default_Sera/Sera - 1", "file": "u/chats/default_Sera/Sera - 1.jsonl",
     "user": "u", "kind": "character", "name": "Sera", "owner": "default_Sera", "updated": 1.0},
    {"id": "u/chats/default_Sera/Sera - 2", "file": "u/chats/default_Sera/Sera - 2.jsonl",
     "user": "u", "kind": "character", "name": "Sera", "owner": "default_Sera", "updated": 2.0},
    {"id": "u/chats/Orin/Orin - 1", "file": "u/chats/Orin/Orin - 1.jsonl",
     "user": "u", "kind": "character", "name": "Orin", "owner": "Orin", "updated": 3.0},
    {"id": "u/chats/Orin2/Orin - 9", "file": "u/chats/Orin2/Orin - 9.jsonl",
     "user": "u", "kind": "character", "name": "Orin", "owner": "Orin2", "updated": 4.0},
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "chosen", "says"),
    [
        ("u/chats/default_Sera/Sera - 1", "u/chats/default_Sera/Sera - 1", False),
        ("u/chats/default_Sera/Sera - 1.jsonl", "u/chats/default_Sera/Sera - 1", False),
        ("Sera - 1.jsonl", "u/chats/default_Sera/Sera - 1", False),
        ("Sera - 1", "u/chats/default_Sera/Sera - 1", False),
        ("Sera", "u/chats/default_Sera/Sera - 2", True),  # the character's newest chat
        ("sera", "u/chats/default_Sera/Sera - 2", True),
    ],
)
def test_a_chat_is_named_by_id_file_or_character(name: str, chosen: str, says: bool) -> None:
    found, note = pick_chat(name, CHATS)
    assert found == chosen
    assert (note is not None) == says
    if note:
        assert chosen in note and "newest of its 2 chats" in note


def test_a_name_of_two_characters_lists_them() -> None:
    with pytest.raises(RecapProxyError, match="2 different characters") as caught:
        pick_chat("Orin", CHATS)
    assert "u/chats/Orin/Orin - 1" in str(caught.value)
    assert "u/chats/Orin2/Orin - 9" in str(caught.value)
    with pytest.raises(RecapProxyError, match="no chat named 'Nobody'"):
        pick_chat("Nobody", CHATS)


async def test_the_cli_finds_a_chat_in_a_default_folder_by_its_characters_name(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(8, ends=set(), folder="default_Ava")
    assert await cli(memory, "memory", "Ava") == 0
    captured = capsys.readouterr()
    assert memory.story.chat_id in captured.out
    assert f"'Ava' is {memory.story.chat_id}" in captured.err
    file_name = memory.story.path.name
    assert await cli(memory, "memory", file_name) == 0  # with `.jsonl`
    assert await cli(memory, "memory", file_name.removesuffix(".jsonl")) == 0


async def test_the_cli_sends_the_access_key_from_the_config(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await memory_proxy(8, ends=set(), **{"server.access_key": "s3cret"})
    with pytest.raises(RecapProxyError, match="access key"):
        await cli(memory, "queue")
    monkeypatch.setenv("RECAP_PROXY_SERVER__ACCESS_KEY", "s3cret")
    assert await cli(memory, "queue", "pause") == 0


async def test_memory_shows_a_failed_job_and_how_it_comes_back(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    memory.fake.state.faults = {"scene_recap": ["status=401"]}
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert await cli(memory, "memory", "Ava") == 0
    out = capsys.readouterr().out
    assert "queue:   0 queued, 0 running, 1 failed" in out
    assert "failed:  scene_recap (job " in out and "401" in out
    assert "failed_retry_minutes" in out
