"""`make_app`: the routes and middlewares over a built `Runtime`. It only wires: the
runtime builds the parts (`proxy.runtime.runtime.build_runtime`) and starts them with the
app."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from proxy.observe.logs import access_middleware
from proxy.runtime.runtime import Runtime
from proxy.web.api import Parts, add_api_routes
from proxy.web.errors import error_middleware
from proxy.web.events_api import add_event_routes
from proxy.web.guard import POLICY, add_cors_headers, guard_middleware
from proxy.web.health import add_health_routes
from proxy.web.keys import RELAY, RUNTIME
from proxy.web.memory_api import add_memory_routes
from proxy.web.page import add_page_routes
from proxy.web.relay import Relay
from proxy.web.routes import add_routes

# ST sends the whole prompt in one body; 100k-token chats are several MB.
MAX_BODY_BYTES = 256 * 1024 * 1024


def make_app(runtime: Runtime) -> web.Application:
    """The proxy application over `runtime`, whose parts start and stop with it."""
    # The error middleware is outermost: the guard's refusals are answered like any error;
    # the access log (when on) wraps them all, refusals included.
    middlewares = [error_middleware, guard_middleware]
    if runtime.settings.server.access_log:
        middlewares.insert(0, access_middleware)
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    app[RUNTIME] = runtime
    app[POLICY] = runtime.policy
    app.on_response_prepare.append(add_cors_headers)
    relay = app[RELAY] = Relay(runtime.upstream, runtime.recorder, runtime.vitals, runtime.metrics)

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        async with runtime.running():
            yield

    async def relaying(app: web.Application) -> AsyncIterator[None]:
        yield
        await relay.drain()  # answers still streaming end before the parts stop

    app.cleanup_ctx.append(lifetime)
    app.cleanup_ctx.append(relaying)
    parts = Parts.of(runtime)
    add_page_routes(app)  # before the `/recap/...` catch-all
    add_health_routes(app, runtime)  # before the catch-all that goes upstream
    add_routes(app, runtime, relay)
    add_event_routes(app, runtime.events)
    add_memory_routes(app, parts)  # first: its routes are longer than the plain chat route
    add_api_routes(app, parts)
    return app
