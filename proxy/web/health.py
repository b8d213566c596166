"""The proxy as a service: `GET /health` and `GET /metrics` (its account of itself, for
service managers, monitoring and Prometheus) and `POST /recap/api/reload` (the config and
the templates read again). All answer under the same checks as every request (with an
access key set, they need it too: Prometheus sends it as a bearer token)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from proxy.errors import ConfigError, RequestError, TemplateError
from proxy.library.watcher import Watcher
from proxy.memory.embedder import Embedder
from proxy.observe.metrics import Metrics
from proxy.observe.vitals import Health, Vitals
from proxy.runtime.reload import Reloader
from proxy.runtime.runtime import Runtime
from proxy.store import Store
from proxy.store.overview import STATES, newest_failure, probe, queue_counts

# A store busy with a long piece of work still answers within this, or counts as failing.
STORE_WAIT = 5.0


@dataclass(frozen=True, slots=True)
class Service:
    """The service's routes, with the parts they report on."""

    store: Store | None
    watcher: Watcher | None
    vitals: Vitals
    metrics: Metrics
    reloader: Reloader
    # The engine's embedder (recall by meaning), looked up at each call: None when off.
    embedder: Callable[[], Embedder | None] = lambda: None

    async def health(self, request: web.Request) -> web.Response:
        """`{"status": "ok" | "degraded", ...}`: HTTP 200 when ok, 503 when degraded."""
        store = self.store
        queue = dict.fromkeys(STATES, 0)
        failure: str | None = None
        state = self.vitals.store_problem or "none"
        if store is not None:
            try:
                queue, failure = await asyncio.wait_for(
                    store.call(lambda db: (probe(db.db, time.time()), newest_failure(db.db))),
                    STORE_WAIT,
                )
                state = store.failure or "ok"  # reads work on a full disk; writes say it
            except TimeoutError:
                state = f"no answer within {STORE_WAIT:.0f} s"
            except Exception as exc:  # the store's own error is what the operator needs
                state = store.failure or f"{type(exc).__name__}: {exc}"
        watching = self.watcher.state if self.watcher else "off"
        embedder = self.embedder()
        embeddings, asked = "off", (0, 0)
        if embedder is not None:
            embeddings = embedder.state
            asked = (embedder.ready_counts[True], embedder.ready_counts[False])
        health = Health(state, watching, queue, self.vitals, failure, embeddings, asked)
        report = health.to_json()
        return web.json_response(report, status=200 if report["status"] == "ok" else 503)

    async def exposition(self, request: web.Request) -> web.Response:
        """Prometheus's text format (`recap_proxy_*`)."""
        store = self.store
        queue = None
        if store is not None:
            try:
                queue = await asyncio.wait_for(
                    store.call(lambda db: queue_counts(db.db)), STORE_WAIT
                )
            except Exception:
                queue = None
        failing = store.failure if store is not None else self.vitals.store_problem
        body = self.metrics.exposition(queue, store_failing=failing is not None)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def reload(self, request: web.Request) -> web.Response:
        """`{"changed": [...], "restart": [...]}`: the settings that took effect, and
        those that wait for a restart; a config or template error is a 400 that changed
        nothing."""
        try:
            done = self.reloader.reload()
        except (ConfigError, TemplateError) as exc:
            raise RequestError(f"nothing was reloaded: {exc}") from None
        return web.json_response({"changed": done.changed, "restart": done.restart})


def add_health_routes(app: web.Application, runtime: Runtime) -> None:
    """Before the catch-alls that send every other path upstream or answer 404."""
    service = Service(
        runtime.store,
        runtime.watcher,
        runtime.vitals,
        runtime.metrics,
        runtime.reloader,
        lambda: runtime.engine.embedder if runtime.engine is not None else None,
    )
    app.router.add_get("/health", service.health)
    app.router.add_get("/metrics", service.exposition)
    app.router.add_post("/recap/api/reload", service.reload)
