"""`/recap/api/chats/{id}/...` for the memory, and `/recap/api/queue`: see and correct.

Scenes are named by the ST index of their last message, messages by their ST index.
Errors come back as `{"error": {"message", "type", "code"}}` with 400/404/409/503.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from adapters import ADAPTERS
from proxy.errors import AdapterError, Conflict, NotFound
from proxy.memory.actions import MemoryActions
from proxy.memory.engine import MemoryEngine
from proxy.providers import CHAT_ID_HEADER, PREVIEW_HEADER
from proxy.web.api import _error
from proxy.web.keys import ENGINE, INJECTOR

CHAT = "/recap/api/chats/{chat_id:.+}"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _engine(request: web.Request) -> MemoryEngine:
    engine = request.app.get(ENGINE)
    if engine is None:
        raise _error(
            web.HTTPServiceUnavailable,
            "the memory engine is not running (no SillyTavern data folder, or the server "
            "runs with a fixed memory)",
            "no_memory_engine",
        )
    return engine


def _guarded(fn: Callable[[web.Request, MemoryActions], Awaitable[Any]]) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        actions = MemoryActions(_engine(request))
        try:
            result = await fn(request, actions)
        except NotFound as exc:
            raise _error(web.HTTPNotFound, str(exc), "not_found") from None
        except Conflict as exc:
            raise _error(web.HTTPConflict, str(exc), "conflict") from None
        return web.json_response(result)

    return handler


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        data = await request.json() if request.body_exists else {}
    except json.JSONDecodeError:
        raise _error(web.HTTPBadRequest, "the body is not JSON", "bad_request") from None
    if not isinstance(data, dict):
        raise _error(web.HTTPBadRequest, "the body must be a JSON object", "bad_request")
    return data


def _field(data: dict[str, Any], name: str, kind: type, *, required: bool = True) -> Any:
    value = data.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _error(web.HTTPBadRequest, f"`{name}` must be a {kind.__name__}", "bad_request")
    return value


def _chat(request: web.Request) -> str:
    return request.match_info["chat_id"]


def _index(request: web.Request) -> int:
    return int(request.match_info["index"])


async def overview(request: web.Request, a: MemoryActions) -> Any:
    return await a.overview(_chat(request))


async def set_enabled(request: web.Request, a: MemoryActions) -> Any:
    data = await _body(request)
    if "enabled" not in data or data["enabled"] not in (True, False, None):
        raise _error(web.HTTPBadRequest, "`enabled` must be true, false or null", "bad_request")
    return await a.set_enabled(_chat(request), data["enabled"])


async def backfill(request: web.Request, a: MemoryActions) -> Any:
    return await a.backfill(_chat(request))


async def scenes(request: web.Request, a: MemoryActions) -> Any:
    return await a.scenes(_chat(request))


async def scene(request: web.Request, a: MemoryActions) -> Any:
    return await a.scene(_chat(request), _index(request))


async def update_scene(request: web.Request, a: MemoryActions) -> Any:
    data = await _body(request)
    name = _field(data, "name", str, required=False)
    version = _field(data, "current_version", int, required=False)
    return await a.update_scene(_chat(request), _index(request), name=name, current_version=version)


async def edit_scene_recap(request: web.Request, a: MemoryActions) -> Any:
    data = await _body(request)
    recap = _field(data, "recap", str)
    name = _field(data, "scene_name", str, required=False)
    return await a.edit_scene_recap(_chat(request), _index(request), recap, name)


async def regenerate_scene(request: web.Request, a: MemoryActions) -> Any:
    return await a.regenerate_scene(_chat(request), _index(request))


async def set_break(request: web.Request, a: MemoryActions) -> Any:
    data = await _body(request)
    visible = _field(data, "visible", bool, required=False)
    return await a.set_break(_chat(request), _index(request), True if visible is None else visible)


async def remove_break(request: web.Request, a: MemoryActions) -> Any:
    return await a.remove_break(_chat(request), _index(request))


async def running(request: web.Request, a: MemoryActions) -> Any:
    return await a.running(_chat(request))


async def edit_running(request: web.Request, a: MemoryActions) -> Any:
    data = await _body(request)
    return await a.edit_running(_chat(request), _field(data, "content", str))


async def select_running(request: web.Request, a: MemoryActions) -> Any:
    data = await _body(request)
    return await a.select_running(_chat(request), _field(data, "version", int))


async def regenerate_running(request: web.Request, a: MemoryActions) -> Any:
    return await a.regenerate_running(_chat(request))


async def message_recaps(request: web.Request, a: MemoryActions) -> Any:
    return await a.message_recaps(_chat(request))


async def edit_message_recap(request: web.Request, a: MemoryActions) -> Any:
    data = await _body(request)
    return await a.edit_message_recap(_chat(request), _index(request), _field(data, "recap", str))


async def exclude_message(request: web.Request, a: MemoryActions) -> Any:
    data = await _body(request)
    excluded = _field(data, "excluded", bool)
    return await a.exclude_message(_chat(request), _index(request), excluded)


async def regenerate_message(request: web.Request, a: MemoryActions) -> Any:
    return await a.regenerate_message(_chat(request), _index(request))


async def preview(request: web.Request, a: MemoryActions) -> Any:
    """What a request carrying the whole visible chat would get: the inserted memory and
    the messages left out, through the chat path's own code."""
    chat_id = _chat(request)
    visible = await a.visible_messages(chat_id)
    messages = [{"role": "system", "content": "[Start a new Chat]"}] + [
        {"role": "user" if r.message.is_user else "assistant", "content": r.message.mes}
        for r in visible
    ]
    raw = json.dumps({"model": request.query.get("model", ""), "messages": messages}).encode()
    headers = {CHAT_ID_HEADER: chat_id, PREVIEW_HEADER: "1"}
    outcome = await request.app[INJECTOR].prepare(ADAPTERS["chat/completions"], raw, headers)
    dropped = outcome.memory.drop if outcome.memory and outcome.insertion else ()
    insertion = outcome.insertion
    return {
        "chat": chat_id,
        "injected": None
        if insertion is None
        else {"role": insertion.role.value, "tokens": insertion.tokens, "text": insertion.text},
        "left_out": [visible[i - 1].position for i in dropped],
        "values": dict(outcome.memory.values) if outcome.memory else {},
    }


async def preview_request(request: web.Request) -> web.Response:
    """`POST /recap/api/preview`: the body as it would go upstream, for a client body."""
    _engine(request)
    raw = await request.read()
    adapter = ADAPTERS["chat/completions"]
    try:
        adapter.parse(raw)
    except AdapterError as exc:
        raise _error(web.HTTPBadRequest, str(exc), "bad_request") from None
    headers = {**request.headers, PREVIEW_HEADER: "1"}
    outcome = await request.app[INJECTOR].prepare(adapter, raw, headers)
    insertion = outcome.insertion
    return web.json_response(
        {
            "chat": outcome.chat_id,
            "injected": None
            if insertion is None
            else {"index": insertion.index, "role": insertion.role.value, "text": insertion.text},
            "left_out": list(outcome.memory.drop) if outcome.memory and insertion else [],
            "body": json.loads(outcome.body),
        }
    )


async def queue(request: web.Request) -> web.Response:
    engine = _engine(request)
    chat_id = request.query.get("chat")
    jobs = await engine.queue.jobs(chat_id)
    paused = await engine.library.run(engine.library.store.jobs.paused)
    return web.json_response({"paused": paused, "jobs": [j.public() for j in jobs]})


async def queue_action(request: web.Request) -> web.Response:
    engine = _engine(request)
    action = request.match_info["action"]
    if action == "pause":
        await engine.queue.pause()
    elif action == "resume":
        await engine.queue.resume()
    elif action == "clear":
        cleared = await engine.queue.clear(request.query.get("chat"))
        return web.json_response({"cleared": cleared})
    else:
        raise _error(web.HTTPNotFound, f"no queue action {action!r}", "not_found")
    return web.json_response({"paused": action == "pause"})


async def retry_job(request: web.Request) -> web.Response:
    engine = _engine(request)
    job_id = int(request.match_info["job"])
    if not await engine.queue.retry(job_id):
        raise _error(
            web.HTTPConflict, f"job {job_id} is not failed or dropped (or gone)", "conflict"
        )
    return web.json_response({"retried": job_id})


def add_memory_routes(app: web.Application) -> None:
    """Registered before the catch-all chat route (chat ids contain slashes)."""
    r = app.router
    message = CHAT + r"/messages/{index:\d+}"
    scene_path = CHAT + r"/scenes/{index:\d+}"
    r.add_get(CHAT + "/memory", _guarded(overview))
    r.add_put(CHAT + "/memory", _guarded(set_enabled))
    r.add_post(CHAT + "/backfill", _guarded(backfill))
    r.add_get(CHAT + "/preview", _guarded(preview))
    r.add_get(CHAT + "/scenes", _guarded(scenes))
    r.add_get(scene_path, _guarded(scene))
    r.add_patch(scene_path, _guarded(update_scene))
    r.add_post(scene_path + "/recaps", _guarded(edit_scene_recap))
    r.add_post(scene_path + "/regenerate", _guarded(regenerate_scene))
    r.add_put(message + "/scene_break", _guarded(set_break))
    r.add_delete(message + "/scene_break", _guarded(remove_break))
    r.add_get(CHAT + "/running", _guarded(running))
    r.add_post(CHAT + "/running", _guarded(edit_running))
    r.add_put(CHAT + "/running/current", _guarded(select_running))
    r.add_post(CHAT + "/running/regenerate", _guarded(regenerate_running))
    r.add_get(CHAT + "/recaps", _guarded(message_recaps))
    r.add_put(message + "/recap", _guarded(edit_message_recap))
    r.add_put(message + "/excluded", _guarded(exclude_message))
    r.add_post(message + "/recap/regenerate", _guarded(regenerate_message))
    r.add_post("/recap/api/preview", preview_request)
    r.add_get("/recap/api/queue", queue)
    r.add_post(r"/recap/api/queue/jobs/{job:\d+}/retry", retry_job)
    r.add_post("/recap/api/queue/{action}", queue_action)
