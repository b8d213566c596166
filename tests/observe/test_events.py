"""The event bus: numbered in order, kept for a while, handed out from any thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from proxy.observe.events import EventBus


async def test_subscribers_get_events_in_order_and_late_ones_get_what_they_missed() -> None:
    bus = EventBus()
    bus.bind(asyncio.get_running_loop())
    async with bus.subscribe() as queue:
        first = bus.publish("job", chat="c", state="queued")
        second = bus.publish("scene", chat="c", message=8)
        got = [await queue.get(), await queue.get()]
    assert [e.id if e else None for e in got] == [first.id, second.id] == [1, 2]
    assert got[1] is not None and got[1].data == {"chat": "c", "message": 8}
    assert [e.id for e in bus.since(0) or []] == [1, 2]
    assert bus.since(2) == [] and bus.since(5) == []


async def test_events_from_another_thread_reach_the_loop() -> None:
    bus = EventBus()
    bus.bind(asyncio.get_running_loop())
    async with bus.subscribe() as queue:
        worker = threading.Thread(target=lambda: bus.publish("recap", chat="c", scene=3))
        worker.start()
        worker.join()
        event = await asyncio.wait_for(queue.get(), 2)
    assert event is not None and event.kind == "recap" and event.data["scene"] == 3


def test_old_events_go_and_a_gap_is_told() -> None:
    now = [0.0]
    bus = EventBus(keep_seconds=30, keep_count=3, clock=lambda: now[0])
    for _ in range(3):
        bus.publish("chat", chat="c")
    assert [e.id for e in bus.since(1) or []] == [2, 3]
    bus.publish("chat", chat="c")  # only the newest three are kept
    assert bus.since(0) is None and [e.id for e in bus.since(1) or []] == [2, 3, 4]
    now[0] = 31.0
    bus.publish("chat", chat="c")
    assert bus.since(3) is None  # 4 is older than 30 s: gone
    assert [e.id for e in bus.since(4) or []] == [5]


def test_an_unknown_kind_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown event kind"):
        EventBus().publish("jobs")


async def test_closing_ends_every_subscription() -> None:
    bus = EventBus()
    bus.bind(asyncio.get_running_loop())
    async with bus.subscribe() as queue:
        bus.close()
        assert await queue.get() is None
