"""The proxy's figures for `GET /metrics`, in Prometheus's text format (prometheus-client).

One registry per app (not the library's global one), so that two apps in one process (the
tests) never add up. What the engine does reaches here as events of the `EventBus` (jobs,
the proxy's own LLM calls, chat files read anew), counted by prometheus-client's own
metrics; the store's size and the queue are read when Prometheus asks.

The chat path's figures (six per request) are plain numbers the event loop adds to, handed
to prometheus-client as metric families when it collects. Its own metrics take a lock per
bucket and validate labels on every call: 6 us a request in a warm loop, 15-25 us in a
loaded server, where the whole relay is a few hundred.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from itertools import accumulate
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from proxy.observe.events import Event

# Added latency and time to first byte: a millisecond is a lot for the proxy itself, and
# an upstream can take minutes to its first byte.
_LATENCY = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_FIRST_BYTE = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_TOKENS = (0, 100, 250, 500, 1000, 1500, 2500, 4000, 8000)
_MESSAGES = (0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)


class _Counts:
    """A counter family the chat path adds to: a number per label values."""

    def __init__(self, name: str, doc: str, labels: tuple[str, ...]) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.series: dict[tuple[str, ...], float] = {}

    def inc(self, labels: tuple[str, ...]) -> None:
        self.series[labels] = self.series.get(labels, 0.0) + 1

    def family(self) -> Metric:
        family = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        for labels, value in list(self.series.items()):
            family.add_metric(labels, value)
        return family


class _Buckets:
    """A histogram family the chat path adds to: per label values, the count in each
    bucket (the last one +Inf) and then the sum."""

    def __init__(
        self, name: str, doc: str, bounds: tuple[float, ...], labels: tuple[str, ...] = ()
    ) -> None:
        self.name, self.doc, self.bounds, self.labels = name, doc, bounds, labels
        self.series: dict[tuple[str, ...], list[float]] = {}
        if not labels:  # shown from the start, at zero, as prometheus-client shows its own
            self.series[()] = [0.0] * (len(bounds) + 2)

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = [0.0] * (len(self.bounds) + 2)
        # Prometheus's buckets hold what is at most their bound (`le`).
        series[bisect_left(self.bounds, value)] += 1
        series[-1] += value

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        edges = [repr(float(bound)) for bound in self.bounds] + ["+Inf"]  # as Go writes them
        for labels, series in list(self.series.items()):
            cumulative = accumulate(series[:-1])  # Prometheus's buckets count all below
            family.add_metric(labels, list(zip(edges, cumulative, strict=True)), series[-1])
        return family


class _ChatPath:
    """The chat path's families, as a collector of the app's registry."""

    def __init__(self, *families: _Counts | _Buckets) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.family()


class Metrics:
    """Every figure the proxy exposes. The chat path reports from the event loop (its
    figures are plain numbers, and `exposition` runs there too); events come from any
    thread, into prometheus-client's own thread-safe metrics."""

    def __init__(self, store_path: Path | None = None) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = _Counts(
            "recap_proxy_requests",
            "Requests relayed upstream, by route prefix, HTTP status and wire format.",
            ("route", "status", "format"),
        )
        self.added_latency = _Buckets(
            "recap_proxy_added_latency_seconds",
            "The proxy's own time before a request goes upstream (parsing, identification, "
            "memory, encoding).",
            _LATENCY,
            ("format",),
        )
        self.first_byte = _Buckets(
            "recap_proxy_time_to_first_byte_seconds",
            "From the request's arrival to its answer's first byte written back.",
            _FIRST_BYTE,
            ("format",),
        )
        self.identification = _Counts(
            "recap_proxy_identification",
            "Chat requests by identification outcome (identified, unidentified, no_memory).",
            ("outcome",),
        )
        self.memory_tokens = _Buckets(
            "recap_proxy_inserted_memory_tokens",
            "Memory tokens inserted into a chat request (both parts).",
            _TOKENS,
        )
        self.left_out = _Buckets(
            "recap_proxy_messages_left_out",
            "Chat messages left out of a request because the running recap covers them.",
            _MESSAGES,
        )
        registry.register(
            _ChatPath(
                self.requests,
                self.added_latency,
                self.first_byte,
                self.identification,
                self.memory_tokens,
                self.left_out,
            )
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
        self.store_failing = Gauge(
            "recap_proxy_store_failing",
            "1 while the store cannot be written or used (a full disk, a damaged file): chats "
            "are not mirrored and memory is not kept; /health says why.",
            registry=registry,
        )

    # -- reported by the chat path (the event loop's thread only) ----------------------------

    def relayed(self, route: str, status: int | str, wire: str) -> None:
        self.requests.inc((route or "/", str(status), wire))

    def latency(self, wire: str, seconds: float) -> None:
        self.added_latency.observe((wire,), seconds)

    def first_byte_after(self, wire: str, seconds: float) -> None:
        self.first_byte.observe((wire,), seconds)

    def chat_request(self, outcome: str, tokens: int, left_out: int) -> None:
        self.identification.inc((outcome,))
        if outcome == "identified":
            self.memory_tokens.observe((), tokens)
            self.left_out.observe((), left_out)

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

    def exposition(
        self, queue: Mapping[str, int] | None = None, *, store_failing: bool = False
    ) -> bytes:
        """The text Prometheus reads; `queue`: the jobs by state now, when known."""
        for state, count in (queue or {}).items():
            self.jobs_now.labels(state).set(count)
        self.store_failing.set(1 if store_failing else 0)
        return bytes(generate_latest(self.registry))


def _file_size(path: Path) -> Callable[[], float]:
    def size() -> float:
        total = 0
        for part in (path, path.with_name(path.name + "-wal")):
            with contextlib.suppress(OSError):  # no log file: nothing written since
                total += part.stat().st_size
        return float(total)

    return size
