"""`GET /health` and `GET /metrics` on a running proxy with memory."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy import __version__
from proxy.observe.vitals import FAILING_AFTER
from proxy.web.keys import RUNTIME
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory


async def health_of(memory: Memory) -> tuple[int, dict[str, Any]]:
    response = await memory.client.get("/health")
    return response.status, await response.json()


async def test_ok_then_degraded_by_the_store_then_by_the_watcher(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await memory_proxy(16, {8})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    status, report = await health_of(memory)
    assert status == 200 and report["status"] == "ok" and report["problems"] == []
    assert report["version"] == __version__ and report["uptime_s"] >= 0
    assert (report["store"], report["watcher"]) == ("ok", "running")
    assert report["queue"] == {"queued": 0, "running": 0, "failed": 0, "waiting_for_model": 0}
    assert report["upstream"]["last_status"] == 200 and report["upstream"]["last_error"] is None
    # For `doctor`: the chat requests of the last hour.
    assert report["requests"] == {"identified": 1, "unidentified": 0, "window_s": 3600}

    # The store can no longer be written (a full disk, a read-only file system).
    store = memory.app[RUNTIME].memory_parts().store
    await store.call(lambda db: db.db.execute("PRAGMA query_only=1"))
    status, report = await health_of(memory)
    assert status == 503 and report["status"] == "degraded"
    assert "readonly" in report["store"] and report["problems"][0].startswith("store:")
    await store.call(lambda db: db.db.execute("PRAGMA query_only=0"))
    # Writable again, but a store that failed a moment ago is not trusted yet (a full
    # disk takes small writes while a chat's fails): it is, once a write goes in
    # `FAILURE_HOLD_S` after the last failure.
    status, report = await health_of(memory)
    assert status == 503 and "readonly" in report["store"]
    assert "\nrecap_proxy_store_failing 1.0\n" in await (await memory.client.get("/metrics")).text()
    monkeypatch.setattr("proxy.store.FAILURE_HOLD_S", 0.0)
    assert (await health_of(memory))[0] == 200
    assert "\nrecap_proxy_store_failing 0.0\n" in await (await memory.client.get("/metrics")).text()

    # The watch on ST's folder ended.
    watcher = memory.app[RUNTIME].memory_parts().watcher
    await watcher.__aexit__(None, None, None)
    status, report = await health_of(memory)
    assert status == 503 and report["watcher"] == "stopped"


async def test_jobs_waiting_for_a_model_are_counted(memory_proxy: MemoryFactory) -> None:
    # A chat that had no request since the start, backfilled, and no [memory.llm] model:
    # its jobs wait for one (keys and models are kept in memory only).
    memory = await memory_proxy(40, {12})
    chat = quote(CHAT_ID, safe="")
    backfill = await memory.client.post(f"/recap/api/chats/{chat}/backfill", json={})
    assert backfill.status == 200
    await memory.until(
        lambda db: any(j.error for j in db.jobs.list(CHAT_ID, ("queued",))), settle=False
    )
    status, report = await health_of(memory)
    assert status == 200  # it is how the proxy works, not a fault
    assert report["queue"]["waiting_for_model"] == 1 and report["queue"]["queued"] == 1
    # The chat's request brings a model: nothing waits any more.
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    assert (await health_of(memory))[1]["queue"]["waiting_for_model"] == 0


async def test_degraded_while_the_upstream_fails_and_well_again_after(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(4, set())
    failing = {**memory.story.request(), "model": "status=503"}
    for attempt in range(FAILING_AFTER):
        assert (await health_of(memory))[0] == 200, attempt
        response = await memory.client.post("/v1/chat/completions", json=failing)
        assert response.status == 503  # ST gets the upstream's own answer
    status, report = await health_of(memory)
    assert status == 503 and report["upstream"]["last_status"] == 503
    assert report["upstream"]["last_error"] == "HTTP 503"
    assert report["upstream"]["failures_in_a_row"] == FAILING_AFTER
    assert report["upstream"]["last_error_at"] > 0
    # A 4xx is the upstream working (a wrong key is the user's to fix): not a failure.
    await memory.client.post("/v1/chat/completions", json={**failing, "model": "status=401"})
    assert (await health_of(memory))[0] == 200


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and labels (parsed by prometheus-client)."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_count_requests_identification_jobs_and_calls(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(16, {8})
    for _ in range(3):
        response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
        assert response.status == 200
        await memory.engine.settle()
    # ST saves the next exchange: the watcher reads the file anew.
    memory.story.grow(2)
    memory.story.save()
    await memory.until(lambda db: len(db.messages(CHAT_ID)) == 18)
    await memory.engine.settle()  # what the save planned has run: nothing is queued
    await memory.client.get("/v1/models")
    unknown = {"model": "m", "messages": [{"role": "user", "content": "not in any chat"}]}
    await memory.client.post("/v1/chat/completions", json=unknown)
    response = await memory.client.get("/metrics")
    assert response.status == 200 and response.content_type == "text/plain"
    found = samples(await response.text())

    def value(name: str, **labels: str) -> float:
        return found.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("recap_proxy_requests_total", route="/", status="200", format="openai_chat") == 4
    assert value("recap_proxy_requests_total", route="/", status="200", format="other") == 1
    assert value("recap_proxy_identification_total", outcome="identified") == 3
    assert value("recap_proxy_identification_total", outcome="unidentified") == 1
    assert value("recap_proxy_added_latency_seconds_count", format="openai_chat") == 4
    assert value("recap_proxy_time_to_first_byte_seconds_count", format="openai_chat") == 4
    # Every identified request is observed (0 tokens when nothing went in yet).
    assert value("recap_proxy_inserted_memory_tokens_count") == 3
    assert value("recap_proxy_inserted_memory_tokens_sum") > 0
    assert value("recap_proxy_messages_left_out_sum") >= 9
    # The proxy's own calls, as the fake model counted them.
    calls = memory.fake.state.operations
    for operation in set(calls):
        assert value("recap_proxy_llm_calls_total", operation=operation) == calls.count(operation)
        assert value("recap_proxy_jobs_total", operation=operation, state="done") >= 1
        assert value("recap_proxy_llm_tokens_total", operation=operation, kind="prompt") > 0
    assert value("recap_proxy_jobs_current", state="queued") == 0
    assert value("recap_proxy_store_size_bytes") > 0
    assert value("recap_proxy_watcher_events_total", kind="saved") >= 1
