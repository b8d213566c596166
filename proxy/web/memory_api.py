"""`/recap/api/chats/{id}/...` for the memory, and `/recap/api/queue`: see and correct.

Scenes are named by the ST index of their last message, messages by their ST index.
Errors come back as `{"error": {"message", "type", "code"}}` with 400/404/409/503, from
the error tree through `proxy.web.errors`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from aiohttp import web

from adapters import ADAPTERS
from proxy.chat.providers import CHAT_ID_HEADER
from proxy.core.export import FORMATS, MEDIA_TYPES, to_json, to_markdown, to_world
from proxy.core.jsontypes import JSONAnswer, JSONObject, JSONValue
from proxy.core.models import Insertion, Placement
from proxy.core.plan import CHANGING, STABLE, InjectionPolicy
from proxy.errors import Conflict, NotFound, RequestError
from proxy.memory.edits.actions import MemoryActions
from proxy.web.api import Parts
from proxy.web.params import field, json_body, optional, path_number, query_number

CHAT = "/recap/api/chats/{chat_id:.+}"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Action = Callable[[web.Request, MemoryActions], Awaitable[JSONAnswer]]


def _json(parts: Parts, fn: Action) -> Handler:
    """`fn` as a route's handler: its answer as JSON, and a change announced."""

    async def handler(request: web.Request) -> web.StreamResponse:
        answer = await fn(request, parts.memory())
        if request.method != "GET":  # a change: every open dashboard shows it
            route = request.match_info.route.resource
            tail = route.canonical.partition("}")[2] if route is not None else ""
            index = request.match_info.get("index")
            parts.events.publish(
                "memory",
                chat=_chat(request),
                action=f"{request.method} {tail or '/'}",
                index=int(index) if index is not None else None,
            )
        return web.json_response(answer)

    return handler


def _chat(request: web.Request) -> str:
    return request.match_info["chat_id"]


def _index(request: web.Request) -> int:
    return path_number(request, "index")


async def overview(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.overview(_chat(request))


async def set_enabled(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    if "enabled" not in data or data["enabled"] not in (True, False, None):
        raise RequestError("`enabled` must be true, false or null")
    enabled = data["enabled"]
    return await a.set_enabled(_chat(request), enabled if isinstance(enabled, bool) else None)


async def backfill(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.backfill(_chat(request))


async def scenes(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.scenes(_chat(request))


async def entities(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.entities.listed(_chat(request))


def _entity(request: web.Request) -> str:
    return request.match_info["entity"]


def _names(data: JSONObject, name: str) -> list[str] | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(f"`{name}` must be a list of strings")
    return [str(v) for v in value]


async def entity(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.entities.one(_chat(request), _entity(request))


async def edit_entity(request: web.Request, a: MemoryActions) -> JSONAnswer:
    """PUT writes the whole entity (`name`, `type`, `aliases`, `facts` all given); PATCH
    any of them. Either way it is kept as written until released."""
    data = await json_body(request)
    if request.method == "PUT":
        missing = [k for k in ("name", "type", "aliases", "facts") if data.get(k) is None]
        if missing:
            raise RequestError(f"PUT writes the whole entity: give {', '.join(missing)} too "
                               "(or PATCH what changes)")  # fmt: skip
    return await a.entities.edit(
        _chat(request),
        _entity(request),
        new_name=optional(data, "name", str),
        type=optional(data, "type", str),
        aliases=_names(data, "aliases"),
        facts=_names(data, "facts"),
    )


async def delete_entity(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.entities.delete(_chat(request), _entity(request))


async def release_entity(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.entities.release(_chat(request), _entity(request))


async def merge_entity(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    return await a.entities.merge(_chat(request), _entity(request), field(data, "into", str))


async def scene(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.scene(_chat(request), _index(request))


async def update_scene(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    name = optional(data, "name", str)
    version = optional(data, "current_version", int)
    return await a.update_scene(_chat(request), _index(request), name=name, current_version=version)


async def edit_scene_recap(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    recap = field(data, "recap", str)
    name = optional(data, "scene_name", str)
    return await a.edit_scene_recap(_chat(request), _index(request), recap, name)


async def regenerate_scene(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.regenerate_scene(_chat(request), _index(request))


async def set_break(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    visible = optional(data, "visible", bool)
    return await a.set_break(_chat(request), _index(request), True if visible is None else visible)


async def remove_break(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.remove_break(_chat(request), _index(request))


async def running(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.running(_chat(request))


async def edit_running(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    return await a.edit_running(_chat(request), field(data, "content", str))


async def select_running(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    return await a.select_running(_chat(request), field(data, "version", int))


async def regenerate_running(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.regenerate_running(_chat(request))


async def copy_from(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    return await a.copy_from(_chat(request), field(data, "chat", str))


async def export(parts: Parts, request: web.Request) -> web.Response:
    """`GET .../export?format=markdown|json|st-world`: the memory as a file."""
    chosen = request.query.get("format", "json")
    if chosen not in FORMATS:
        raise RequestError(f"format must be one of {', '.join(FORMATS)}, not {chosen!r}")
    memory = await parts.memory().export(_chat(request))
    name = re.sub(r"[^\w.-]+", "_", memory.chat_id.rsplit("/", 1)[-1]).strip("_") or "memory"
    suffix = {"markdown": "md", "json": "json", "st-world": "world.json"}[chosen]
    headers = {"Content-Disposition": f'attachment; filename="{name}.{suffix}"'}
    if chosen == "markdown":
        return web.Response(text=to_markdown(memory), content_type=MEDIA_TYPES[chosen],
                            headers=headers)  # fmt: skip
    body = to_json(memory) if chosen == "json" else to_world(memory)
    text = json.dumps(body, ensure_ascii=False, indent=4)
    return web.Response(text=text, content_type=MEDIA_TYPES[chosen], headers=headers)


async def message_recaps(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.message_recaps(_chat(request))


async def edit_message_recap(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    return await a.edit_message_recap(_chat(request), _index(request), field(data, "recap", str))


async def check_scenes_now(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.check_scenes_now(_chat(request))


async def clear_message_recap(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.clear_message_recap(_chat(request), _index(request))


async def exclude_message(request: web.Request, a: MemoryActions) -> JSONAnswer:
    data = await json_body(request)
    excluded = field(data, "excluded", bool)
    return await a.exclude_message(_chat(request), _index(request), excluded)


async def regenerate_message(request: web.Request, a: MemoryActions) -> JSONAnswer:
    return await a.regenerate_message(_chat(request), _index(request))


async def preview(parts: Parts, request: web.Request, a: MemoryActions) -> JSONAnswer:
    """What a request carrying the whole visible chat would get: the inserted memory and
    the messages left out, through the chat path's own code."""
    chat_id = _chat(request)
    visible = await a.visible_messages(chat_id)
    messages = [{"role": "system", "content": "[Start a new Chat]"}] + [
        {"role": "user" if r.message.is_user else "assistant", "content": r.message.mes}
        for r in visible
    ]
    raw = json.dumps({"model": request.query.get("model", ""), "messages": messages}).encode()
    headers = {CHAT_ID_HEADER: chat_id}
    injector = parts.injector
    outcome = await injector.prepare(ADAPTERS["chat/completions"], raw, headers, preview=True)
    dropped = outcome.dropped
    count = injector.counter.count
    gone = set(dropped)
    sizes = [count(m["content"]) for m in messages[1:]]
    policy = injector.policy
    return {
        "chat": chat_id,
        "injected": _whole(outcome.insertions),
        "parts": _parts(outcome.insertions, policy),
        "placement": _placement(policy.placement),
        "left_out": [visible[i - 1].position for i in dropped],
        "values": dict(outcome.memory.values) if outcome.memory else {},
        # The request's token budget: the memory, the chat messages sent with it, and the
        # ones it covers that are left out.
        "budget": {
            "memory": outcome.tokens,
            "sent": sum(n for i, n in enumerate(sizes, 1) if i not in gone),
            "left_out": sum(n for i, n in enumerate(sizes, 1) if i in gone),
        },
    }  # fmt: skip


async def preview_request(parts: Parts, request: web.Request) -> web.Response:
    """`POST /recap/api/preview`: the body as it would go upstream, for a client body (a
    chat completion, Claude's or a text completion's, told apart as `identify` does)."""
    parts.memory()
    raw = await request.read()
    adapter = parts.formats.for_body(raw)
    adapter.parse(raw)  # AdapterError: a 400, before the fail-open step hides it
    outcome = await parts.injector.prepare(adapter, raw, request.headers, preview=True)
    first = outcome.insertions[0] if outcome.insertions else None
    return web.json_response(
        {
            "chat": outcome.chat_id,
            # The whole memory (every part's text), placed from the first part's index;
            # `parts` says where each part went.
            "injected": None
            if first is None
            else {**(_whole(outcome.insertions) or {}), "index": first.index},
            "parts": _parts(outcome.insertions, parts.injector.policy),
            "left_out": list(outcome.dropped),
            "body": json.loads(outcome.body),
        }
    )


def _placement(placement: Placement) -> JSONObject:
    return {
        "position": placement.position.value,
        "depth": placement.depth,
        "role": placement.role.value,
    }


def _parts(insertions: Sequence[Insertion], policy: InjectionPolicy) -> list[JSONValue]:
    """Each inserted part: which, where in the request, and the placement it follows."""
    placements = {STABLE: policy.placement, CHANGING: policy.changing}
    return [
        {
            "part": i.part,
            "index": i.index,
            "role": i.role.value,
            "tokens": i.tokens,
            "text": i.text,
            "placement": _placement(placements[i.part]),
        }
        for i in insertions
    ]


def _whole(insertions: Sequence[Insertion]) -> JSONObject | None:
    """The memory as one: the first part's role, every part's text and tokens."""
    if not insertions:
        return None
    return {
        "role": insertions[0].role.value,
        "tokens": sum(i.tokens for i in insertions),
        "text": "\n\n".join(i.text for i in insertions),
    }


async def queue(parts: Parts, request: web.Request) -> web.Response:
    """Every job kept; with `done=N`, the work not done and the newest N done jobs, and
    `older_done`, how many were left out (a backfilled story leaves hundreds); with
    `after=ID`, the jobs queued or running and every job newer than job ID (a backfill's
    progress: the work it queued, and what still holds the chat up)."""
    queue = parts.queue()
    chat = request.query.get("chat")
    shown, after = query_number(request, "done"), query_number(request, "after")
    if shown is not None and after is not None:
        raise RequestError("ask for done=N or after=ID, not both")
    answer: JSONObject = {"paused": await queue.paused()}
    embedder = parts.engine.embedder if parts.engine is not None else None
    if embedder is not None:  # its work is no job, but it is the memory's work too
        answer["embeddings"] = {"state": embedder.state, "waiting": embedder.waiting}
    if shown is not None:
        jobs, answer["older_done"] = await queue.newest_done(chat, shown)
    elif after is not None:
        jobs = await queue.live_or_after(chat, after)
    else:
        jobs = await queue.jobs(chat)
    return web.json_response({**answer, "jobs": [j.public() for j in jobs]})


async def queue_action(parts: Parts, request: web.Request) -> web.Response:
    queue = parts.queue()
    action = request.match_info["action"]
    if action == "pause":
        await queue.pause()
    elif action == "resume":
        await queue.resume()
    elif action == "clear":
        cleared = await queue.clear(request.query.get("chat"))
        return web.json_response({"cleared": cleared})
    else:
        raise NotFound(f"no queue action {action!r}")
    return web.json_response({"paused": action == "pause"})


async def retry_job(parts: Parts, request: web.Request) -> web.Response:
    job_id = path_number(request, "job")
    if not await parts.queue().retry(job_id):
        raise Conflict(f"job {job_id} is not failed or dropped (or gone)")
    return web.json_response({"retried": job_id})


def add_memory_routes(app: web.Application, parts: Parts) -> None:
    """Registered before the catch-all chat route (chat ids contain slashes)."""
    r = app.router
    message = CHAT + r"/messages/{index:\d+}"
    scene_path = CHAT + r"/scenes/{index:\d+}"
    r.add_get(CHAT + "/memory", _json(parts, overview))
    r.add_put(CHAT + "/memory", _json(parts, set_enabled))
    r.add_post(CHAT + "/memory/copy-from", _json(parts, copy_from))
    r.add_get(CHAT + "/export", partial(export, parts))
    r.add_post(CHAT + "/backfill", _json(parts, backfill))
    r.add_get(CHAT + "/preview", _json(parts, partial(preview, parts)))
    r.add_get(CHAT + "/scenes", _json(parts, scenes))
    r.add_get(CHAT + "/entities", _json(parts, entities))
    entity_path = CHAT + "/entities/{entity:[^/]+}"
    r.add_get(entity_path, _json(parts, entity))
    r.add_put(entity_path, _json(parts, edit_entity))
    r.add_patch(entity_path, _json(parts, edit_entity))
    r.add_delete(entity_path, _json(parts, delete_entity))
    r.add_post(entity_path + "/merge", _json(parts, merge_entity))
    r.add_post(entity_path + "/release", _json(parts, release_entity))
    r.add_post(CHAT + "/scene-check", _json(parts, check_scenes_now))
    r.add_get(scene_path, _json(parts, scene))
    r.add_patch(scene_path, _json(parts, update_scene))
    r.add_post(scene_path + "/recaps", _json(parts, edit_scene_recap))
    r.add_post(scene_path + "/regenerate", _json(parts, regenerate_scene))
    r.add_put(message + "/scene_break", _json(parts, set_break))
    r.add_delete(message + "/scene_break", _json(parts, remove_break))
    r.add_get(CHAT + "/running", _json(parts, running))
    r.add_post(CHAT + "/running", _json(parts, edit_running))
    r.add_put(CHAT + "/running/current", _json(parts, select_running))
    r.add_post(CHAT + "/running/regenerate", _json(parts, regenerate_running))
    r.add_get(CHAT + "/recaps", _json(parts, message_recaps))
    r.add_put(message + "/recap", _json(parts, edit_message_recap))
    r.add_delete(message + "/recap", _json(parts, clear_message_recap))
    r.add_put(message + "/excluded", _json(parts, exclude_message))
    r.add_post(message + "/recap/regenerate", _json(parts, regenerate_message))
    r.add_post("/recap/api/preview", partial(preview_request, parts))
    r.add_get("/recap/api/queue", partial(queue, parts))
    r.add_post(r"/recap/api/queue/jobs/{job:\d+}/retry", partial(retry_job, parts))
    r.add_post("/recap/api/queue/{action}", partial(queue_action, parts))
