"""`GET /recap/api/events`: order, resume with Last-Event-ID, reset after a long absence,
and the events the proxy's own work and chat requests publish."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import ClientResponse

from proxy.chat.providers import NoMemory
from proxy.observe.events import EventBus
from proxy.runtime.runtime import build_runtime
from proxy.web import make_app
from tests.conftest import make_settings
from tests.memory.story import CHAT_ID
from tests.memory_env import MemoryFactory


async def read_events(response: ClientResponse, count: int) -> list[dict[str, Any]]:
    """The next `count` events of a stream (comments and `retry:` skipped)."""
    events: list[dict[str, Any]] = []
    fields: dict[str, str] = {}
    while len(events) < count:
        # A missing event fails the test instead of hanging it.
        line = (await asyncio.wait_for(response.content.readline(), 10)).decode().rstrip("\n")
        if line == "":
            if "data" in fields:
                events.append({"sse_id": fields.get("id"), "event": fields.get("event"),
                               **json.loads(fields["data"])})  # fmt: skip
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value
    return events


async def events_app(aiohttp_client: Any, bus: EventBus) -> Any:
    return await aiohttp_client(
        make_app(build_runtime(make_settings(), provider=NoMemory(), events=bus))
    )


async def test_events_arrive_in_order_with_their_numbers(aiohttp_client: Any) -> None:
    bus = EventBus()
    client = await events_app(aiohttp_client, bus)
    response = await client.get("/recap/api/events")
    assert response.headers["Content-Type"] == "text/event-stream"
    bus.publish("job", chat="c", job=1, state="queued")
    bus.publish("job", chat="c", job=1, state="running")
    bus.publish("recap", chat="c", scene=8, version=1)
    got = await read_events(response, 3)
    assert [(e["sse_id"], e["event"]) for e in got] == [("1", "job"), ("2", "job"), ("3", "recap")]
    assert got[1]["state"] == "running" and got[2]["scene"] == 8
    response.close()


async def test_a_client_that_comes_back_gets_what_it_missed_once(aiohttp_client: Any) -> None:
    bus = EventBus()
    client = await events_app(aiohttp_client, bus)
    first = await client.get("/recap/api/events")
    bus.publish("chat", chat="c")
    seen = await read_events(first, 1)
    first.close()  # the page lost its connection...
    for n in range(3):  # ...while the proxy went on
        bus.publish("job", chat="c", job=n, state="done")
    again = await client.get("/recap/api/events", headers={"Last-Event-ID": seen[0]["sse_id"]})
    bus.publish("running", chat="c", version=2)
    got = await read_events(again, 4)
    assert [e["id"] for e in got] == [2, 3, 4, 5]  # nothing lost, nothing twice
    again.close()
    by_query = await client.get("/recap/api/events?last_event_id=4")
    assert [e["id"] for e in await read_events(by_query, 1)] == [5]
    by_query.close()


async def test_a_client_away_too_long_is_told_to_reload(aiohttp_client: Any) -> None:
    bus = EventBus(keep_count=2)
    client = await events_app(aiohttp_client, bus)
    for _ in range(5):
        bus.publish("chat", chat="c")
    response = await client.get("/recap/api/events", headers={"Last-Event-ID": "1"})
    bus.publish("chat", chat="c")
    got = await read_events(response, 2)
    assert got[0]["event"] == "reset" and got[1]["id"] == 6
    response.close()
    bad = await client.get("/recap/api/events", headers={"Last-Event-ID": "x"})
    assert bad.status == 400


async def test_the_memory_at_work_is_announced(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, {8}, **{"memory.message_recaps": False})
    stream = await memory.client.get("/recap/api/events")
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    kinds: list[tuple[str, str | None]] = []
    while ("running", None) not in kinds:
        event = (await read_events(stream, 1))[0]
        assert event["chat"] == CHAT_ID
        kinds.append((event["event"], event.get("state") if event["event"] == "job" else None))
    # The first request waits a moment for the chat's planning: its jobs may come first.
    expected_kinds = [("request", None), ("job", "queued"), ("job", "running"), ("scene", None),
                      ("job", "done"), ("recap", None)]  # fmt: skip
    for expected in expected_kinds:
        assert expected in kinds
    assert kinds.index(("scene", None)) < kinds.index(("recap", None))
    await memory.client.post(f"/recap/api/chats/{CHAT_ID}/scenes/8/recaps", json={"recap": "R"})
    while (event := (await read_events(stream, 1))[0])["event"] != "memory":
        pass
    assert event["action"] == "POST /scenes/{index}/recaps" and event["index"] == 8
    stream.close()
