"""`GET /recap/api/events`: the proxy's events as a server-sent event stream.

Each event goes as `id: N`, `event: <kind>`, `data: <json>`. A client that reconnects
with `Last-Event-ID: N` (the header, or `?last_event_id=N` for clients that cannot set
it) first gets every kept event after N, in order; when some of those are gone it gets
one `reset` event instead (reload everything). A comment line every `HEARTBEAT` seconds
keeps idle connections open through proxies and tells a client the stream is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial

import orjson
from aiohttp import web

from proxy.errors import RequestError
from proxy.observe.events import Event, EventBus

HEARTBEAT = 15.0
RETRY_MS = 2000  # how long a client waits before it reconnects


def frame(event: Event) -> bytes:
    data = orjson.dumps({"id": event.id, "kind": event.kind, **event.data})
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (event.id, event.kind.encode(), data)


def _last_id(request: web.Request, bus: EventBus) -> int | None:
    raw = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw)
    except ValueError:
        raise RequestError(f"Last-Event-ID must be an event number, not {raw!r}") from None
    return min(max(value, 0), bus.last_id)


async def events(bus: EventBus, request: web.Request) -> web.StreamResponse:
    """The live stream of `bus`'s events, from `Last-Event-ID` on when it is given."""
    last = _last_id(request, bus)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    async with bus.subscribe() as queue:
        await response.prepare(request)
        await response.write(b"retry: %d\n: recap-proxy events\n\n" % RETRY_MS)
        sent = bus.last_id if last is None else last
        if last is not None:
            missed = bus.since(last)
            if missed is None:
                reset = {"kind": "reset", "id": bus.last_id, "reason": "events were missed"}
                await response.write(b"event: reset\ndata: %s\n\n" % orjson.dumps(reset))
                sent = bus.last_id
            else:
                for old in missed:
                    await response.write(frame(old))
                    sent = old.id
        with contextlib.suppress(ConnectionResetError):
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=HEARTBEAT)
                except TimeoutError:
                    await response.write(b": alive\n\n")
                    continue
                if event is None:
                    break  # the server is stopping
                if event.id <= sent:
                    continue  # replayed already (or from before this stream began)
                await response.write(frame(event))
    return response


def add_event_routes(app: web.Application, bus: EventBus) -> None:
    async def close_streams(app: web.Application) -> None:
        bus.close()

    app.router.add_get("/recap/api/events", partial(events, bus))
    app.on_shutdown.append(close_streams)
