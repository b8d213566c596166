"""The memory commands against a running server (in-process, on loopback)."""

from __future__ import annotations

import pytest

from proxy.cli import build_parser
from proxy.cli_memory import run_memory_command
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
    assert await cli(memory, "memory", "Ava") == 0
    out = capsys.readouterr().out
    assert "scene    #0-12" in out and "scene    #13-30" in out and "scene    #31-45" in out
    assert "running recap v3 (3 scene(s))" in out
    assert CHAT_ID in out


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


async def test_no_server_says_how_to_start_one(unused_tcp_port: int) -> None:
    args = build_parser().parse_args(["queue", "--server", f"http://127.0.0.1:{unused_tcp_port}"])
    with pytest.raises(RecapProxyError, match="recap-proxy serve"):
        await run_memory_command(args)
