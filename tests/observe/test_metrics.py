"""The figures for `/metrics`: counted from the chat path and the event bus, written in
Prometheus's format and read back with its parser."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from proxy.observe.events import EventBus
from proxy.observe.metrics import Metrics


def values(metrics: Metrics, queue: dict[str, int] | None = None) -> dict[str, float]:
    text = metrics.exposition(queue).decode()
    return {
        sample.name + str(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_events_and_reports_become_counts(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    store.write_bytes(b"x" * 1000)
    (tmp_path / "store.sqlite3-wal").write_bytes(b"y" * 24)
    metrics = Metrics(store)
    bus = EventBus()
    bus.listeners.append(metrics.on_event)
    bus.publish("job", job=1, chat="c", operation="scene_recap", state="done", error=None)
    bus.publish("job", chat="c", state="queued", count=3)  # planning's summary: no operation
    bus.publish("call", chat="c", operation="scene_recap", prompt_tokens=900, answer_tokens=120)
    bus.publish("chat", chat="c", deleted=False, changes=2)
    bus.publish("chat", chat="c", deleted=True, changes=0)
    metrics.relayed("", 200, "openai_chat")
    metrics.relayed("/claude", 529, "anthropic_messages")
    metrics.chat_request("identified", 1200, 40)
    metrics.chat_request("unidentified", 0, 0)
    found = values(metrics, {"queued": 2, "running": 1, "failed": 0})
    assert found["recap_proxy_jobs_total[('operation', 'scene_recap'), ('state', 'done')]"] == 1
    assert sum(v for k, v in found.items() if k.startswith("recap_proxy_jobs_total")) == 1
    assert found["recap_proxy_llm_calls_total[('operation', 'scene_recap')]"] == 1
    prompt = "recap_proxy_llm_tokens_total[('kind', 'prompt'), ('operation', 'scene_recap')]"
    assert found[prompt] == 900
    assert found["recap_proxy_watcher_events_total[('kind', 'saved')]"] == 1
    assert found["recap_proxy_watcher_events_total[('kind', 'deleted')]"] == 1
    relayed = "recap_proxy_requests_total[('format', 'openai_chat'), ('route', '/'), "
    assert found[relayed + "('status', '200')]"] == 1
    assert found["recap_proxy_inserted_memory_tokens_sum[]"] == 1200
    assert found["recap_proxy_inserted_memory_tokens_count[]"] == 1  # identified ones only
    assert found["recap_proxy_identification_total[('outcome', 'unidentified')]"] == 1
    assert found["recap_proxy_jobs_current[('state', 'queued')]"] == 2
    assert found["recap_proxy_store_size_bytes[]"] == 1024


def test_unlabelled_histograms_are_shown_at_zero_before_any_request() -> None:
    found = values(Metrics())
    assert found["recap_proxy_inserted_memory_tokens_count[]"] == 0
    assert found["recap_proxy_messages_left_out_bucket[('le', '+Inf')]"] == 0
    assert not any(k.startswith("recap_proxy_requests_total") for k in found)


def test_two_apps_never_add_up() -> None:
    first, second = Metrics(), Metrics()
    first.relayed("", 200, "other")
    assert not any(k.startswith("recap_proxy_requests_total") for k in values(second))


def test_chat_path_histograms_count_each_value_in_its_bucket() -> None:
    """A value on a bucket's bound is in that bucket (Prometheus's `le`), counts are
    cumulative, and the sum is the values' sum."""
    metrics = Metrics()
    for seconds in (0.0004, 0.0005, 0.003, 7.0):
        metrics.latency("openai_chat", seconds)
    metrics.chat_request("identified", 100, 0)
    metrics.chat_request("identified", 9000, 3)
    found = values(metrics)

    def bucket(name: str, le: str, **labels: str) -> float:
        key = sorted({**labels, "le": le}.items())
        return found[f"{name}_bucket{key}"]

    latency = "recap_proxy_added_latency_seconds"
    assert bucket(latency, "0.0005", format="openai_chat") == 2
    assert bucket(latency, "0.001", format="openai_chat") == 2
    assert bucket(latency, "0.005", format="openai_chat") == 3
    assert bucket(latency, "1.0", format="openai_chat") == 3
    assert bucket(latency, "+Inf", format="openai_chat") == 4
    assert found[f"{latency}_count[('format', 'openai_chat')]"] == 4
    assert abs(found[f"{latency}_sum[('format', 'openai_chat')]"] - 7.0039) < 1e-9
    tokens = "recap_proxy_inserted_memory_tokens"
    assert bucket(tokens, "0.0") == 0 and bucket(tokens, "100.0") == 1
    assert bucket(tokens, "8000.0") == 1 and bucket(tokens, "+Inf") == 2
    assert found["recap_proxy_messages_left_out_sum[]"] == 3
