"""Background tasks are held until they end, drained or cancelled by their owner."""

from __future__ import annotations

import asyncio

from proxy.tasks import TaskSet


async def test_spawned_tasks_are_held_and_drained() -> None:
    tasks = TaskSet()
    done: list[int] = []

    async def work(n: int) -> int:
        await asyncio.sleep(0.001 * n)
        if n == 1:
            tasks.spawn(work(3), "follow-up")  # started while draining: waited for too
        done.append(n)
        return n

    first = tasks.spawn(work(1), "first")
    tasks.spawn(work(2), "second")
    assert len(tasks) == 2 and first.get_name() == "first"
    await tasks.drain()
    assert sorted(done) == [1, 2, 3]
    assert not tasks and await first == 1


async def test_cancel_ends_every_task() -> None:
    tasks = TaskSet()
    gate = asyncio.Event()
    held = [tasks.spawn(gate.wait(), f"wait {i}") for i in range(3)]
    await asyncio.sleep(0)
    await tasks.cancel()
    assert all(t.cancelled() for t in held)
    assert not tasks


async def test_a_failing_task_does_not_stop_the_drain() -> None:
    tasks = TaskSet()

    async def boom() -> None:
        raise RuntimeError("boom")

    failed = tasks.spawn(boom(), "boom")
    await tasks.drain()
    assert isinstance(failed.exception(), RuntimeError)
