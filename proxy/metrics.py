"""The proxy's figures for `GET /metrics`, in Prometheus's text format (prometheus-client).

One registry per app (not the library's global one), so that two apps in one process (the
tests) never add up. Counting is a lock and an addition in C-backed counters: the chat
path pays nothing measurable for it. What the engine does reaches here as events of the
`EventBus` (jobs, the proxy's own LLM calls, chat files read anew); the chat path reports
its requests directly; the store's size and the queue are read when Prometheus asks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxy.events import Event

# Added latency and time to first byte: a millisecond is a lot for the proxy itself, and
# an upstream can take minutes to its first byte.
_LATENCY = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_FIRST_BYTE = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_TOKENS = (0, 100, 250, 500, 1000, 1500, 2500, 4000, 8000)
_MESSAGES = (0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)


_Labelled = TypeVar("_Labelled", Counter, Histogram)


class Metrics:
    """Every figure the proxy exposes; methods are called from any thread."""

    def __init__(self, store_path: Path | None = None) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "recap_proxy_requests",
            "Requests relayed upstream, by route prefix, HTTP status and wire format.",
            ["route", "status", "format"],
            registry=registry,
        )
        self.added_latency = Histogram(
            "recap_proxy_added_latency_seconds",
            "The proxy's own time before a request goes upstream (parsing, identification, "
            "memory, encoding).",
            ["format"],
            buckets=_LATENCY,
            registry=registry,
        )
        self.first_byte = Histogram(
            "recap_proxy_time_to_first_byte_seconds",
            "From the request's arrival to its answer's first byte written back.",
            ["format"],
            buckets=_FIRST_BYTE,
            registry=registry,
        )
        self.identification = Counter(
            "recap_proxy_identification",
            "Chat requests by identification outcome (identified, unidentified, no_memory).",
            ["outcome"],
            registry=registry,
        )
        self.memory_tokens = Histogram(
            "recap_proxy_inserted_memory_tokens",
            "Memory tokens inserted into a chat request (both parts).",
            buckets=_TOKENS,
            registry=registry,
        )
        self.left_out = Histogram(
            "recap_proxy_messages_left_out",
            "Chat messages left out of a request because the running recap covers them.",
            buckets=_MESSAGES,
            registry=registry,
        )
        self.jobs = Counter(
            "recap_proxy_jobs",
            "The memory queue's job transitions, by operation and state (queued, running, "
            "done, retrying, failed, dropped).",
            ["operation", "state"],
            registry=registry,
        )
        self.jobs_now = Gauge(
            "recap_proxy_jobs_current",
            "Jobs in the queue now, by state (queued, running, failed).",
            ["state"],
            registry=registry,
        )
        self.llm_calls = Counter(
            "recap_proxy_llm_calls",
            "The proxy's own LLM calls (upkeep), by operation.",
            ["operation"],
            registry=registry,
        )
        self.llm_tokens = Counter(
            "recap_proxy_llm_tokens",
            "Tokens of the proxy's own LLM calls, by operation and kind (prompt, answer).",
            ["operation", "kind"],
            registry=registry,
        )
        self.watcher_events = Counter(
            "recap_proxy_watcher_events",
            "SillyTavern chat files read anew after a change, by kind (saved, deleted).",
            ["kind"],
            registry=registry,
        )
        self.store_size = Gauge(
            "recap_proxy_store_size_bytes",
            "The proxy's SQLite store on disk (its write-ahead log included).",
            registry=registry,
        )
        if store_path is not None:
            self.store_size.set_function(_file_size(store_path))
        # The chat path's series by their labels: `labels()` takes a lock and validates
        # its arguments on every call, and a request counts four figures.
        self._children: dict[tuple[object, ...], Any] = {}

    def _child(self, metric: _Labelled, *labels: str) -> _Labelled:
        key = (metric, *labels)
        child: _Labelled | None = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # -- reported by the chat path ---------------------------------------------------------

    def relayed(self, route: str, status: int | str, wire: str) -> None:
        self._child(self.requests, route or "/", str(status), wire).inc()

    def latency(self, wire: str, seconds: float) -> None:
        self._child(self.added_latency, wire).observe(seconds)

    def first_byte_after(self, wire: str, seconds: float) -> None:
        self._child(self.first_byte, wire).observe(seconds)

    def chat_request(self, outcome: str, tokens: int, left_out: int) -> None:
        self._child(self.identification, outcome).inc()
        if outcome == "identified":
            self.memory_tokens.observe(tokens)
            self.left_out.observe(left_out)

    # -- from the event bus -------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        data = event.data
        if event.kind == "job" and "operation" in data:
            self.jobs.labels(str(data["operation"]), str(data.get("state"))).inc()
        elif event.kind == "call":
            operation = str(data.get("operation"))
            self.llm_calls.labels(operation).inc()
            for kind in ("prompt", "answer"):
                tokens = data.get(f"{kind}_tokens")
                if isinstance(tokens, int) and tokens > 0:
                    self.llm_tokens.labels(operation, kind).inc(tokens)
        elif event.kind == "chat":
            self.watcher_events.labels("deleted" if data.get("deleted") else "saved").inc()

    # -- read when asked ----------------------------------------------------------------------

    def exposition(self, queue: Mapping[str, int] | None = None) -> bytes:
        """The text Prometheus reads; `queue`: the jobs by state now, when known."""
        for state, count in (queue or {}).items():
            self.jobs_now.labels(state).set(count)
        return bytes(generate_latest(self.registry))


def _file_size(path: Path) -> Callable[[], float]:
    def size() -> float:
        total = 0
        for part in (path, path.with_name(path.name + "-wal")):
            with contextlib.suppress(OSError):  # no log file: nothing written since
                total += part.stat().st_size
        return float(total)

    return size
