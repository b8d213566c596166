"""A chat's retries: one timer per chat, the store's failure said once until it works."""

from __future__ import annotations

import asyncio
import logging

import pytest

from proxy.memory.calls.retries import Retries


async def test_a_retry_asked_for_while_one_waits_joins_it() -> None:
    retries, fired = Retries(), []
    retries.later("a", 0.02, lambda: fired.append("first"))
    retries.later("a", 0.0, lambda: fired.append("second"))
    retries.later("b", 0.0, lambda: fired.append("b"))
    assert retries.waits("a") and retries.waits("b")
    await asyncio.sleep(0.05)
    assert fired == ["b", "first"]
    assert not retries.waits("a")
    retries.later("a", 0.0, lambda: fired.append("again"))  # once fired, a new one may wait
    await asyncio.sleep(0.01)
    assert fired[-1] == "again"


async def test_cancel_stops_every_timer() -> None:
    retries, fired = Retries(), []
    retries.later("a", 0.01, lambda: fired.append("a"))
    retries.cancel()
    await asyncio.sleep(0.03)
    assert fired == [] and not retries.waits("a")


async def test_the_store_failing_is_said_once_until_it_works(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    retries, again = Retries(store_retry=0.01), []
    caplog.set_level(logging.WARNING, logger="proxy.memory.calls.retries")
    full = OSError("database or disk is full")
    retries.store_failed("a", "planning", full, lambda: again.append(1))
    await asyncio.sleep(0.03)
    retries.store_failed("a", "planning", full, lambda: again.append(2))
    await asyncio.sleep(0.03)
    assert again == [1, 2]
    assert [r.getMessage() for r in caplog.records] == [
        "planning the memory of a failed (database or disk is full); trying again every 0 s"
    ]
    retries.worked("a")
    retries.store_failed("a", "starting", full, lambda: None)
    assert len(caplog.records) == 2 and "starting the memory of a" in caplog.records[1].message
    retries.cancel()
