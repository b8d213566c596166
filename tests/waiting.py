"""Waiting for a condition in tests: it comes, or the test fails saying what never came."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def until(
    check: Callable[[], bool | Awaitable[bool]], what: str, timeout: float = 10.0
) -> None:
    """Poll `check` (sync or async) until it is true; fail loudly after `timeout` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"not reached in {timeout:.0f} s: {what}")
        await asyncio.sleep(0.005)
