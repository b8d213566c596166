"""The memory engine over a temp ST data folder: the `memory_proxy` fixture (registered in
`tests/conftest.py`) and a story to grow in it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.memory.engine import MemoryEngine
from proxy.runtime.runtime import build_runtime
from proxy.store import Database
from proxy.waits import SERVING, Waits
from proxy.web import make_app
from proxy.web.keys import RUNTIME
from tests.conftest import FakeLLM, make_settings
from tests.memory.story import CHAT_ID, Story

T = TypeVar("T")

FAST = {
    "memory.minimum_scene_length": 4,
    "memory.scene_break_offset": 2,
    "memory.scene_break_every": 1,
    "memory.message_recap_batch_size": 3,
    # Tests send a chat's whole history, which `needed` would never recap.
    "memory.message_recaps": "always",
    "sillytavern.debounce_ms": 10,
}
# The proxy's pauses, as the tests' apps take them: a folder or a failing store looked at
# again at once. The limits on waiting for an event (a request after a save, a file read)
# stay as served: they end when the event comes, and a test's load must not outlast them.
QUICK = Waits(
    request_hold=SERVING.request_hold,
    first_request=SERVING.first_request,
    freshness=SERVING.freshness,
    gone_poll=0.05,
    store_retry=0.05,
    index_retry=0.05,
    embed_gather=0.0,
)


@dataclass
class Memory:
    client: TestClient[Any, Any]
    app: web.Application
    story: Story
    fake: FakeLLM

    @property
    def engine(self) -> MemoryEngine:
        return self.app[RUNTIME].memory_parts().engine

    def forwarded(self) -> list[dict[str, Any]]:
        """The bodies of the requests the proxy forwarded for ST, oldest first: not its
        own calls, which may come between them (a scene-break check may start while a
        request is answered)."""
        return [
            json.loads(seen.body)
            for seen in self.fake.state.seen
            if seen.body and "X-Recap-Proxy-Operation" not in seen.headers
        ]

    async def run(self, fn: Callable[[Database], T]) -> T:
        """`fn(database)` on the store's thread."""
        return await self.app[RUNTIME].memory_parts().store.call(fn)

    async def until(
        self, check: Callable[[Database], object], timeout: float = 10.0, *, settle: bool = True
    ) -> None:
        """Wait for a store condition, letting the engine work (`settle=False` while a
        call is held: settling would wait for it); fail loudly when it never comes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if settle:
                await asyncio.wait_for(self.engine.settle(), timeout)
            if await self.run(check):
                return
            if loop.time() > deadline:
                raise AssertionError("condition not reached")
            await asyncio.sleep(0.05)


MemoryFactory = Callable[..., Awaitable[Memory]]


@pytest.fixture
def memory_proxy(
    aiohttp_client: Callable[..., Any], fake_llm: FakeLLM, tmp_path: Path
) -> MemoryFactory:
    async def make(
        messages: int,
        ends: set[int],
        folder: str | None = None,
        build: Callable[[Story], object] | None = None,
        **dotted: Any,
    ) -> Memory:
        """`build(story)`: writes the chat instead of `messages` plain ones."""
        data = tmp_path / "st" / "data"
        story = Story(data, ends, folder=folder)
        if build is None:
            story.grow(messages)
        else:
            build(story)
        settings = make_settings(
            **{
                "upstream.base_url": fake_llm.base_url,
                "sillytavern.data_dir": str(data),
                "store.path": str(tmp_path / "store.sqlite3"),
                "memory.templates_dir": str(tmp_path / "no-templates"),
                **FAST,
                **dotted,
            }
        )
        app = make_app(build_runtime(settings, waits=QUICK))
        client: TestClient[Any, Any] = await aiohttp_client(app)
        await asyncio.wait_for(app[RUNTIME].memory_parts().library.indexed.wait(), 10)
        assert app[RUNTIME].memory_parts().library.index.entries, "the story's chat was not indexed"
        return Memory(client, app, story, fake_llm)

    return make


def recapped(db: Database) -> set[int]:
    """The positions of the story chat's messages that have a message recap."""
    found = db.memory.messages_by_uid([uid for uid, _ in db.memory.message_recaps(CHAT_ID)])
    return {m.position for m in found.values()}


async def cli(memory: Memory, *argv: str) -> int:
    """A memory command (`backfill`, `memory`, `queue`, ...) against this proxy."""
    from proxy.cli.main import build_parser
    from proxy.cli.memory import run_memory_command

    server = str(memory.client.server.make_url("/"))
    args = build_parser().parse_args([argv[0], "--server", server, *argv[1:]])
    return await run_memory_command(args)


async def start(memory: Memory) -> None:
    """The story's request, answered: the memory's work on the chat starts."""
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.status == 200


async def hold(memory: Memory, operation: str) -> None:
    """The story's request, and the fake LLM's call for `operation` held in flight (until
    `memory.fake.state.release` is set)."""
    memory.fake.state.faults = {operation: ["hold"]}
    await start(memory)
    await asyncio.wait_for(memory.fake.state.held.wait(), 5)
