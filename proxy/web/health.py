"""The proxy as a service: `GET /health` and `GET /metrics` (its account of itself, for
service managers, monitoring and Prometheus) and `POST /recap/api/reload` (the config and
the templates read again). All answer under the same checks as every request (with an
access key set, they need it too: Prometheus sends it as a bearer token)."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from proxy.errors import ConfigError, RequestError, TemplateError
from proxy.observe.vitals import Health
from proxy.store.overview import STATES, newest_failure, probe, queue_counts
from proxy.web.keys import METRICS, RELOADER, STORE, VITALS, WATCHER

# A store busy with a long piece of work still answers within this, or counts as failing.
STORE_WAIT = 5.0


async def health(request: web.Request) -> web.Response:
    """`{"status": "ok" | "degraded", ...}`: HTTP 200 when ok, 503 when degraded."""
    app = request.app
    store = app.get(STORE)
    queue = dict.fromkeys(STATES, 0)
    failure: str | None = None
    state = app[VITALS].store_problem or "none"
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
    watcher = app.get(WATCHER)
    report = Health(
        state, watcher.state if watcher else "off", queue, app[VITALS], failure
    ).to_json()
    return web.json_response(report, status=200 if report["status"] == "ok" else 503)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus's text format (`recap_proxy_*`)."""
    store = request.app.get(STORE)
    queue = None
    if store is not None:
        try:
            queue = await asyncio.wait_for(store.call(lambda db: queue_counts(db.db)), STORE_WAIT)
        except Exception:
            queue = None
    failing = store.failure if store is not None else request.app[VITALS].store_problem
    body = request.app[METRICS].exposition(queue, store_failing=failing is not None)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def reload(request: web.Request) -> web.Response:
    """`{"changed": [...], "restart": [...]}`: the settings that took effect, and those
    that wait for a restart; a config or template error is a 400 that changed nothing."""
    try:
        done = request.app[RELOADER].reload()
    except (ConfigError, TemplateError) as exc:
        raise RequestError(f"nothing was reloaded: {exc}") from None
    return web.json_response({"changed": done.changed, "restart": done.restart})


def add_health_routes(app: web.Application) -> None:
    """Before the catch-alls that send every other path upstream or answer 404."""
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/recap/api/reload", reload)
