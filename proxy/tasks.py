"""Background tasks that are named and referenced until they end.

asyncio keeps only a weak reference to a task, so a task nobody holds can vanish mid-way;
every owner that starts work in the background keeps its tasks in a `TaskSet`, and waits
for them (`drain`) or cancels them (`cancel`) when it stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from typing import TypeVar

T = TypeVar("T")


class TaskSet:
    """The tasks one owner started and has not seen end yet."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()

    def spawn(self, coro: Coroutine[object, object, T], name: str) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[object]]:
        return iter(list(self._tasks))

    async def drain(self) -> None:
        """Wait for every task still running (including ones they start meanwhile)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def cancel(self) -> None:
        """Cancel every task and wait until they have ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
